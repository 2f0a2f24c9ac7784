"""Text renderings of a bench/logs document: rich terminal table, Markdown (指标 | 数值 | 测法,
English and Chinese), JSON file, and schema validation."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from llamarig.errors import InputError

NOTES_SHOWN = 10  # scenario notes (skipped points, rejected samples) printed per scenario


def fmt_value(v: Any, unit: str) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if v.is_integer() and unit in ("events", "checkpoints", "tokens", "requests"):
            return str(int(v))
        if unit == "ratio":
            return f"{v:.3f}"
        if abs(v) >= 100:
            return f"{v:,.0f}" if unit not in ("MiB", "GiB") else f"{v:,.1f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.2f}"
    return str(v)


def _spread_text(f: dict[str, Any]) -> str:
    sp = f.get("spread") or {}
    if not sp or f.get("n", 0) < 2:
        return ""
    unit = f.get("unit", "")
    return f"p10 {fmt_value(sp.get('p10'), unit)} · p90 {fmt_value(sp.get('p90'), unit)}"


_STAT_PREFIX = re.compile(
    r"^(?:median|10th percentile|90th percentile|maximum \(best request\)|minimum|mean) over N=\d+ requests; "
)


def method_key(method: str) -> str:
    """The method without its 'median over N=… requests; ' prefix (shared by sibling figures)."""
    return _STAT_PREFIX.sub("", method)


def terminal(doc: dict[str, Any], console: Console) -> None:
    t = doc.get("target", {})
    head = f"[bold]{doc.get('kind', 'bench')}[/] {escape(str(t.get('url') or doc.get('source', {}).get('path', '')))}"
    if t.get("build_info"):
        head += f"  build {escape(str(t['build_info']))}"
    if t.get("model"):
        head += f"  model {escape(Path(str(t['model'])).name)}"
    console.print(head)
    # at narrow widths the figure name folds onto a second line (names have no spaces to wrap
    # at); every other column keeps its width, so N and the method reference never vanish
    table = Table(show_lines=False, header_style="bold", show_edge=False)
    table.add_column("figure", overflow="fold")
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("unit", no_wrap=True)
    table.add_column("N", justify="right", no_wrap=True)
    table.add_column("p10 … p90", no_wrap=True)
    table.add_column("method", justify="right", no_wrap=True)
    methods: list[str] = []
    for f in doc.get("figures", []):
        key = method_key(f.get("method", ""))
        if key not in methods:
            methods.append(key)
        ref = f"[{methods.index(key) + 1}]"
        if f.get("note"):
            ref += " [yellow]![/]"
        table.add_row(escape(f["name"]), fmt_value(f.get("value"), f.get("unit", "")), f.get("unit", ""), str(f.get("n", "")),
                      _spread_text(f).replace("p10 ", "").replace(" · p90 ", " … "), ref)
    console.print(table)
    console.print("[bold]methods[/] (测法):")
    for i, m in enumerate(methods, 1):
        console.print(f"  [{i}] {m}", highlight=False, markup=False)
    for f in doc.get("figures", []):
        if f.get("note"):
            console.print(f"  [yellow]![/] {escape(f['name'])}: {escape(f['note'])}", highlight=False)
    for sc in doc.get("scenarios", []):
        notes = sc.get("notes") or []
        for note in notes[:NOTES_SHOWN]:
            console.print(f"[cyan]{escape(sc['name'])}:[/] {escape(note)}", highlight=False)
        if len(notes) > NOTES_SHOWN:
            console.print(f"[cyan]{escape(sc['name'])}:[/] … {len(notes) - NOTES_SHOWN} more notes in the JSON (scenarios[].notes)",
                          highlight=False)
    inter = doc.get("interference") or {}
    for m in inter.get("missing", []):
        console.print(f"[yellow]missing:[/] {escape(m)}", highlight=False)
    for ev in inter.get("events", [])[:10]:
        console.print(f"[red]interference:[/] t={ev['t_s']} s {ev['kind']}: {escape(ev['detail'])}", highlight=False)
    gpu = doc.get("gpu") or {}
    if gpu and not gpu.get("available"):
        console.print(f"[dim]GPU telemetry: not available: {escape(str(gpu.get('reason')))}[/]", highlight=False)
    for f in doc.get("findings", []):
        console.print(f"• {escape(f)}", highlight=False)
    for e in doc.get("errors", [])[:20]:
        console.print(f"[red]error:[/] {escape(e)}", highlight=False)
    if doc.get("aborted"):
        console.print(f"[red]aborted:[/] {escape(doc['aborted'])}", highlight=False)


def markdown(doc: dict[str, Any]) -> str:
    """A Markdown table like the 307K-context MTP field report's (tests/fixtures/seeds/004_d9cc8479c3afbc2e.txt): 指标 | 数值 | 测法 (metric | value | method)."""
    t = doc.get("target", {})
    lines = [f"# llamarig {doc.get('kind', 'bench')} report", ""]
    if t:
        lines.append(f"- target: `{t.get('url')}` build `{t.get('build_info')}` model `{t.get('model')}` "
                     f"n_ctx/slot {t.get('n_ctx_slot')} slots {t.get('total_slots')}")
    if doc.get("started_at"):
        lines.append(f"- run: {doc.get('started_at')} → {doc.get('finished_at')} (run id `{doc.get('run_id')}`)")
    c = doc.get("client") or {}
    if c:
        lines.append(f"- client: {c.get('hostname')} {c.get('platform')} python {c.get('python')}")
    lines += ["", "| 指标 metric | 数值 value | N | 测法 method |", "|---|---|---|---|"]
    for f in doc.get("figures", []):
        val = f"{fmt_value(f.get('value'), f.get('unit', ''))} {f.get('unit', '')}".strip()
        sp = _spread_text(f)
        if sp:
            val += f" ({sp})"
        method = f.get("method", "")
        if f.get("method_zh"):
            method = f"{f['method_zh']}。{method}"
        if f.get("note"):
            method += f" — note: {f['note']}"
        lines.append(f"| {f['name']} | {val} | {f.get('n', '')} | {method.replace('|', '/')} |")
    notes = [f"- {sc['name']}: {n}" for sc in doc.get("scenarios", []) for n in sc.get("notes") or []]
    if notes:
        lines += ["", "## Notes 说明（跳过的点、被拒样本）"] + notes[:50]
    inter = doc.get("interference") or {}
    if inter.get("missing") or inter.get("events"):
        lines += ["", "## Interference 干扰"]
        lines += [f"- missing: {m}" for m in inter.get("missing", [])]
        lines += [f"- t={e['t_s']} s {e['kind']}: {e['detail']}" for e in inter.get("events", [])[:20]]
    if doc.get("findings"):
        lines += ["", "## Findings 结论"] + [f"- {x}" for x in doc["findings"]]
    if doc.get("errors"):
        lines += ["", "## Errors 错误"] + [f"- {x}" for x in doc["errors"][:50]]
    gpu = doc.get("gpu") or {}
    if gpu and not gpu.get("available"):
        lines += ["", f"GPU telemetry: not available ({gpu.get('reason')})"]
    return "\n".join(lines) + "\n"


def write_json(doc: dict[str, Any], path: Path) -> None:
    try:
        path.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    except OSError as e:
        raise InputError(f"{path}: cannot write: {e.strerror or e}") from e


def read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from e
    except ValueError as e:
        raise InputError(f"{path}: not JSON: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("figures"), list):
        raise InputError(f"{path}: not a llamarig bench/logs JSON (no 'figures' list)")
    return doc


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    text = resources.files("llamarig").joinpath("data/bench.schema.json").read_text(encoding="utf-8")
    return json.loads(text)
