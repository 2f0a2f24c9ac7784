"""``llamarig inspect MODEL``: what the model is, from its GGUF header alone (or, for a catalogue
id such as ``qwen3.6-27b:iq4_nl``, from the built-in catalogue entry, no file read)."""

from __future__ import annotations

import json
from collections import Counter

import click
from rich.console import Console
from rich.text import Text

from llamarig import api
from llamarig.cli.help import HelpCommand
from llamarig.cli.lang import N_, _, localize
from llamarig.cli.layout import Column, Sheet, labelled, print_wrapped
from llamarig.gguf import ModelSpec
from llamarig.i18n import listing
from llamarig.units import fmt_bytes


def _v(x: object) -> str:
    """A header value for human text: ``?`` where the header does not say (JSON keeps null)."""
    return "?" if x is None else str(x)


def _layer_runs(spec: ModelSpec) -> list[tuple[str, int, str, str]]:
    """Group consecutive layers of the same shape: (range, count, kind, shape text)."""
    rows: list[tuple[str, int, str, str]] = []
    start = 0
    layers = spec.layers
    for i in range(1, len(layers) + 1):
        a = layers[start]
        if i < len(layers):
            b = layers[i]
            same = (a.kind, a.n_head, a.n_head_kv, a.head_dim_k, a.head_dim_v, a.nextn) == (
                b.kind, b.n_head, b.n_head_kv, b.head_dim_k, b.head_dim_v, b.nextn
            )
            if same:
                continue
        kind = _(KINDS.get(a.kind, a.kind)) + (" (MTP/nextn)" if a.nextn else "")
        if a.kind == "recurrent":
            shape = _("recurrent state (no KV)")
        else:
            shape = _("{heads} heads, {kv} KV heads × {k}/{v}").format(
                heads=a.n_head, kv=a.n_head_kv, k=a.head_dim_k, v=a.head_dim_v)
        rng = f"{start}" if i - 1 == start else f"{start}–{i - 1}"
        rows.append((rng, i - start, kind, shape))
        start = i
    return rows


#: layer kinds, as the tables say them
KINDS = {"attention": N_("attention"), "recurrent": N_("recurrent"), "swa": N_("sliding window")}


def _model_rows(spec: ModelSpec) -> list[tuple[str, str]]:
    """(field, value) of a language model's shape: layers, sizes, context, recurrent state, experts, RoPE."""
    kinds = Counter(ly.kind for ly in spec.layers if not ly.nextn)
    kinds_n = [_("{n} {kind}").format(n=n, kind=_(KINDS.get(k, k))) for k, n in kinds.items()]
    if spec.nextn_layers:
        kinds_n.append(_("{n} MTP/nextn").format(n=spec.nextn_layers))
    blocks = listing(kinds_n)
    rows = [(_("layers"), _("{n} blocks: {kinds}").format(n=spec.n_layer, kinds=blocks)),
            ("n_embd / n_ff / n_vocab", f"{_v(spec.n_embd)} / {_v(spec.n_ff)} / {_v(spec.n_vocab)}"),
            ("n_ctx_train", _v(spec.n_ctx_train))]
    if spec.swa_window:
        rows.append((_("sliding window"), _("{n} tokens").format(n=spec.swa_window)))
    if spec.recurrent:
        r = spec.recurrent
        n_rec = kinds.get("recurrent", 0)
        per_seq = 4 * (r.n_embd_r + r.n_embd_s) * n_rec
        rows.append((_("recurrent state"), _(
            "conv {conv}, inner {inner}, state {state}, groups {groups}, dt_rank {rank}: {size} per sequence "
            "(= 4 B × (n_embd_r {r} + n_embd_s {s}) × {n} layers)").format(
            conv=r.conv_kernel, inner=r.inner_size, state=r.state_size, groups=r.group_count, rank=r.time_step_rank,
            size=fmt_bytes(per_seq), r=r.n_embd_r, s=r.n_embd_s, n=n_rec)))
    if spec.n_expert:
        rows.append((_("experts"), _("{used} of {n} used, expert n_ff {ff}").format(
            used=spec.n_expert_used, n=spec.n_expert, ff=_v(spec.n_ff_expert))))
    if isinstance(spec.rope.freq_base, (int, float)) and spec.rope.freq_base:
        rope = _("base {base:g}, dims {dims}").format(base=spec.rope.freq_base, dims=_v(spec.rope.dimension_count))
        if spec.rope.scaling_type:
            rope += _(", scaling {kind} ×{factor}").format(kind=spec.rope.scaling_type,
                                                          factor=_v(spec.rope.scaling_factor))
        rows.append(("RoPE", rope))
    return rows


def _rows(spec: ModelSpec) -> list[tuple[str, str]]:
    """(field, value) of everything the header says, for a person."""
    rows = [(_("architecture"), spec.architecture + (f"  ({spec.name})" if spec.name else ""))]
    if spec.source == "catalogue":
        rows.append((_("source"), _("catalogue entry (no file read): shapes and sizes from the built-in catalogue, "
                                    "tensors are per-layer aggregates (llamarig models)")))
    if spec.projector is not None:
        pj = spec.projector
        rows.append((_("projector"), f"{_v(pj.projector_type)}  vision={pj.has_vision} audio={pj.has_audio}"))
        rows.append((_("vision encoder"), _("{n} layers, n_embd {embd}, image {image}px, patch {patch}px").format(
            n=_v(pj.n_layer), embd=_v(pj.n_embd), image=_v(pj.image_size), patch=_v(pj.patch_size))))
    else:
        rows += _model_rows(spec)
    types: Counter[str] = Counter()
    for tensor in spec.tensors:
        types[tensor.ggml_type] += tensor.n_bytes
    rows.append((_("weights"), _("{size} in {n} tensors ({types})").format(
        size=fmt_bytes(spec.weights_bytes), n=spec.tensor_count,
        types=", ".join((_("catalogue") if k == "catalogue" else k) + " " + fmt_bytes(v)
                        for k, v in types.most_common(4)))))
    if spec.origin is not None:
        rows.append((_("file"), _("{size} ({source})").format(size=fmt_bytes(spec.file_bytes),
                                                             source=localize(spec.origin.size_source))))
    else:
        rows.append((_("file"), _("{size} in {n} file(s)").format(size=fmt_bytes(spec.file_bytes), n=len(spec.files))))
    return rows


def render_spec(spec: ModelSpec, console: Console) -> None:
    """The header as two sheets (fields, then layer shapes by run), then its warnings."""
    t = Sheet([Column(_("field"), key=True), Column(_("value"), prose=True, min_width=30)], title=Text(spec.path),
              rule=False)
    for field, value in _rows(spec):
        t.add_row(Text(field, style="bold"), str(value))
    console.print(t)
    if spec.layers:
        lt = Sheet([Column(_("layers"), key=True), Column(_("count"), justify="right"), Column(_("kind")),
                    Column(_("shape"), prose=True, min_width=20)], title=_("layer shapes"))
        for rng, n, kind, shape in _layer_runs(spec):
            lt.add_row(rng, str(n), kind, shape)
        console.print(lt)
    warning = _("warning:")
    for w in spec.notices:
        print_wrapped(console, labelled(warning, localize(w), "yellow"), indent="  ")


@click.command("inspect", cls=HelpCommand, examples=(
    "llamarig inspect Qwen3.6-27B-IQ4_NL.gguf", "llamarig inspect model-00001-of-00003.gguf --json",
    "llamarig inspect qwen3.6-27b:iq4_nl", "llamarig inspect hf:unsloth/Qwen3-8B-GGUF:Q4_K_M"))
@click.argument("model", type=str)  # not click.Path: load_spec gives the one-line errors (exit 2)
@click.option("--json", "as_json", is_flag=True, help="Print the ModelSpec as JSON (docs/inspect.md).")
@click.option("--tensors", is_flag=True, help="With --json: include the tensor table.")
def inspect_cmd(model: str, as_json: bool, tensors: bool) -> None:
    """Read MODEL's GGUF header (split files too) without touching tensor data.

    MODEL is a GGUF path or a catalogue id (`llamarig models`); a catalogue id is described
    from its built-in entry, no file read. A remote GGUF (hf:OWNER/REPO:QUANT, OWNER/REPO:QUANT,
    hf:OWNER/REPO/FILE.gguf, ms:OWNER/REPO:QUANT, https://…/FILE.gguf) is read by its header
    alone, over HTTP range requests, and cached (docs/plan.md)."""
    spec = api.inspect_model(model)
    if spec.remote is not None:  # what reading the remote header cost, on stderr
        from llamarig.hub.resolve import describe

        click.echo(describe(spec.remote), err=True)
    if as_json:
        click.echo(json.dumps(spec.to_json(with_tensors=tensors), indent=2))
    else:
        render_spec(spec, Console())
