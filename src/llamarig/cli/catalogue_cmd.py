"""``llamarig models`` and ``llamarig gpus``: the built-in catalogues, one line per entry; one
entry's details and sources with ``models ID`` / ``gpus ID``, every source with ``--sources``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click
from rich.text import Text

from llamarig import api
from llamarig.cli.help import HelpCommand
from llamarig.cli.lang import _, localize
from llamarig.cli.layout import Column, Sheet, cells, labelled, print_wrapped
from llamarig.hub.ref import is_remote
from llamarig.units import fmt_bytes

if TYPE_CHECKING:
    from rich.console import Console

    from llamarig.catalogue.models import CatalogueModel
    from llamarig.hardware.types import GPU


def _quants(m: CatalogueModel, bpw: dict[str, float]) -> str:
    out = []
    for q in m.quants:
        size, source = m.file_bytes(q, bpw)
        out.append(f"{q.lower()} {'~' if source.startswith('estimated') else ''}{size / 1e9:.1f}")
    return ", ".join(out)


def _truncate(text: str, width: int) -> str:
    """``text`` cut at the last ", " that fits ``width`` cells, ending in "…"."""
    from rich.cells import cell_len

    parts = text.split(", ")
    out = parts[0]
    for p in parts[1:]:
        if cell_len(out + ", " + p + ", …") > width:
            return out + ", …"
        out += ", " + p
    return out


def _mmproj(m: CatalogueModel) -> str:
    return ", ".join(sorted(k for k in m.entry.get("mmproj", {}) if not k.startswith("compute"))) or "-"


def _model_json(m: CatalogueModel, bpw: dict[str, float]) -> dict[str, object]:
    return {"id": m.id, "name": m.name, "architecture": m.arch,
            "quants": {q: {"bytes": m.file_bytes(q, bpw)[0], "source": m.file_bytes(q, bpw)[1]} for q in m.quants},
            "mmproj": sorted(k for k in m.entry.get("mmproj", {}) if not k.startswith("compute")),
            "source": m.source}


def _repo_models(ref: str, as_json: bool, console: Any) -> None:
    from rich.markup import escape

    doc = api.repo_models(ref)
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    print_wrapped(console, _("{repo} at {commit} ({endpoint}): exact sizes from the hub's file listing; "
                             "plan one with llamarig plan REFERENCE").format(
        repo=doc["repo"], commit=doc["commit"][:12] or "-", endpoint=doc["endpoint"]), indent="  ")
    for q in doc["quants"]:
        size = "?" if q["bytes"] is None else f"{q['bytes'] / 1e9:.2f} GB"
        n = len(q["files"])
        parts = _(" in {n} files").format(n=n) if n > 1 else ""
        console.print(f"  {escape(q['quant'])}: {size}{parts}  {escape(q['reference'])}", soft_wrap=True)
    for m in doc["mmproj"]:
        size = "?" if m["bytes"] is None else f"{m['bytes'] / 1e9:.2f} GB"
        console.print(f"  mmproj: {escape(m['file'])} {size}", soft_wrap=True)
    if not doc["quants"]:
        console.print(_("  no GGUF model files"))


def _entry(m: CatalogueModel, bpw: dict[str, float], console: Console) -> None:
    """One model with each quant's size and where it comes from, then its sources."""
    print_wrapped(console, Text.assemble((m.id, "bold"), f" ({m.arch}) ", localize(m.name)))
    for q in m.quants:
        size, source = m.file_bytes(q, bpw)
        print_wrapped(console, labelled(f"{q.lower()}:", _("{size} GB — {source}").format(
            size=f"{size / 1e9:.2f}", source=localize(source))), indent="      ", first_indent="  ")
    print_wrapped(console, _("  mmproj: {mmproj}").format(mmproj=_mmproj(m)).strip(), indent="      ",
                  first_indent="  ")
    print_wrapped(console, _("sources: {source}").format(source=localize(m.source)), indent="  ")


def _refreshed(model_id: str, refresh: str, bpw: dict[str, float], as_json: bool, console: Console) -> None:
    """``models ID --refresh``: each quant's catalogue size next to the repo's file."""
    m = api.model(model_id)
    doc = api.refresh_model(model_id, refresh or None)
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    print_wrapped(console, _("{id} against {repo} at {commit} (the hub's file listing, exact):").format(
        id=m.id, repo=doc["repo"], commit=(doc["commit"] or "-")[:12]), indent="  ")
    for r in doc["quants"]:
        cat = "-" if r["catalogue_bytes"] is None else f"{r['catalogue_bytes'] / 1e9:.2f} GB"
        real = "-" if r["repo_bytes"] is None else f"{r['repo_bytes'] / 1e9:.2f} GB"
        diff = "" if r["difference"] is None else f" ({r['difference'] / 1e9:+.2f} GB)"
        print_wrapped(console, _("  {quant}: catalogue {cat}, repo {real}{diff}").format(
            quant=r["quant"].lower(), cat=cat, real=real, diff=diff).strip(), indent="      ", first_indent="  ")


def _model_list(sources: bool, console: Console) -> None:
    """Every model on one line (its quants cut at a whole quant with "…" where the line ends;
    ``models ID`` has them all); with ``sources``, one block per model below the table width."""
    bpw = api.bits_per_weight()
    models = api.models()
    print_wrapped(console, _("built-in models: llamarig plan ID:QUANT (file size in GB; ~ = estimated from bits per "
                             "weight)"), indent="  ")
    rows = [[m.id, m.arch, _quants(m, bpw), _mmproj(m)] for m in models.values()]
    heads = [_("id"), _("architecture"), _("quants (GB)"), "mmproj"]
    cols = [Column(heads[0], key=True), Column(heads[1], key=True), Column(heads[2], prose=sources, min_width=24),
            Column(heads[3])]
    if not sources:
        width = [max(cells(x) for x in [h] + [r[i] for r in rows]) for i, h in enumerate(heads)]
        room = console.width - sum(width[i] for i in (0, 1, 3)) - 3 * 2  # 2 columns between each
        for r in rows:
            if cells(r[2]) > room:
                r[2] = _truncate(r[2], max(room, 8))
    _finish(console, cols, [(r, m.source) for r, m in zip(rows, models.values(), strict=True)], sources,
            _("every quant with its size and sources: llamarig models ID; all sources: --sources"))


@click.command("models", cls=HelpCommand)
@click.argument("model_id", required=False)
@click.option("--sources", is_flag=True, help="Show every entry's sources.")
@click.option("--json", "as_json", is_flag=True, help="Print the catalogue (or the entry) as JSON.")
@click.option("--refresh", "refresh", default=None, is_flag=False, flag_value="", metavar="[REPO]",
              help="With ID: each quant's catalogue size next to the real file's, from the repo the entry "
                   "names (or REPO, e.g. hf:OWNER/REPO), read from the hub's file listing.")
def models_cmd(model_id: str | None, sources: bool, as_json: bool, refresh: str | None) -> None:
    """List the built-in model catalogue (usable wherever a GGUF path is: MODEL:QUANT).
    `llamarig models ID` shows one entry with its sources; `llamarig models hf:OWNER/REPO` (or
    ms:OWNER/REPO) lists a repo's quants with their exact sizes, from the hub's file listing."""
    from rich.console import Console

    console = Console(highlight=False)
    if model_id and is_remote(model_id):
        _repo_models(model_id, as_json, console)
    elif model_id and refresh is not None:
        _refreshed(model_id, refresh, api.bits_per_weight(), as_json, console)
    elif model_id:
        m = api.model(model_id)
        if as_json:
            click.echo(json.dumps(_model_json(m, api.bits_per_weight()), indent=2))
        else:
            _entry(m, api.bits_per_weight(), console)
    elif as_json:
        click.echo(json.dumps([_model_json(m, api.bits_per_weight()) for m in api.models().values()], indent=2))
    else:
        _model_list(sources, console)


def _finish(console: Console, cols: list[Column], rows: list[tuple[list[str], str]], sources: bool,
            hint: str) -> None:
    """The sheet (with a source column under --sources: a block per entry where it does not fit),
    then the hint where the sources are."""
    if sources:
        cols = [*cols, Column(_("source"), prose=True, min_width=30)]
    sheet = Sheet(cols, rule=False)
    for cells_, source in rows:
        sheet.add_row(*cells_, *([localize(source)] if sources else []))
    console.print(sheet)
    if not sources:
        print_wrapped(console, hint, indent="  ", style="dim")


def _short_name(name: str) -> str:
    """The product without its vendor's brand ("NVIDIA GeForce RTX 3090" -> "RTX 3090"): the list
    stays one line per GPU at 80 columns; ``gpus ID`` and --json keep the full name."""
    for prefix in ("NVIDIA GeForce ", "NVIDIA ", "AMD Radeon ", "AMD "):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def _memory(g: GPU) -> str:
    gib = g.memory_bytes / (1 << 30)
    size = f"{gib:g} GiB" if gib == round(gib, 2) and gib >= 1 else fmt_bytes(g.memory_bytes)
    return size + (_(" (unified)") if g.unified_memory else "")


def _gpu_line(g: GPU, short: bool = False) -> list[str]:
    return [g.id, _short_name(g.name) if short else g.name, _memory(g),
            f"{g.bandwidth_gbs:g} GB/s" if g.bandwidth_gbs else "-",
            f"{g.fp16_tflops:g}" if g.fp16_tflops else "-"]


@click.command("gpus", cls=HelpCommand)
@click.argument("gpu_id", required=False)
@click.option("--sources", is_flag=True, help="Show every entry's sources.")
@click.option("--json", "as_json", is_flag=True, help="Print the catalogue (or the entry) as JSON.")
def gpus_cmd(gpu_id: str | None, sources: bool, as_json: bool) -> None:
    """List the built-in GPU catalogue (for --gpu NAME[:VRAM_GB]). `llamarig gpus ID` shows one
    entry with its sources."""
    from rich.console import Console

    console = Console(highlight=False)
    if gpu_id:
        g = api.gpu(gpu_id)
        if as_json:
            click.echo(json.dumps(g.to_json(), indent=2))
            return
        print_wrapped(console, "  ".join(_gpu_line(g)), indent="  ")
        print_wrapped(console, _("sources: {source}").format(source=localize(g.source)), indent="  ")
        return
    gpus = api.gpus()
    if as_json:
        click.echo(json.dumps([g.to_json() for g in gpus], indent=2))
        return
    print_wrapped(console, _("built-in GPUs: llamarig plan --gpu ID[:VRAM_GB]"), indent="  ")
    cols = [Column(_("id"), key=True), Column(_("name"), key=True, prose=True, min_width=12),
            Column(_("memory"), justify="right"),
            Column(_("bandwidth"), justify="right"), Column(_("FP16 TFLOPS"), justify="right")]
    _finish(console, cols, [(_gpu_line(g, short=True), g.source) for g in gpus], sources,
            _("sources of an entry: llamarig gpus ID; of all: --sources"))
