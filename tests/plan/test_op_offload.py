"""--op-offload / --no-op-offload (common/arg.cpp:2950-2956, cparams.op_offload): with a CUDA GPU,
ggml-backend's scheduler gives the GPU an op whose weight stays in host memory when the batch
has at least 32 rows (ggml-backend.cpp:1100-1118, ggml-cuda.cu:5739-5758), and the weight is
copied into the GPU's compute buffer; --no-op-offload keeps such ops on the CPU. The CPU and the
RPC backend never take an op over (no offload_op, ggml-rpc.cpp:2264), so on the RPC rig the flag
changes nothing: the grid checks that against the real server (llamarig.testing.rpc_grid,
``-ngl 4 --no-op-offload``). Here: the flag's mapping and the replay's rule on a CUDA GPU."""

from __future__ import annotations

from llamarig.catalogue.gpus import find_gpu
from llamarig.catalogue.models import build_spec, find_model
from llamarig.hardware import Hardware
from llamarig.plan.compute import replay as R
from llamarig.plan.compute.ggml_sched import Backend, cuda_backend
from llamarig.plan.compute.graphs import GraphParams, Layout
from llamarig.plan.config import parse_server_args
from llamarig.plan.planner import PlanInputs, make_plan


def test_the_flag_sets_op_offload_and_reads_back():
    assert parse_server_args([]).op_offload
    assert parse_server_args(["--op-offload"]).op_offload
    cfg = parse_server_args(["--no-op-offload"])
    assert not cfg.op_offload
    assert "--no-op-offload" in cfg.argv("m.gguf")
    assert parse_server_args(cfg.argv("m.gguf")[2:]) == cfg


def _layers_on_cpu_then_gpu(spec_layers: int, on_cpu: int) -> Layout:
    """The first ``on_cpu`` layers on the CPU (backend 1), the rest and the output on the GPU."""
    return Layout((1,) * on_cpu + (0,) * (spec_layers - on_cpu), 0, 1, full_offload=False)


def test_the_replay_runs_host_weight_ops_where_op_offload_says():
    """A prompt batch of 512 rows: with op offload the GPU runs the CPU layers' matmuls and holds
    their weights' copies (its buffer grows, the CPU's shrinks); without, the CPU runs them. A
    one-token graph (a batch under 32) is the same either way."""
    spec = build_spec(*find_model("llama3.1-8b:q4_k_m"))
    lay = _layers_on_cpu_then_gpu(spec.n_layer, 8)
    backends = (cuda_backend("CUDA0", 890), Backend("CUDA_Host"))
    on = R.Setup(lay, backends, 1, op_offload=True)
    off = R.Setup(lay, backends, 1, op_offload=False)
    prompt = GraphParams(512, 1, 1, 8192, 1, 1, 0, True, "f16", "f16")
    gpu_on, host_on = R.replay(spec, prompt, on)
    gpu_off, host_off = R.replay(spec, prompt, off)
    assert gpu_on > gpu_off and host_on < host_off
    token = R.token_graph(prompt)
    assert R.replay_graph(spec, token, on) == R.replay_graph(spec, token, off)
    # the memo tells the two apart
    assert R.buffers(spec, prompt, on) == (gpu_on, host_on)
    assert R.buffers(spec, prompt, off) == (gpu_off, host_off)


def test_the_plan_honours_no_op_offload_on_a_gpu():
    """llama3.1-8b with 20 of 33 layers on an RTX 3090: --no-op-offload lowers the GPU's compute
    buffer (no host weight copied in) and the replay's formula stops naming op offload."""
    spec = build_spec(*find_model("llama3.1-8b:q4_k_m"))
    hw = Hardware((find_gpu("rtx3090"),), ram_bytes=64 << 30)

    def plan(*flags: str):
        return make_plan(PlanInputs(spec, parse_server_args(["-c", "8192", "-ngl", "20", "-fit", "off", *flags]), hw))

    on, off = plan(), plan("--no-op-offload")
    c_on, c_off = on.devices[0].lines["compute"], off.devices[0].lines["compute"]
    assert c_on.bytes > c_off.bytes
    assert "op offload" in c_on.formula and "op offload" not in c_off.formula
    assert on.host.get("compute") < off.host.get("compute")
