"""One truth of what runs: every view reads the resolved deployment (llamarig.app.resolution).

For the field reports' commands (tests/fixtures/seeds/: report 004's systemd ExecStart, report
000's script as pasted and with its `#` restored) and for generated variants on a synthetic
model, the per-slot context, the slots, the KV types and what --fit can do read the same in
plan, plan --json, explain, explain --json, check and render's header, in English and Chinese,
as the one Resolution computed by the library says. Where the behaviour is the server's (the
per-slot cap at n_ctx_train, `-c -5`), the real llama-server is asked too.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

import llamarig
from llamarig import i18n
from llamarig.app.check import what_runs
from llamarig.app.resolution import Resolution
from llamarig.app.runs import price
from llamarig.testing.synth import write_model

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"

#: (script, model, GPU) of the field reports: 004 on an RTX 5090 (n_ctx_train 262144, -c 307200
#: -np 4 -kvu), 000 on an RTX 3090 (--fit on -ngl 99 -c 105000), pasted and `#` restored
REPORTS = [
    pytest.param(SEEDS / "004_execstart.sh", "qwen3.8-27b:ud-q4_k_xl", "rtx5090", id="004"),
    pytest.param(SEEDS / "000_run105k.sh", "qwen3.6-27b:iq4_nl", "rtx3090", id="000-restored"),
    pytest.param(SEEDS / "000_run105k_pasted.sh", "qwen3.6-27b:iq4_nl", "rtx3090", id="000-pasted"),
]

LANGS = ["en", "zh"]


def _rx(msgid: str, lang: str) -> re.Pattern[str]:
    """A catalogue message in ``lang`` as a regex over :func:`_flat` text, its fields as named
    groups (the views wrap at the terminal's width, also inside a Chinese sentence)."""
    parts = re.split(r"\{(\w+)\}", i18n.translator(lang)(msgid))
    out = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 2 and not parts[-1].strip()  # the last field takes the rest
        out.append((rf"(?P<{part}>.+)" if last else rf"(?P<{part}>.+?)") if i % 2 else re.escape(_flat(part)))
    return re.compile("".join(out))


def _flat(text: str) -> str:
    """The text without blanks and comment marks: where a view wrapped a line does not matter."""
    return "".join(text.replace("#", " ").split())


def _resolution(script: Path, model: str | None, gpu: str | None) -> Resolution:
    """The library's one resolved value of the script's first command."""
    report = llamarig.check(script.read_text(encoding="utf-8"), model=model, origin=script, base_dir=script.parent)
    gpus = (llamarig.gpu(gpu),) if gpu else ()
    return price(what_runs(report, 0), model=model, gpus=gpus, base_dir=script.parent)


def _run(cli, *argv: str) -> tuple[int, str, str]:
    code, out, err = cli(*argv)
    assert code in (0, 1), err
    return code, out, err


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # one line per message: the regexes read whole sentences
    monkeypatch.delenv("LLAMARIG_LANG", raising=False)
    yield
    i18n.set_language(None)


def _explain_per_slot(out: str, lang: str) -> int:
    head = _rx("what runs (line {line}): {settings}", lang).search(_flat(out))
    assert head, out[:600]
    per = re.search(re.escape(_flat(i18n.translator(lang)("context per slot"))) + r"\D{0,3}(\d+)",
                    head.group("settings"))
    assert per, head.group("settings")
    return int(per.group(1))


@pytest.mark.parametrize(("script", "model", "gpu"), REPORTS)
@pytest.mark.parametrize("lang", LANGS)
def test_field_reports_read_the_same_everywhere(script: Path, model: str, gpu: str, lang: str, cli) -> None:
    res = _resolution(script, model, gpu)
    st = res.settings
    if res.runs.plan is None:  # as pasted, the lines lost their `\`: llama-server receives no model
        assert st is None and res.pair.received == ("./llama3-server",)
        _c, out, _e = _run(cli, "explain", "--bundled", "--json", "--model", model, "--gpu", gpu, str(script))
        assert json.loads(out)["invocations"][0]["runs"]["settings"] is None
        code, out, err = cli("--lang", lang, "plan", model, "--gpu", gpu, "--from-script", str(script))
        assert code == 2 and not out and "-m" in err
        return
    assert st is not None and st.method == "plan"
    if script.name.startswith("004"):  # the server caps each slot at n_ctx_train (server-context.cpp:4384)
        assert (st.n_ctx_slot, st.clamped_from, st.slots, st.unified) == (262144, 307200, 4, True)
    # explain, text and --json
    _c, out, _e = _run(cli, "--lang", lang, "explain", "--bundled", "--model", model, "--gpu", gpu, str(script))
    assert _explain_per_slot(out, lang) == st.n_ctx_slot
    _c, out, _e = _run(cli, "explain", "--bundled", "--json", "--model", model, "--gpu", gpu, str(script))
    doc = json.loads(out)["invocations"][0]
    assert doc["runs"]["n_ctx_slot"] == st.n_ctx_slot and doc["runs"]["settings"] == st.to_json()
    assert doc["fit"] == res.fit.to_json()
    # plan --from-script, text and --json
    _c, out, _e = _run(cli, "plan", model, "--gpu", gpu, "--json", "--from-script", str(script))
    plan = json.loads(out)
    assert (plan["n_ctx_slot"], plan["n_parallel"], plan["kv_unified"]) == (st.n_ctx_slot, st.slots, st.unified)
    assert (plan["cache_type_k"], plan["cache_type_v"]) == (st.cache_type_k, st.cache_type_v)
    _c, out, _e = _run(cli, "--lang", lang, "plan", model, "--gpu", gpu, "--from-script", str(script))
    m = _rx("{model} ({arch}): n_ctx {n_ctx}, {slots} slot(s), {kv_mode} ({per_slot} tokens per slot), K {k} / V {v}, "
            "flash attention {fa}, n_ubatch {ub}", lang).search(_flat(out))
    assert m and (int(m["per_slot"]), int(m["slots"]), m["k"], m["v"]) == (
        st.n_ctx_slot, st.slots, st.cache_type_k, st.cache_type_v), out[:400]
    # check: the cap and --fit as the resolution has them (the --fit of these scripts is written)
    _c, out, _e = _run(cli, "check", "--bundled", "--json", "--model", model, str(script))
    findings = [f for f in json.loads(out)["findings"] if f["invocation"] == 0]
    fit_rules = sorted(f["rule"] for f in findings if f["rule"].startswith("fit-"))
    # what --fit can do for what runs, and (report 000: the cut-off -ngl 99) for the command as meant
    assert fit_rules == sorted(d.code for d in res.diagnostics if d.code.startswith("fit-"))
    assert ("fit-meant" in fit_rules) == (res.meant_fit is not None and res.meant_fit.can_act != res.fit.can_act)
    capped = [f for f in findings if f["rule"] == "slot-ctx-above-train"]
    assert bool(capped) == (st.clamped_from is not None)
    assert all(str(st.n_ctx_slot) in f["message"] for f in capped)
    _c, out, _e = _run(cli, "--lang", lang, "check", "--bundled", "--model", model, str(script))
    assert all(rule in out for rule in fit_rules)


def test_need_ctx_is_judged_against_the_capped_slot(cli) -> None:
    """Report 004: -c 307200 over 4 unified slots holds 262144 per slot (n_ctx_train): a request of
    300000 tokens does not fit one, and check says so."""
    script = SEEDS / "004_execstart.sh"
    _c, out, _e = _run(cli, "check", "--bundled", "--json", "--model", "qwen3.8-27b:ud-q4_k_xl", "--need-ctx",
                       "300000", str(script))
    need = [f for f in json.loads(out)["findings"] if f["rule"] == "per-slot-ctx" and "300000" in f["message"]]
    assert need and "262144" in need[0]["message"] and need[0]["severity"] == "warning"


# ------------------------------------------------------------------ generated variants


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A llama of 2 layers trained at 4096 tokens: contexts above it are capped per slot."""
    return write_model(tmp_path_factory.mktemp("truth") / "small.gguf", "llama", n_layer=2, n_embd=256, n_head=4,
                       n_head_kv=2, head_dim=64, n_ff=512, n_ctx_train=4096)


VARIANTS = [
    pytest.param(["-c", "16384", "-np", "2", "-kvu"], id="unified-capped"),
    pytest.param(["-c", "16384", "-np", "2"], id="split-capped"),
    pytest.param(["-c", "3000", "-np", "3"], id="split-padded"),
    pytest.param([], id="defaults"),
    pytest.param(["-c", "2048", "--fit", "on", "-ngl", "99", "-ctk", "q8_0", "-ctv", "q8_0"], id="fit-cannot-act"),
]


@pytest.mark.parametrize("args", VARIANTS)
@pytest.mark.parametrize("lang", LANGS)
def test_generated_variants_read_the_same_everywhere(args: list[str], lang: str, small_model: Path,
                                                     tmp_path: Path, cli) -> None:
    script = tmp_path / "run.sh"
    script.write_text(" ".join(["llama-server", "-m", str(small_model), *args]) + "\n")
    res = _resolution(script, None, "rtx3090")
    st = res.settings
    assert st is not None and st.method == "plan"
    _c, out, _e = _run(cli, "--lang", lang, "explain", "--bundled", "--gpu", "rtx3090", str(script))
    assert _explain_per_slot(out, lang) == st.n_ctx_slot
    _c, out, _e = _run(cli, "explain", "--bundled", "--json", "--gpu", "rtx3090", str(script))
    assert json.loads(out)["invocations"][0]["runs"]["settings"] == st.to_json()
    _c, out, _e = _run(cli, "plan", "--gpu", "rtx3090", "--json", "--", "llama-server", "-m", str(small_model), *args)
    plan = json.loads(out)
    assert (plan["n_ctx_slot"], plan["n_parallel"], plan["cache_type_k"]) == (st.n_ctx_slot, st.slots,
                                                                             st.cache_type_k)
    _c, out, _e = _run(cli, "--lang", lang, "render", "--gpu", "rtx3090", str(small_model), *args)
    m = _rx("n_ctx {n_ctx}, {n_par} slot(s) x {per} tokens, KV K {tk} / V {tv} = {bpt} B/token, n_ubatch {ub}, "
            "flash attention {fa}", lang).search(
        _flat(out))
    assert m and (int(m["n_par"]), int(m["per"]), m["tk"], m["tv"]) == (
        st.slots, st.n_ctx_slot, st.cache_type_k, st.cache_type_v), out[:800]
    _c, out, _e = _run(cli, "check", "--bundled", "--json", str(script))
    fit_rules = sorted(f["rule"] for f in json.loads(out)["findings"] if f["rule"].startswith("fit-"))
    assert fit_rules == (sorted(d.code for d in res.fit.blocked) if "--fit" in args else [])
    if "--fit" in args:
        assert not res.fit.can_act and fit_rules == ["fit-cannot-act"]


# ------------------------------------------------------------------ the real server


@pytest.mark.server
@pytest.mark.parametrize("args", [["-c", "16384", "-np", "2", "-kvu"], ["-c", "16384", "-np", "2"]],
                         ids=["unified", "split"])
def test_the_server_caps_the_slot_as_the_resolution_says(args: list[str], small_model: Path, tmp_path: Path,
                                                         llama_server) -> None:
    script = tmp_path / "run.sh"
    script.write_text(" ".join(["llama-server", "-m", str(small_model), *args]) + "\n")
    st = _resolution(script, None, None).settings
    assert st is not None
    srv = llama_server(small_model, *args)
    logged = re.search(r"n_ctx_slot = (\d+)", srv.log_path.read_text(errors="replace"))
    assert logged and int(logged.group(1)) == st.n_ctx_slot == 4096


@pytest.mark.server
def test_negative_context_aborts_the_server_and_check_says_so(small_model: Path, server_bin: Path, tmp_path: Path,
                                                              cli) -> None:
    """`-c -5`: the parser takes it and the server aborts on GGML_ASSERT(n_outputs >= 1)
    (src/llama-context.cpp:2529); check reports it as an error (exit 1)."""
    argv = [str(server_bin), "-m", str(small_model), "-c", "-5", "-ngl", "99", "--port", "0"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)  # killed by run on timeout
    assert p.returncode != 0 and "GGML_ASSERT(n_outputs >= 1)" in p.stdout + p.stderr
    script = tmp_path / "run.sh"
    script.write_text(f"llama-server -m {small_model} -c -5 -ngl 99\n")
    code, out, _err = cli("check", "--bundled", "--json", str(script))
    assert code == 1 and any(f["rule"] == "server-aborts" for f in json.loads(out)["findings"])


@pytest.mark.parametrize("text", ["", "# only a comment\n\n# and another\n"], ids=["empty", "comments"])
def test_no_server_command_is_bad_input(text: str, tmp_path: Path, cli) -> None:
    script = tmp_path / "x.sh"
    script.write_text(text)
    code, out, err = cli("check", "--bundled", str(script))
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and "no llama-server command" in err


def test_render_prices_a_catalogue_model_as_plan_does(tmp_path: Path, cli) -> None:
    """The 3090 owner's priced deployment script: a catalogue id rendered with the GGUF's path
    where it runs (--model-path), its header the plan's figures for the same command."""
    args = ["-c", "105000", "-np", "1", "-ctk", "q8_0", "-ctv", "q8_0"]
    code, out, err = cli("render", "--model-path", "/data/models/q.gguf", "qwen3.6-27b:iq4_nl", "--gpu", "rtx3090",
                         *args)
    assert code == 0, err
    _c, pj, _e = _run(cli, "plan", "qwen3.6-27b:iq4_nl", "--gpu", "rtx3090", "--json", *args)
    plan = json.loads(pj)
    m = _rx("n_ctx {n_ctx}, {n_par} slot(s) x {per} tokens, KV K {tk} / V {tv} = {bpt} B/token, n_ubatch {ub}, "
            "flash attention {fa}", "en").search(_flat(out))
    assert m and (int(m["n_par"]), int(m["per"]), m["tk"]) == (plan["n_parallel"], plan["n_ctx_slot"],
                                                               plan["cache_type_k"])
    assert "-m /data/models/q.gguf" in out and "planned from the catalogue" in " ".join(out.split())
    code, out, err = cli("render", "qwen3.6-27b:iq4_nl", "--gpu", "rtx3090", *args)
    assert code == 2 and not out and "--model-path" in err


def test_a_placeholder_path_is_named_not_resolved(small_model: Path, cli) -> None:
    code, out, err = cli("render", str(small_model), "-c", "2048", "--chat-template-file",
                         ".../chat_template_fixed_patched.jinja")
    assert code == 0, err
    assert "--chat-template-file .../chat_template_fixed_patched.jinja" in out
    assert "is a placeholder" in " ".join(out.split())


def test_every_subcommand_takes_lang(cli) -> None:
    """--lang comes from one definition (cli/options.py) on every subcommand; render no longer
    hands it to llama-server."""
    from llamarig.cli.main import COMMANDS

    for name in COMMANDS:
        code, out, err = cli(name, "--lang", "zh", "--help")
        assert code == 0 and out, (name, err)
        i18n.set_language(None)


@pytest.mark.parametrize(("args", "fixed", "cites"), [
    (["-c", "8192"], True, "common/fit.cpp:455"),
    (["-c", "0"], True, "common/arg.cpp:1648"),  # the full training context: fit never reduces it
    ([], False, None),
])
def test_fit_keeps_a_context_the_user_gave(args: list[str], fixed: bool, cites: str | None) -> None:
    from llamarig.app.resolution import fit_state
    from llamarig.plan.config import parse_server_args

    st = fit_state(parse_server_args(["--fit", "on", "-ngl", "99", *args], strict=False))
    assert st.context_fixed is fixed and st.layers_fixed == ("-ngl",) and st.written
    assert [d.code for d in st.blocked] == (["fit-cannot-act"] if fixed else ["fit-layers-fixed"])
    assert cites is None or cites in st.blocked[0].message
