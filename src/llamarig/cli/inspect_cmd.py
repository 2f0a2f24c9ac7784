"""``llamarig inspect MODEL``: what the model is, from its GGUF header alone (or, for a catalogue
id such as ``qwen3.6-27b:iq4_nl``, from the built-in catalogue entry, no file read)."""

from __future__ import annotations

import json
from collections import Counter

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from llamarig.cli.lang import localize
from llamarig.gguf import ModelSpec
from llamarig.units import fmt_bytes


def _v(x: object) -> str:
    """A header value for human text: ``?`` where the header does not say (JSON keeps null)."""
    return "?" if x is None else str(x)


def resolve_model(text: str) -> ModelSpec:
    """MODEL as a GGUF path or a catalogue id (plan.catalogue.resolve_model)."""
    from llamarig.catalogue.models import resolve_model as resolve

    return resolve(text)[0]


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
        kind = a.kind + (" (MTP/nextn)" if a.nextn else "")
        if a.kind == "recurrent":
            shape = "recurrent state (no KV)"
        else:
            shape = f"{a.n_head} heads, {a.n_head_kv} KV heads × {a.head_dim_k}/{a.head_dim_v}"
        rng = f"{start}" if i - 1 == start else f"{start}–{i - 1}"
        rows.append((rng, i - start, kind, shape))
        start = i
    return rows


def render_spec(spec: ModelSpec, console: Console) -> None:
    t = Table(title=escape(spec.path), show_header=False, title_justify="left")
    t.add_column("field", style="bold")
    t.add_column("value")
    t.add_row("architecture", escape(spec.architecture + (f"  ({spec.name})" if spec.name else "")))
    if spec.source == "catalogue":
        t.add_row("source", "catalogue entry (no file read): shapes and sizes from the built-in "
                  "catalogue, tensors are per-layer aggregates (llamarig models)")
    if spec.projector is not None:
        pj = spec.projector
        t.add_row("projector", f"{escape(_v(pj.projector_type))}  vision={pj.has_vision} audio={pj.has_audio}")
        t.add_row("vision encoder", f"{_v(pj.n_layer)} layers, n_embd {_v(pj.n_embd)}, "
                  f"image {_v(pj.image_size)}px, patch {_v(pj.patch_size)}")
    else:
        kinds = Counter(ly.kind for ly in spec.layers if not ly.nextn)
        t.add_row("layers", f"{spec.n_layer} blocks: " + ", ".join(f"{n} {k}" for k, n in kinds.items())
                  + (f", {spec.nextn_layers} MTP/nextn" if spec.nextn_layers else ""))
        t.add_row("n_embd / n_ff / n_vocab", f"{_v(spec.n_embd)} / {_v(spec.n_ff)} / {_v(spec.n_vocab)}")
        t.add_row("n_ctx_train", _v(spec.n_ctx_train))
        if spec.swa_window:
            t.add_row("sliding window", f"{spec.swa_window} tokens")
        if spec.recurrent:
            r = spec.recurrent
            per_seq = 4 * (r.n_embd_r + r.n_embd_s) * kinds.get("recurrent", 0)
            t.add_row("recurrent state", f"conv {r.conv_kernel}, inner {r.inner_size}, state {r.state_size}, "
                      f"groups {r.group_count}, dt_rank {r.time_step_rank}: "
                      f"{fmt_bytes(per_seq)} per sequence (= 4 B × (n_embd_r {r.n_embd_r} + n_embd_s {r.n_embd_s}) × {kinds.get('recurrent', 0)} layers)")
        if spec.n_expert:
            t.add_row("experts", f"{spec.n_expert_used} of {spec.n_expert} used, expert n_ff {_v(spec.n_ff_expert)}")
        if isinstance(spec.rope.freq_base, (int, float)) and spec.rope.freq_base:
            t.add_row("rope", f"base {spec.rope.freq_base:g}, dims {_v(spec.rope.dimension_count)}"
                      + (f", scaling {escape(str(spec.rope.scaling_type))} ×{_v(spec.rope.scaling_factor)}"
                         if spec.rope.scaling_type else ""))
    types: Counter[str] = Counter()
    for tensor in spec.tensors:
        types[tensor.ggml_type] += tensor.n_bytes
    t.add_row("weights", f"{fmt_bytes(spec.weights_bytes)} in {spec.tensor_count} tensors ("
              + ", ".join(f"{k} {fmt_bytes(v)}" for k, v in types.most_common(4)) + ")")
    if spec.origin is not None:
        t.add_row("file", f"{fmt_bytes(spec.file_bytes)} ({_v(spec.origin.size_source)})")
    else:
        t.add_row("file", f"{fmt_bytes(spec.file_bytes)} in {len(spec.files)} file(s)")
    console.print(t)
    if spec.layers:
        lt = Table(title="layer shapes", title_justify="left")
        for col in ("layers", "count", "kind", "shape"):
            lt.add_column(col)
        for rng, n, kind, shape in _layer_runs(spec):
            lt.add_row(rng, str(n), kind, shape)
        console.print(lt)
    for w in spec.notices:
        console.print(f"[yellow]warning:[/] {escape(localize(w))}")


@click.command("inspect")
@click.argument("model", type=str)  # not click.Path: load_spec gives the one-line errors (exit 2)
@click.option("--json", "as_json", is_flag=True, help="Print the ModelSpec as JSON (docs/inspect.md).")
@click.option("--tensors", is_flag=True, help="With --json: include the tensor table.")
def inspect_cmd(model: str, as_json: bool, tensors: bool) -> None:
    """Read MODEL's GGUF header (split files too) without touching tensor data.

    MODEL is a GGUF path or a catalogue id (`llamarig models`); a catalogue id is described
    from its built-in entry, no file read. A remote GGUF (hf:OWNER/REPO:QUANT, OWNER/REPO:QUANT,
    hf:OWNER/REPO/FILE.gguf, ms:OWNER/REPO:QUANT, https://…/FILE.gguf) is read by its header
    alone, over HTTP range requests, and cached (docs/plan.md).

    \b
    Examples:
      llamarig inspect Qwen3.6-27B-IQ4_NL.gguf
      llamarig inspect model-00001-of-00003.gguf --json
      llamarig inspect qwen3.6-27b:iq4_nl
      llamarig inspect hf:unsloth/Qwen3-8B-GGUF:Q4_K_M
    """
    spec = resolve_model(model)
    if spec.remote is not None:  # what reading the remote header cost, on stderr
        from llamarig.hub.resolve import describe

        click.echo(describe(spec.remote), err=True)
    if as_json:
        click.echo(json.dumps(spec.to_json(with_tensors=tensors), indent=2))
    else:
        render_spec(spec, Console())
