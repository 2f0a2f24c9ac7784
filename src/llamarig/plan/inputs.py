"""Plan inputs: a Deployment (a model reference, its command and settings, the hardware) ->
PlanInputs, the model read from its GGUF header, the catalogue or a remote header.

``llamarig plan``, ``render``, ``launch``, ``tune`` and ``check``'s memory rule all use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from llamarig.diagnostics import Diagnostic, warning
from llamarig.errors import GGUFError, InputError
from llamarig.flags.argv import Command
from llamarig.gguf import load_spec
from llamarig.hardware.types import GPU, Hardware
from llamarig.hub.ref import is_remote, parse_ref
from llamarig.i18n import _
from llamarig.plan.config import ServerConfig
from llamarig.plan.deployment import Deployment, deployment
from llamarig.plan.planner import make_plan
from llamarig.plan.result import Plan, PlanInputs

if TYPE_CHECKING:
    from llamarig.catalogue.models import CatalogueModel, MMProjInfo
    from llamarig.gguf.spec import ModelSpec


#: diagnostic codes: MODEL / --mmproj / --draft and the command's own disagree
MODEL_DISAGREES = "model-disagrees"


def _load_model(text: str) -> tuple[ModelSpec, CatalogueModel | None]:
    from llamarig.catalogue.models import resolve_model  # lazy: catalogue (15 ms) off --help

    spec, cat = resolve_model(text)
    if spec.is_mmproj:
        raise GGUFError(text, _("is an mmproj (projector) file, not a language model; pass it with --mmproj"))
    return spec, cat


def _mmproj_from_file(path: str, image_max_tokens: int = 0) -> MMProjInfo:
    return _mmproj_from_spec(load_spec(path), path, image_max_tokens)


def _mmproj_from_spec(spec: ModelSpec, path: str, image_max_tokens: int = 0) -> MMProjInfo:
    from llamarig.plan.mmproj.projector import (  # lazy: 4 ms, off the --help path
        mmproj_info_from_spec,
    )

    if spec.projector is None:
        raise GGUFError(path, _("is not an mmproj file (general.architecture is not 'clip')"))
    return mmproj_info_from_spec(spec, Path(path).name, image_max_tokens or None)


def repo_mmproj(model: str, image_max_tokens: int = 0) -> MMProjInfo | None:
    """For a hub reference: the repo's projector as llama-server's ``-hf`` picks it (it loads one
    by default, unless --no-mmproj), or None when the repo has none."""
    from llamarig.hub.resolve import repo_mmproj as find  # lazy: huggingface_hub, remote refs only

    spec = find(model)
    return None if spec is None else _mmproj_from_spec(spec, spec.path, image_max_tokens)


def resolve_mmproj(arg: str | None, catalogue_model: CatalogueModel | None,
                   image_max_tokens: int = 0) -> MMProjInfo | None:
    from llamarig.catalogue.models import catalogue_mmproj  # lazy: off the --help path

    if arg is None or arg.lower() == "none":
        return None
    if not Path(arg).exists() and is_remote(arg):
        from llamarig.hub.resolve import load_remote  # lazy: huggingface_hub, remote refs only

        return _mmproj_from_spec(load_remote(arg), arg, image_max_tokens)
    if Path(arg).exists() or arg.endswith(".gguf"):
        return _mmproj_from_file(arg, image_max_tokens)
    kind = arg.lower()
    if kind not in ("catalogue", "auto", "default", "f16", "bf16"):
        raise InputError(_("--mmproj {arg}: expected a file, catalogue, f16, bf16 or none").format(arg=arg))
    if catalogue_model is None:
        raise InputError(_("--mmproj {arg}: only catalogue models know their mmproj; give the mmproj file instead").format(arg=arg))
    mm = catalogue_mmproj(catalogue_model, kind)
    if mm is None:
        raise InputError(_("--mmproj {arg}: catalogue model {id} has no {kind} mmproj entry").format(arg=arg, id=catalogue_model.id, kind=kind))
    return mm


def _model_ref(d: Deployment) -> str:
    """The model the plan is for: MODEL, else the command's -m, else what -hf / -mu names (plan
    reads that header, llamarig.hub)."""
    cfg = d.config
    hub_model: str | None = None
    if cfg.hf_repo:
        # llama-server loads the file it downloads for -hf, whatever -m says (common/arg.cpp:519-530
        # sets model.path to the downloaded primary file)
        if cfg.model:
            raise InputError(_("-m {model} and -hf {hf_repo} together: llama-server would load the file downloaded for "
                               "-hf, not -m; drop one").format(model=cfg.model, hf_repo=cfg.hf_repo))
        if not d.model:
            hub_model = f"hf:{cfg.hf_repo.split(':')[0]}/{cfg.hf_file}" if cfg.hf_file else f"hf:{cfg.hf_repo}"
    if cfg.model_url and not d.model and not cfg.model and not hub_model:
        hub_model = cfg.model_url  # -mu URL: plan reads its header
    model = d.model or cfg.model or hub_model
    if not model:
        raise InputError(_("no model: give MODEL (a GGUF path or catalogue id) or -m in the llama-server command"))
    return model


def _disagreements(d: Deployment) -> list[Diagnostic]:
    """MODEL / --mmproj / --draft beside a command that names another: the plan is for the former."""
    cfg = d.config
    out = []
    for what, flag, mine, theirs in (("MODEL", "-m", d.model, cfg.model), ("--mmproj", "--mmproj", d.mmproj, cfg.mmproj),
                                     ("--draft", "-md", d.draft, cfg.draft_model)):
        if mine and theirs and mine != theirs:
            out.append(warning(MODEL_DISAGREES, _(
                "{what} {mine} and {flag} {theirs} disagree: the plan is for {mine}; the {flag} "
                "{theirs} of the llama-server command is ignored").format(
                what=what, mine=mine, flag=flag, theirs=theirs)))
    return out


def _projector(model: str, mm_arg: str | None, cat: CatalogueModel | None, cfg: ServerConfig) -> MMProjInfo | None:
    if mm_arg is None and is_remote(model) and not Path(model).exists() and parse_ref(model).hub != "url":
        # llama-server -hf fetches and loads it by itself: nothing to add to the command
        return repo_mmproj(model, cfg.image_max_tokens)
    return resolve_mmproj(mm_arg, cat, cfg.image_max_tokens)


def _shown(cfg: ServerConfig, model: str, spec: ModelSpec, cat: CatalogueModel | None, mm_arg: str | None,
           mmproj: MMProjInfo | None, draft: str | None) -> ServerConfig:
    """``cfg`` as the plan's command shows it: a hub model as -hf, a catalogue model and projector
    as placeholders (<NAME-QUANT.gguf>), the draft model."""
    shown_model: str | None = model
    hf_repo, hf_file = cfg.hf_repo, cfg.hf_file
    if is_remote(model) and not Path(model).exists():
        ref = parse_ref(model)
        if ref.hub != "url":  # llama-server -hf OWNER/REPO[:QUANT] [-hff FILE] names it
            shown_model, hf_repo, hf_file = None, ref.hf_repo_arg, ref.file or None
    elif cat is not None and not Path(model).exists():
        shown_model = f"<{spec.name or cat.id}-{spec.path.split(':')[-1].upper()}.gguf>"
    shown_mm = None if mm_arg in (None, "none") else mm_arg
    if shown_mm and mmproj is not None and not Path(shown_mm).exists() and not shown_mm.endswith(".gguf"):
        shown_mm = f"<mmproj-{shown_mm.upper() if shown_mm.lower() in ('f16', 'bf16') else 'F16'}.gguf>"
    return replace(cfg, model=shown_model, hf_repo=hf_repo, hf_file=hf_file, mmproj=shown_mm, draft_model=draft)


def build_inputs(d: Deployment) -> PlanInputs:
    """The planner's inputs for ``d``: its model (and projector, draft) read from their headers or
    the catalogue, its settings and hardware."""
    cfg = d.config
    model = _model_ref(d)
    problems = _disagreements(d)
    spec, cat = _load_model(model)
    mm_arg = d.mmproj or cfg.mmproj
    mmproj = _projector(model, mm_arg, cat, cfg)
    d_arg = d.draft or cfg.draft_model
    draft = _load_model(d_arg)[0] if d_arg else None
    cfg = replace(_shown(cfg, model, spec, cat, mm_arg, mmproj, d_arg), problems=(*cfg.problems, *problems))
    return PlanInputs(spec, cfg, d.hardware, mmproj, draft, d.overhead_bytes, diagnostics=d.diagnostics)


def build_plan(d: Deployment) -> Plan:
    """The memory plan of ``d`` (no speed)."""
    return make_plan(build_inputs(d))


def plan_for_check(model: str | None, mmproj: str | None, gpus: Sequence[GPU], ram: int | None,
                   argv: Command | list[str]) -> Plan:
    """``check --gpu``'s memory rule (flags.rules.Context.planner); ``argv``: a Command is planned as parsed."""
    return build_plan(deployment(model, command=argv, hardware=Hardware(gpus=tuple(gpus), ram_bytes=ram),
                                 mmproj=mmproj))
