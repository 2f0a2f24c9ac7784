"""Honest verdicts (llamarig.plan.optimise.verdict) on the field reports' cases: a target met only if
quantized K/V read as fast as f16 is "maybe", with the assumption named; a headline decode with
MTP says so and stays under its own limit; "fits" says when layers or the model's KV live in host
RAM that nobody checked."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from llamarig.app.check import check, what_runs
from llamarig.app.runs import price_argv
from llamarig.cli.main import main
from llamarig.plan.optimise.verdict import decode_headline, fit_qualifier
from llamarig.testing.plans import gpus_of, plan_of

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"
QWEN36 = "qwen3.6-27b:iq4_nl"


def _plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    capsys.readouterr()
    with contextlib.suppress(SystemExit):  # plan exits 1 when a target is not met
        main(["plan", *argv, "--json"])
    return json.loads(capsys.readouterr().out)


def test_quantized_kv_target_is_maybe_with_the_assumption_named(capsys: pytest.CaptureFixture[str]) -> None:
    """The RTX 3090 field report's targets: q8_0 was 'yes' on an assumption the same output called
    unmeasured (quantized K/V read as fast as f16; 9.4x slower per byte on the H200)."""
    d = _plan_json(capsys, QWEN36, "--mmproj", "f16", "--gpu", "rtx3090", "--target-ctx", "105000",
                   "--target-decode", "40", "--target-depth", "45000")
    assert d["verdict"] == "maybe"
    best = d["best"]
    assert best["cache_type_k"] != "f16" and best["verdict"] == "maybe"
    a = best["assumptions"][0]
    assert a["code"] == "kv-quant-read" and "read as fast per byte as f16" in a["message"]
    assert "H200" in a["message"] and a["decode_if_wrong_tok_s"] < 40
    assert any(c["verdict"] == "slow" and c["cache_type_k"] == "f16" for c in d["candidates"])
    # f16 is measured: a target f16 meets is a plain yes
    d = _plan_json(capsys, QWEN36, "--mmproj", "f16", "--gpu", "rtx3090", "--target-ctx", "105000",
                   "--target-decode", "30", "--target-depth", "45000")
    assert d["verdict"] == "ok" and d["best"]["cache_type_k"] == "f16" and d["best"]["verdict"] == "yes"


@pytest.mark.parametrize("gpu", ["v100", "rtx5090"])
def test_mtp_headline_stays_under_its_limit(gpu: str) -> None:
    """The 32 GB card field report's unit (its ExecStart command, copied verbatim): the headline
    said 'decode 77.7 tok/s ... (modelled; physical limit 44)', MTP unnamed."""
    p = SEEDS / "004_execstart.sh"
    pair = what_runs(check(p.read_text(encoding="utf-8"), origin=p), 0)
    priced, _notes = price_argv(pair.received, model="qwen3.8-27b:ud-q4_k_xl", gpus=gpus_of([gpu]), speed=True)
    assert priced.plan is not None and priced.plan.speed.speculative is not None
    h = decode_headline(priced.plan.speed)
    assert h.n_max == 4 and h.kind == "MTP"
    assert h.d0 <= h.limit and h.deep <= h.limit and h.base <= h.base_limit
    assert h.d0 > h.base_limit  # the figure the old headline put above its stated limit
    line = h.lines(priced.plan.speed.prefill.tok_s)
    assert "with MTP speculative decoding" in line[0] and "assumed" in line[1] and "without it" in line[1]


def test_fits_is_qualified_when_layers_live_in_unchecked_host_ram(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan ... -c 2000000 -np 1` opened with 'fits' while --fit moved most layers to a host that
    needs 130 GiB, unchecked, at 1.5 tok/s."""
    plan = plan_of(QWEN36, ["-c", "2000000", "-np", "1"], gpus=["rtx3090"], mmproj="f16")
    q = fit_qualifier(plan)
    assert plan.fits and q.qualified and q.by_fit
    # as the --fit note: 5 of 65 on the GPU (the CPU layers' flash attention runs on the GPU for
    # prompt batches and copies their K and V in: 7.6 GiB of its compute buffer at 2M cells)
    assert q.host_layers == 60 and q.n_layers == 65
    assert q.unchecked_bytes == plan.host.start_total > 100 * 2**30
    capsys.readouterr()
    main(["plan", QWEN36, "--mmproj", "f16", "--gpu", "rtx3090", "-c", "2000000", "-np", "1"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("may not fit (host RAM not checked)")
    # with the host RAM given and enough of it, it fits, and still says where the layers are
    plan = plan_of(QWEN36, ["-c", "2000000", "-np", "1"], gpus=["rtx3090"], mmproj="f16", ram="192G")
    q = fit_qualifier(plan)
    assert q.unchecked_bytes is None and q.verdict(plan.fits) == "fits, with 60 of 65 layers in host RAM"


def test_everything_on_the_gpu_is_a_plain_fits() -> None:
    plan = plan_of(QWEN36, ["-c", "105000"], gpus=["rtx3090"], mmproj="f16")
    q = fit_qualifier(plan)
    assert not q.qualified and q.verdict(plan.fits) == "fits"
    h = decode_headline(plan.speed)
    assert h.n_max is None and h.d0 <= h.limit


def test_the_headline_counts_host_layers_from_fits_placement(tmp_path) -> None:
    """Two rpc-servers of 48 and 32 MiB, -fitt 4 -np 1, a 6-layer llama: --fit places 5 of the 7
    layers (the output layer counted) on the devices (-ngl 5 -ts 3,2); the speed model runs an
    rpc-server's CPU device on the CPU backend like the host, so the headline must read the
    placement from fit (2 of 7 in host RAM), as the plan's own --fit note does, not 7 of 7."""
    import llamarig
    from llamarig.plan.rpc import parse_rpc_device
    from llamarig.testing.synth import write_model

    model = write_model(tmp_path / "l6.gguf", "llama", n_layer=6, n_embd=512, n_head=8, n_head_kv=4, head_dim=64,
                        n_ff=1024, n_ctx_train=4096)
    rpc = (*parse_rpc_device("127.0.0.1:50052=48M"), *parse_rpc_device("127.0.0.1:50053=32M"))
    d = llamarig.deployment(str(model), command=["llama-server", "--rpc", "127.0.0.1:50052,127.0.0.1:50053", "-fitt",
                                                 "4", "-np", "1"], hardware=llamarig.machine(rpc=rpc))
    plan = llamarig.plan_command(d)
    eff = plan.effective_cfg
    assert eff is not None and eff.n_gpu_layers == 5 and eff.tensor_split == (3.0, 2.0)
    q = fit_qualifier(plan)
    assert (q.host_layers, q.n_layers, q.by_fit) == (2, 7, True)
    assert any("5 of 7 layers" in n and "2 layer(s) in host memory" in n for n in plan.notes)
