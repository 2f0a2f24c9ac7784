#!/usr/bin/env python3
"""The GPU evidence kit: one command that measures a llama-server build on this machine and writes
the evidence file `llamarig plan --calibration FILE` and scripts/accuracy_speed.py read.

Method (benchmarks/RESULTS.md "GPU evidence kit"; docs/accuracy-speed.md):
1. For each catalogue model asked for (default: qwen3.8-27b, llama3.1-8b), write a
   synthetic GGUF with the model's exact shapes (layers, heads, head dims, FFN, experts,
   recurrent state, MTP layers, the full vocabulary) and random weights
   (llamarig.testing.synth, ``fill="tiled"``: 64 random rows per tensor, repeated; speed and
   buffer sizes do not depend on the values). ``--weights`` picks the type (q4_0 default).
2. For each -ub (512, 2048) and K/V type (f16, q8_0, q4_0), start ``--server-bin`` with ``-lv 4``
   (every buffer line), ``-ngl 99 -fa on -np 1``, and a context that holds the deepest depth.
3. At each depth (0, 8192, 32768) send one /completion whose prompt is that many token ids
   (``cache_prompt`` off, ``ignore_eos``), and record llama-server's own timings: prefill
   (``prompt_per_second``) and decode (``predicted_per_second``) with their token counts. A model
   with MTP layers gets one more run with ``--spec-type draft-mtp --spec-draft-n-max 4``
   (``--mtp``) per ``--mtp-kv`` type, recording ``draft_n`` / ``draft_n_accepted``: the time of a
   speculative step. The order: every K/V type at the first -ub, the MTP runs, the other -ub
   values, so that a short budget keeps what the optimiser's K/V and MTP figures need.
4. Write one JSON file: the machine (nvidia-smi, CPU), the server (``--version``), and per run
   the model, the synthetic file's bytes and tensor count, the argv, every buffer line of the log
   (and the parsed memory figures) and the measurements.

``--smoke`` runs tiny shapes of the same architectures on the CPU (the tests run it against the
portable CPU llama-server). A budget (``--budget-s``, default 540) skips what does not fit in the
time left, and says so in the file.

Run (GPU box):  python benchmarks/gpu_evidence.py --server-bin /path/to/llama-server --gpu rtx4090
                [--out gpu-evidence.json] [--models qwen3.6-27b,llama3.1-8b] [--kv f16,q8_0,q4_0]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from llamarig.catalogue.models import find_model
from llamarig.detect import detect
from llamarig.errors import LlamarigError
from llamarig.gguf.reader import read_header
from llamarig.gguf.spec import spec_from_headers
from llamarig.launch.server import start_server
from llamarig.plan.memory_log import parse_memory_log
from llamarig.testing.synth import SynthShape, default_shape, write_model

KIND = "llamarig-gpu-evidence"
VERSION = 1
DEFAULT_MODELS = ("qwen3.8-27b", "llama3.1-8b")  # qwen3.8: qwen3.6's shapes plus an MTP layer
SMOKE_MODELS = ("llama3.1-8b", "qwen3.6-27b")
#: log lines worth keeping: every buffer, KV / recurrent / compute size, context parameter
KEEP = ("buffer size", "KV buffer", "RS buffer", "compute buffer", "llama_kv_cache", "llama_memory_recurrent",
        "llama_context:", "load_tensors:", "graph nodes", "graph splits", "n_ctx", "flash_attn", "system_info",
        "ggml_cuda_init", "Device ")


def shape_for(model_id: str, weights: str, smoke: bool) -> tuple[str, SynthShape]:
    """(arch, synthetic shape) of a catalogue model: its exact shapes, or (smoke) the architecture's
    tiny default with the same layer kinds."""
    m, _q = find_model(model_id)
    e = m.entry
    arch = str(e["arch"])
    base = default_shape(arch)
    if smoke:
        # head_dim 32: a quantized K/V block (32) must divide it (llama_init_from_model)
        return arch, replace(base, n_embd=128, head_dim=32, n_ff=256, n_ctx_train=65536, weight_type="f16", fill="tiled",
                             nextn_layers=int(e.get("nextn_layers", 0) or 0))
    head_dim = int(e.get("head_dim") or int(e["n_embd"]) // int(e["n_head"]))
    kw: dict[str, Any] = dict(
        n_layer=int(e["n_layer"]), n_embd=int(e["n_embd"]), n_head=int(e["n_head"]), n_head_kv=int(e["n_head_kv"]),
        head_dim=head_dim, n_ff=int(e.get("n_ff") or 0) or base.n_ff, n_ctx_train=int(e.get("n_ctx_train", 4096)),
        n_vocab=int(e.get("n_vocab", 0)), weight_type=weights, fill="tiled",
        nextn_layers=int(e.get("nextn_layers", 0) or 0))
    if base.n_rot is not None:  # partial rotary (qwen35: a quarter of the head)
        kw["n_rot"] = head_dim // 4
    if "swa_window" in e:
        kw["swa_window"] = int(e["swa_window"])
    if "swa_period" in e:
        kw["swa_period"] = int(e["swa_period"])
    if e.get("n_expert"):
        kw.update(n_expert=int(e["n_expert"]), n_expert_used=int(e["n_expert_used"]),
                  n_ff_expert=int(e["n_ff_expert"]))
        if "n_ff_shexp" in e:
            kw["n_ff_shexp"] = int(e["n_ff_shexp"])
    if "full_attention_interval" in e:
        kw["full_attention_interval"] = int(e["full_attention_interval"])
    ssm = e.get("ssm") or {}
    if ssm:
        kw.update(ssm_conv_kernel=int(ssm["conv_kernel"]), ssm_state_size=int(ssm["state_size"]),
                  ssm_group_count=int(ssm["group_count"]), ssm_time_step_rank=int(ssm["time_step_rank"]))
    return arch, replace(base, **kw)


def machine() -> dict[str, Any]:
    out: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version(),
                           "cpu_count": os.cpu_count()}
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            r = subprocess.run([smi, "--query-gpu=name,memory.total,clocks.max.memory,power.limit,driver_version,"
                                "pci.bus_id", "--format=csv,noheader"], capture_output=True, text=True, timeout=10,
                               check=False)
            out["nvidia_smi"] = r.stdout.strip().splitlines() if r.returncode == 0 else r.stderr.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            out["nvidia_smi"] = f"not readable: {e}"
    else:
        out["nvidia_smi"] = None
    return out


def server_version(binary: str) -> str:
    try:
        r = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"not readable: {e}"
    return (r.stdout + r.stderr).strip()


def gpu_memory(pid: int) -> dict[str, Any] | None:
    """What nvidia-smi says the server process holds (MiB) and the whole GPU's use: the buffers the
    log names plus the CUDA context, cuBLAS workspaces and ggml's CUDA memory pool, which grows with
    the batches seen. None without nvidia-smi (the CPU smoke run)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        apps = subprocess.run([smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10, check=False).stdout
        gpu = subprocess.run([smi, "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    out: dict[str, Any] = {"process_mib": None}
    for ln in apps.splitlines():
        parts = [x.strip() for x in ln.split(",")]
        if len(parts) == 2 and parts[0] == str(pid) and parts[1].isdigit():
            out["process_mib"] = int(parts[1])
    first = gpu.splitlines()[0].split(",") if gpu.strip() else []
    if len(first) == 2 and all(x.strip().isdigit() for x in first):
        out["gpu_used_mib"], out["gpu_total_mib"] = int(first[0]), int(first[1])
    return out


def kept_lines(log: str) -> list[str]:
    return [ln.rstrip() for ln in log.splitlines() if any(k in ln for k in KEEP)]


def measure(srv: Any, depth: int, n_predict: int, vocab_lo: int, vocab_hi: int) -> dict[str, Any]:
    """One /completion with ``depth`` prompt tokens (ids cycled over the vocabulary, never a
    control token) and ``n_predict`` generated: llama-server's own timings."""
    span = max(1, vocab_hi - vocab_lo)
    prompt = [vocab_lo + (i * 7919) % span for i in range(max(1, depth))]
    t0 = time.monotonic()
    r = srv.post("/completion", {"prompt": prompt, "n_predict": n_predict, "cache_prompt": False,
                                 "temperature": 0, "ignore_eos": True}, timeout=900)
    tm = r.get("timings", {})
    out = {"depth": len(prompt), "prompt_n": tm.get("prompt_n"), "prefill_tok_s": tm.get("prompt_per_second"),
           "decode_n": tm.get("predicted_n"), "decode_tok_s": tm.get("predicted_per_second"),
           "wall_s": round(time.monotonic() - t0, 3)}
    if "draft_n" in tm:  # speculative decoding: drafted and accepted tokens (server-common.cpp:99-101)
        out.update(draft_n=tm["draft_n"], draft_n_accepted=tm.get("draft_n_accepted", 0))
    return out


def gpu_id(given: str | None, smoke: bool) -> str | None:
    """The catalogue id the evidence is for: ``--gpu``, else the first GPU nvidia-smi names when
    the catalogue knows it (its bandwidth is what the reading side divides by)."""
    if given or smoke:
        return given
    gpus = detect().gpus
    return gpus[0].id if gpus and gpus[0].bandwidth_gbs else None


def one_run(args: argparse.Namespace, model_id: str, synth: dict[str, Any], path: Path, argv: list[str], kv: str,
            ub: int, ctx: int, n_mtp: int, depths: Sequence[int], n_vocab: int, deadline: float,
            work: Path) -> dict[str, Any]:
    """One server start: the measurements at every depth, the buffer lines, the parsed memory."""
    entry: dict[str, Any] = {"model": model_id, "synthetic": synth, "cache_type_k": kv, "cache_type_v": kv,
                             "n_ubatch": ub, "n_ctx": ctx, "args": argv, "measurements": []}
    if n_mtp:
        entry["spec"] = {"type": "draft-mtp", "n_max": n_mtp}
    try:
        with start_server(args.server_bin, path, argv, threads=args.threads, log_dir=work / "logs",
                          timeout=600) as srv:
            measure(srv, 16, 4, 256, n_vocab - 8)  # warm-up, discarded
            entry["gpu_memory_after_load"] = gpu_memory(srv.proc.pid)
            for d in depths:
                if time.monotonic() > deadline:
                    entry["measurements"].append({"depth": d, "skipped": "time budget"})
                    continue
                try:
                    m = measure(srv, d, args.n_predict, 256, n_vocab - 8)
                    if (g := gpu_memory(srv.proc.pid)) is not None:
                        m["gpu_memory"] = g  # after this depth: the CUDA pool has grown to its batches
                    entry["measurements"].append(m)
                except (OSError, ValueError) as e:  # HTTPError is an OSError
                    entry["measurements"].append({"depth": d, "error": str(e)})
            log = srv.log
    except LlamarigError as e:
        entry["error"] = str(e).splitlines()[:20]
        return entry
    mem = parse_memory_log(log)
    entry["buffers"] = kept_lines(log)
    entry["memory"] = {"weights": mem.weights, "kv": mem.target.kv_buffers, "recurrent": mem.target.rs_buffers,
                       "compute": mem.target.compute, "output": mem.target.output,
                       "draft_compute": mem.draft.compute if mem.draft else None}
    return entry


def run_key(model_id: str, kv: str, ub: int, n_mtp: int) -> tuple[str, str, int, int]:
    return (model_id, kv, ub, n_mtp)


def done_keys(doc: dict[str, Any]) -> set[tuple[str, str, int, int]]:
    """The runs of a file that were measured (no error): --resume does not repeat them."""
    return {run_key(r["model"], r["cache_type_k"], int(r["n_ubatch"]), int((r.get("spec") or {}).get("n_max", 0)))
            for r in doc.get("runs", []) if "error" not in r}


def save(doc: dict[str, Any], out: Path) -> None:
    """Write the file after every run (a GPU lease can end mid-way): a temporary file, then rename."""
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(out)


def write_models(args: argparse.Namespace, work: Path) -> dict[str, tuple[str, SynthShape, Path, dict[str, Any]]]:
    """Each model's synthetic GGUF in ``work`` (reused when its shape stamp matches)."""
    made = {}
    work.mkdir(parents=True, exist_ok=True)
    for model_id in args.models:
        arch, shape = shape_for(model_id, args.weights, args.smoke)
        path = work / f"{model_id.replace(':', '_')}-{shape.weight_type}.gguf"
        t = time.monotonic()
        stamp = path.with_suffix(".shape.json")
        want = json.dumps(asdict(shape), sort_keys=True)
        if not (path.is_file() and stamp.is_file() and stamp.read_text() == want):  # reuse a --workdir's file
            write_model(path, arch, shape)
            stamp.write_text(want)
        hdr = read_header(path)
        synth = {"path": str(path), "arch": arch, "bytes": path.stat().st_size,
                 "tensor_bytes": sum(x.n_bytes for x in hdr.tensors), "tensors": len(hdr.tensors),
                 "n_vocab": spec_from_headers([hdr]).n_vocab or 256,
                 "shape": asdict(shape) | {"extra_tokens": []}, "write_s": round(time.monotonic() - t, 1)}
        made[model_id] = (arch, shape, path, synth)
    return made


def run(args: argparse.Namespace) -> dict[str, Any]:
    t_start = time.monotonic()
    deadline = t_start + args.budget_s
    work = Path(args.workdir or tempfile.mkdtemp(prefix="llamarig-evidence-"))
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    previous: dict[str, Any] | None = None
    if args.resume and out.is_file():
        try:
            previous = json.loads(out.read_text())
        except (OSError, ValueError) as e:
            raise LlamarigError(f"{out}: not readable as JSON ({e}); cannot --resume it") from None
        if not isinstance(previous, dict) or previous.get("kind") != KIND or previous.get("server", {}).get("version") != server_version(args.server_bin):
            raise LlamarigError(f"{out}: not an evidence file of this llama-server build; cannot --resume it")
    doc: dict[str, Any] = {
        "kind": KIND, "version": VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "smoke": args.smoke, "gpu": gpu_id(args.gpu, args.smoke), "backend": args.backend, "machine": machine(),
        "server": {"binary": str(args.server_bin), "version": server_version(args.server_bin)},
        "method": "synthetic GGUFs with the catalogue models' shapes (llamarig.testing.synth, tiled random "
                  "weights); one /completion per depth with that many prompt token ids, cache_prompt off; "
                  "prefill and decode are llama-server's timings (prompt_per_second, predicted_per_second)",
        "runs": [], "skipped": []}
    if args.note:
        doc["note"] = args.note
    if previous is not None:  # --resume: keep what was measured, try the rest again
        doc["created"], doc["resumed"] = previous.get("created", doc["created"]), doc["created"]
        doc["runs"] = [r for r in previous.get("runs", []) if "error" not in r]
    done = done_keys(doc)
    for model_id, (_arch, shape, path, synth) in write_models(args, work).items():
        n_vocab = int(synth.pop("n_vocab"))
        depths = sorted(set(args.depths))
        ctx = max(depths) + args.n_predict + 512
        # every K/V type at the first -ub first, then MTP on (off is the runs before) for each
        # --mtp-kv type, then the other -ub values: what the optimiser's assumptions need comes
        # first when the time budget runs out
        plan = [(args.ub[0], kv, 0) for kv in args.kv]
        if shape.nextn_layers and args.mtp > 0:  # the MTP step: drafting + batched verification
            plan += [(args.ub[0], kv, args.mtp) for kv in (args.mtp_kv or [args.kv[-1]])]
        plan += [(ub, kv, 0) for ub in args.ub[1:] for kv in args.kv]
        for ub, kv, n_mtp in plan:
            if run_key(model_id, kv, ub, n_mtp) in done:
                continue
            if time.monotonic() > deadline:
                doc["skipped"].append({"model": model_id, "kv": kv, "ub": ub, "mtp": n_mtp, "why": "time budget"})
                continue
            argv = ["-c", str(ctx), "-np", "1", "-ngl", str(args.ngl), "-fa", "on", "-ctk", kv, "-ctv", kv,
                    "-ub", str(ub), "-b", str(max(2048, ub)), "-lv", "4", "--no-warmup"]
            if n_mtp:
                argv += ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(n_mtp)]
            doc["runs"].append(one_run(args, model_id, synth, path, argv, kv, ub, ctx, n_mtp, depths, n_vocab,
                                       deadline, work))
            doc["elapsed_s"] = round(time.monotonic() - t_start, 1)
            save(doc, out)
    doc["elapsed_s"] = round(time.monotonic() - t_start, 1)
    return doc


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="benchmarks/gpu_evidence.py",
                                 description="Measure a llama-server build with synthetic GGUFs of the catalogue's "
                                             "models; write the evidence file plan and scripts/accuracy_speed.py read.")
    ap.add_argument("--server-bin", default=os.environ.get("LLAMARIG_SERVER_BIN"),
                    help="llama-server to measure (default $LLAMARIG_SERVER_BIN)")
    ap.add_argument("--gpu", help="catalogue GPU id of this machine (e.g. rtx4090; default: nvidia-smi's first GPU "
                                  "when the catalogue knows it); the reading side needs it for the bandwidth")
    ap.add_argument("--backend", default=None, help="CUDA (default), ROCm, Vulkan, Metal; CPU with --smoke")
    ap.add_argument("--models", default=None, help="comma-separated catalogue ids")
    ap.add_argument("--kv", default="f16,q8_0,q4_0", help="K/V types (default f16,q8_0,q4_0)")
    ap.add_argument("--ub", default="512,2048", help="-ub values (default 512,2048)")
    ap.add_argument("--depths", default="0,8192,32768", help="prompt depths (default 0,8192,32768)")
    ap.add_argument("--n-predict", type=int, default=64, help="tokens decoded per depth (default 64)")
    ap.add_argument("--mtp", type=int, default=4,
                    help="for models with MTP layers, one more run with --spec-type draft-mtp --spec-draft-n-max N "
                         "(the step time; random weights accept almost nothing, which the file records; 0: off)")
    ap.add_argument("--mtp-kv", default="",
                    help="K/V types of the MTP runs, comma-separated (default: the last of --kv)")
    ap.add_argument("--note", default="", help="a line kept in the file (e.g. the power limit it ran under)")
    ap.add_argument("--weights", default="q4_0", choices=("q4_0", "q8_0", "f16"), help="synthetic weight type")
    ap.add_argument("--ngl", type=int, default=99)
    ap.add_argument("--threads", type=int, default=None, help="-t (default: llama-server's)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (tests)")
    ap.add_argument("--budget-s", type=float, default=540, help="stop starting runs after this (default 540)")
    ap.add_argument("--workdir", help="where the synthetic GGUFs and logs go (default: a temporary directory)")
    ap.add_argument("--out", default="gpu-evidence.json",
                    help="the evidence file (default gpu-evidence.json), written again after every run")
    ap.add_argument("--resume", action="store_true",
                    help="continue --out: keep its measured runs, do the rest (same llama-server build only)")
    ap.add_argument("--write-only", action="store_true",
                    help="only write the synthetic GGUFs into --workdir (e.g. while the server builds), then exit")
    a = ap.parse_args(argv)
    if not a.server_bin and not a.write_only:
        ap.error("--server-bin (or $LLAMARIG_SERVER_BIN) is required")
    a.models = [m.strip() for m in (a.models or ",".join(SMOKE_MODELS if a.smoke else DEFAULT_MODELS)).split(",")
                if m.strip()]
    a.kv = [x.strip() for x in a.kv.split(",") if x.strip()]
    a.mtp_kv = [x.strip() for x in a.mtp_kv.split(",") if x.strip()]
    try:
        a.ub = [int(x) for x in a.ub.split(",") if x.strip()]
        a.depths = [int(x) for x in a.depths.split(",") if x.strip()]
    except ValueError:
        ap.error("--ub and --depths take comma-separated integers")
    a.backend = a.backend or ("CPU" if a.smoke else "CUDA")
    return a


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    if a.write_only:
        if not a.workdir:
            print("gpu_evidence: --write-only needs --workdir", file=sys.stderr)
            return 2
        for model_id, (_a, _s, path, synth) in write_models(a, Path(a.workdir)).items():
            print(f"{model_id}: {path} ({synth['bytes']} bytes, {synth['write_s']} s)")
        return 0
    try:
        doc = run(a)
    except LlamarigError as e:
        print(f"gpu_evidence: {e}", file=sys.stderr)
        return 1
    save(doc, Path(a.out))
    ok = sum(1 for r in doc["runs"] if "error" not in r)
    print(f"wrote {a.out}: {ok} of {len(doc['runs'])} runs measured, {len(doc['skipped'])} skipped "
          f"(time budget), {doc['elapsed_s']} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
