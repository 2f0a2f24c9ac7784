"""--fit's layer / expert reduction (common/fit.cpp steps 1-4), draft placement flags, and the
input checks of `llamarig plan` (contradictions, unknown flags, std::stoi suffixes, GPU names).

The fit cases are checked against fit.cpp's own rules, computed by hand from plans with an
explicit -ngl / --n-cpu-moe: the false-position search ends on the largest layer count whose
device still keeps --fit-target free, one more layer would not."""

from __future__ import annotations

import json

import pytest

from llamarig.catalogue.gpus import gpu_match_note, parse_gpu_arg
from llamarig.catalogue.models import build_spec, catalogue_mmproj, find_model
from llamarig.cli.main import main
from llamarig.hardware import Hardware
from llamarig.plan.config import parse_server_args
from llamarig.plan.fit import fit_replay as P
from llamarig.plan.planner import PlanInputs, effective_inputs, make_plan

MiB = 1 << 20


def _spec(mid: str):
    m, q = find_model(mid)
    return build_spec(m, q), m


def _free(plan, i: int = 0) -> int:
    return plan.devices[i].free


def test_fit_moves_dense_layers_to_cpu_single_gpu() -> None:
    spec, _ = _spec("qwen3.6-27b:q8_0")
    hw = Hardware((parse_gpu_arg("rtx3090"),))
    p = make_plan(PlanInputs(spec, parse_server_args(["-c", "8192"]), hw))
    cfg = p.effective_cfg
    n = cfg.n_gpu_layers
    assert 0 < n < spec.n_layer_main + 1
    assert p.fits and p.devices[0].free >= 1024 * MiB
    assert any("--fit would place" in x and f"{n} of {spec.n_layer_main + 1} layers" in x for x in p.notes)
    assert any("decode will be much slower" in w for w in p.warnings)
    # fit.cpp:684-716: the lower bound that still meets the target, and one more layer does not
    at_n = make_plan(PlanInputs(spec, parse_server_args(["-c", "8192", "-ngl", str(n)]), hw))
    at_n1 = make_plan(PlanInputs(spec, parse_server_args(["-c", "8192", "-ngl", str(n + 1)]), hw))
    assert _free(at_n) >= 1024 * MiB > _free(at_n1)
    assert at_n.devices[0].total == p.devices[0].total
    # the command stays the user's (fit runs inside llama-server)
    assert "-ngl" not in p.command


def test_fit_target_counts_the_mmproj() -> None:
    spec, m = _spec("qwen3.6-27b:iq4_nl")
    hw = Hardware((parse_gpu_arg("rtx3090"),))
    mm = catalogue_mmproj(m, "f16")
    p = make_plan(PlanInputs(spec, parse_server_args(["-c", "140000"]), hw, mm))
    n = p.effective_cfg.n_gpu_layers
    assert n < spec.n_layer_main + 1
    # server-context.cpp:1174-1196: the mmproj is added to the margin, so 1024 MiB stay free
    # after it; with n + 1 layers they would not
    assert _free(p) >= 1024 * MiB
    p1 = make_plan(PlanInputs(spec, parse_server_args(["-c", "140000", "-ngl", str(n + 1)]), hw, mm))
    assert _free(p1) < 1024 * MiB


def test_explicit_ngl_keeps_placement_and_does_not_fit() -> None:
    spec, _ = _spec("qwen3.6-27b:q8_0")
    hw = Hardware((parse_gpu_arg("rtx3090"),))
    p = make_plan(PlanInputs(spec, parse_server_args(["-c", "8192", "-ngl", "99"]), hw))
    assert not p.fits
    assert p.effective_cfg is None or p.effective_cfg.n_gpu_layers == 99
    assert any("-ngl 99 given" in n for n in p.notes)


@pytest.mark.parametrize("flags", [["-ot", "blk\\.0\\.=CPU"], ["--n-cpu-moe", "0", "-cmoe"]])
def test_overrides_stop_fit(flags: list[str]) -> None:
    spec, _ = _spec("qwen3.6-27b:q8_0")
    hw = Hardware((parse_gpu_arg("rtx3090"),))
    p = make_plan(PlanInputs(spec, parse_server_args(["-c", "8192", *flags]), hw))
    assert any("-ot/--cpu-moe/--n-cpu-moe/--n-cpu-ffn given" in n for n in p.notes)


def test_fit_two_gpus_fills_back_to_front() -> None:
    spec, _ = _spec("qwen3.6-27b:q8_0")
    hw = Hardware((parse_gpu_arg("4060ti"), parse_gpu_arg("4060ti")))
    p = make_plan(PlanInputs(spec, parse_server_args(["-c", "65536"]), hw))
    cfg = p.effective_cfg
    ts = cfg.tensor_split
    assert len(ts) == 2 and sum(ts) == cfg.n_gpu_layers
    assert all(d.free >= 1024 * MiB for d in p.devices)
    # fit.cpp:672-732: the last device is filled first, measured with nothing on the devices
    # before it; then device 0 gets what fits of the rest. One more layer misses the target.
    a, b = int(ts[0]), int(ts[1])

    def at(n0: int, n1: int):
        return make_plan(PlanInputs(spec, parse_server_args(
            ["-c", "65536", "-ngl", str(n0 + n1), "-ts", f"{n0},{n1}"]), hw))

    assert at(0, b).devices[1].free >= 1024 * MiB > at(0, b + 1).devices[1].free
    assert at(a, b).devices[0].free >= 1024 * MiB > at(a + 1, b).devices[0].free
    # with -ts given, fit does not touch the layers (fit.cpp:470-475)
    p2 = make_plan(PlanInputs(spec, parse_server_args(["-c", "65536", "-ts", "1,1"]), hw))
    assert any("-ts given" in n for n in p2.notes)


def test_fit_moe_moves_experts_not_layers() -> None:
    spec, _ = _spec("qwen3-30b-a3b:q8_0")
    hw = Hardware((parse_gpu_arg("4060ti"),))
    p = make_plan(PlanInputs(spec, parse_server_args(["-c", "8192", "-np", "1"]), hw))
    cfg = p.effective_cfg
    assert cfg.n_gpu_layers == spec.n_layer_main + 1  # every layer's dense part on the GPU
    assert cfg.override_tensor and all("ffn_" in pat for pat, _ in cfg.override_tensor)
    assert p.fits and p.devices[0].free >= 1024 * MiB
    assert any("expert tensors of" in n for n in p.notes)


def test_sm_tensor_note_and_full_context() -> None:
    spec, _ = _spec("qwen3.6-27b:iq4_nl")
    hw = Hardware((parse_gpu_arg("rtx3090"), parse_gpu_arg("rtx3090")))
    p = make_plan(PlanInputs(spec, parse_server_args(["-sm", "tensor"]), hw))
    assert p.n_ctx == spec.n_ctx_train  # llama_context's n_ctx_train, not x streams
    assert any("SPLIT_MODE_TENSOR" in n for n in p.notes)


def test_cpp_integer_semantics() -> None:
    assert P._tdiv(-7, 2) == -3 and P._tdiv(7, 2) == 3
    assert P._u32(-3) == (1 << 32) - 3  # a negative step becomes huge, then clamped to delta - 1
    assert P._overflow_pattern(5, P._MOE) == r"blk\.5\.ffn_(up|down|gate_up|gate)_(ch|)exps"
    assert P._overflow_pattern(5, P._UP) == r"blk\.5\.ffn_(gate|gate_up|down).*"


def test_margins_broadcast_and_list() -> None:
    assert P._margins(parse_server_args(["-fitt", "512"]), 3) == [512 * MiB] * 3
    assert P._margins(parse_server_args(["-fitt", "512,256"]), 3) == [512 * MiB, 256 * MiB, 1024 * MiB]


# ------------------------------------------------------------------------------ draft flags


def test_draft_ngld_and_devd() -> None:
    tgt, _ = _spec("qwen3-32b:q4_k_m")
    dft, _ = _spec("qwen3-8b:q4_k_m")
    hw = Hardware((parse_gpu_arg("rtx3090"),))
    on = make_plan(PlanInputs(tgt, parse_server_args(["-c", "16384"]), hw, draft=dft))
    assert on.devices[0].get("draft") > 4e9
    for flags in (["-ngld", "0"], ["-devd", "none"], ["--n-gpu-layers-draft", "0"]):
        off = make_plan(PlanInputs(tgt, parse_server_args(["-c", "16384", *flags]), hw, draft=dft))
        # no draft weights or KV on the GPU; with -ngld 0 the GPU is still one of the draft context's
        # backends and takes its prompt batches' matmuls (op offload: the weights copied into its
        # compute buffer, ggml-backend.cpp:1100-1118); -devd none leaves it out
        assert off.devices[0].get("draft") < 0.05 * on.devices[0].get("draft")
        assert (off.devices[0].get("draft") == 0) == (flags[0] == "-devd")
        assert off.host.get("draft") > 4e9
    part = make_plan(PlanInputs(tgt, parse_server_args(["-c", "16384", "-ngld", "10"]), hw, draft=dft))
    assert 0 < part.devices[0].get("draft") < on.devices[0].get("draft")
    assert parse_server_args(["-otd", "exps=CPU", "-ncmoed", "2", "-cmoed"]).n_cpu_moe_draft == 2


def test_draft_flags_after_dashdash_are_not_dropped(capsys) -> None:
    r = _run(capsys, "--gpu", "rtx3090", "--json", "--", "llama-server", "-m", "qwen3-32b:q4_k_m",
             "-md", "qwen3-8b:q4_k_m", "-c", "16384", "-ngld", "0")
    d = json.loads(r.output[: len(r.output) - len(r.err)])
    assert d["devices"][0]["draft"] < 2e8 and d["host"]["draft"] > 4e9  # op offload's compute only
    assert "-ngld" in d["command"]


# ------------------------------------------------------------------------------ input checks


class _Result:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.exit_code, self.output, self.err = code, out + err, err


def _run(capsys, *args: str) -> _Result:
    try:
        rc = main(["plan", *args])
        code = rc if isinstance(rc, int) else 0
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return _Result(code, out.out, out.err)


def test_cli_fit_exit_code_and_speed_sees_cpu_layers(capsys) -> None:
    r = _run(capsys, "qwen3.6-27b:q8_0", "--gpu", "rtx3090", "-c", "8192", "--json")
    assert r.exit_code == 0
    d = json.loads(r.output[: len(r.output) - len(r.err)])
    assert d["fits"] and any("decode will be much slower" in w for w in d["warnings"])


def test_effective_inputs_carry_fitted_layers() -> None:
    spec, _ = _spec("qwen3.6-27b:q8_0")
    inp = PlanInputs(spec, parse_server_args(["-c", "8192"]), Hardware((parse_gpu_arg("rtx3090"),)))
    p = make_plan(inp)
    assert effective_inputs(inp, p).cfg.n_gpu_layers == p.effective_cfg.n_gpu_layers


def test_contradictions(capsys) -> None:
    r = _run(capsys, "qwen3.6-27b:iq4_nl", "--gpu", "rtx3090", "--json", "--", "llama-server", "-m", "other.gguf", "-c", "8192")
    assert r.exit_code == 0
    assert any("-m other.gguf" in w and "ignored" in w for w in json.loads(r.output[: len(r.output) - len(r.err)])["warnings"])
    r = _run(capsys, "--gpu", "rtx3090", "--", "llama-server", "-m", "x.gguf", "-hf", "org/repo")
    assert r.exit_code == 2 and "-hf" in r.output and "Traceback" not in r.output


def test_unknown_flag_after_dashdash_and_stoi_suffix(capsys) -> None:
    r = _run(capsys, "--gpu", "rtx3090", "--json", "--", "llama-server", "-m", "qwen3.6-27b:iq4_nl", "--bogus-flag", "3",
             "-c", "8192", "--temp", "0.7")
    d = json.loads(r.output[: len(r.output) - len(r.err)])
    assert any("--bogus-flag" in w and "refuse to start" in w for w in d["warnings"])
    assert not any("--temp" in w for w in d["warnings"])
    assert d["n_ctx"] == 8192
    r = _run(capsys, "qwen3.6-27b:iq4_nl", "--gpu", "rtx3090", "--json", "-c", "8k")
    d = json.loads(r.output[: len(r.output) - len(r.err)])
    assert d["n_ctx"] == 256 and any("std::stoi" in w and "8k" in w for w in d["warnings"])


def test_gpu_name_ambiguity_note(capsys) -> None:
    note = gpu_match_note("A100")
    assert note and "a100-40" in note and "a100-80" in note
    assert gpu_match_note("a100-80") is None and gpu_match_note("rtx3090") is None
    r = _run(capsys, "qwen3.6-27b:iq4_nl", "--gpu", "A100", "-c", "8192", "--json")
    assert any("a100-80" in n for n in json.loads(r.output[: len(r.output) - len(r.err)])["notes"])


# ---------------------------------------------------------------- fit and the draft (issue 42)


def _rpc_plan(synth_model, shape: str, mems: list[int], flags: str):
    from llamarig.plan.inputs import build_plan
    from llamarig.testing.plans import deployment_of
    from llamarig.testing.rpc_grid import SHAPES, draft_shapes

    arch, kw = SHAPES[shape]
    path = synth_model(arch, **kw)
    drafts = {n: str(synth_model(SHAPES[n][0], **SHAPES[n][1])) for n in draft_shapes(flags)}
    eps = [f"127.0.0.1:{5000 + i}" for i in range(len(mems))]
    return build_plan(deployment_of(str(path), ["--rpc", ",".join(eps), *flags.format(**drafts).split()],
                                    rpc_devices=[f"{e}={m}M" for e, m in zip(eps, mems, strict=True)]))


def test_fit_under_counts_a_device_settled_before_the_others_took_layers(synth_model) -> None:
    """The RPC rig's case (tests/plan/test_rpc_grid.py, FIT_GRID): fit settles the last device
    at 4 layers with 42 MiB counted (its trace: "4 layers, 42 MiB used"), then the first takes 3,
    every layer is offloaded, pipeline parallelism turns on, and the last device ends at 61.37
    MiB on 48 (what the rpc-server holds): the plan counts that and says fit under-counts it."""
    p = _rpc_plan(synth_model, "qwen35-mtp", [40, 48], "-c 4096 -fitt 2 --spec-type draft-mtp")
    assert p.effective_cfg is not None and tuple(p.effective_cfg.tensor_split) == (3, 4)
    last = p.devices[1]
    assert round(last.total / MiB, 2) == 61.37 and last.capacity == 48 * MiB
    (w,) = [w for w in p.warnings if "--fit under-counts" in w]
    assert last.name in w and "42.76 MiB" in w and "common/fit.cpp:706" in w
    assert not any(p.devices[0].name in x for x in p.warnings if "--fit under-counts" in x)
    # where fit's count holds, no such warning
    ok = _rpc_plan(synth_model, "qwen35-mtp", [80, 80], "-c 4096 -fitt 8 --spec-type draft-mtp")
    assert not any("--fit under-counts" in x for x in ok.warnings)


def test_the_draft_model_follows_fits_split(synth_model) -> None:
    """fit writes its layers per device into the main params' tensor_split, and the server makes
    the draft's params from those after fitting: on two 40 MiB devices fit puts the main model on
    the second, and the draft goes there too (as the rpc-server's trace shows), not half and half
    as the user's (default) split would put it."""
    p = _rpc_plan(synth_model, "llama", [40, 40], "-c 4096 -fitt 4 -md {llama-draft} --spec-type draft-simple")
    assert p.effective_cfg is not None and p.effective_cfg.tensor_split[0] == 0
    assert p.devices[0].get("draft") == 0 and p.devices[1].get("draft") > 0


def test_a_draft_model_without_a_spec_type_is_loaded_then_freed(synth_model) -> None:
    from llamarig.plan.draft.draft_estimator import DRAFT_UNUSED

    unused = _rpc_plan(synth_model, "llama", [400, 400], "-c 4096 -md {llama-draft}")
    assert any(d.code == DRAFT_UNUSED for d in unused.diagnostics)
    used = _rpc_plan(synth_model, "llama", [400, 400], "-c 4096 -md {llama-draft} --spec-type draft-simple")
    assert not any(d.code == DRAFT_UNUSED for d in used.diagnostics)


def test_fit_and_speed_notes_are_coded_diagnostics_in_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    """What --fit's model and the speed figures say reaches the views as Diagnostics: each with
    its code in `plan --json` (diagnostics, speed.diagnostics), the printed text its message."""
    spec, _ = _spec("qwen3.6-27b:q8_0")
    p = make_plan(PlanInputs(spec, parse_server_args(["-c", "8192"]), Hardware((parse_gpu_arg("rtx3090"),))))
    codes = {d.code: d for d in p.diagnostics}
    assert P.FIT_PLACEMENT in codes and P.FIT_MOVES_TO_CPU in codes
    assert codes[P.FIT_MOVES_TO_CPU].message in p.warnings and codes[P.FIT_PLACEMENT].message in p.notes
    main(["plan", "qwen3.6-27b:q8_0", "--gpu", "rtx3090", "-c", "8192", "-ctk", "q4_0", "-ctv", "q8_0", "--json"])
    doc = json.loads(capsys.readouterr().out)
    got = {d["code"] for d in doc["diagnostics"]}
    assert {P.FIT_PLACEMENT, P.FIT_MOVES_TO_CPU} <= got and "fit" not in got
    speed = doc["speed"]
    assert [d["message"] for d in speed["diagnostics"] if d["severity"] == "warning"] == speed["warnings"]
    assert [d["code"] for d in speed["diagnostics"]] == ["speed-kv-path"]  # K/V converted each token
