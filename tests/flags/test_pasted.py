"""Scripts as users paste them out of a chat (tests/fixtures/pasted: cut byte for byte out of the
field reports, SOURCES.json says where): every garbled line named, the one meant command rebuilt
by --fix, and the result checked again against the real llama-server's flags."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llamarig.app.check import check, fix
from llamarig.flags.reading import read_script
from llamarig.flags.schema import Schema, load_bundled, load_schema

ROOT = Path(__file__).resolve().parents[2]
PASTED = ROOT / "tests" / "fixtures" / "pasted"
SEEDS = ROOT / "tests" / "fixtures" / "seeds"
MANIFEST = json.loads((PASTED / "SOURCES.json").read_text(encoding="utf-8"))["files"]
SERVER_SCRIPTS = ["seed000_105k", "seed000_user_final", "seed000_original"]


def _build(name: str) -> bytes:
    """A fixture rebuilt from the seeds and SOURCES.json."""
    e = MANIFEST[name]
    if "seed" in e:
        first, last = e["lines"]
        lines = (SEEDS / e["seed"]).read_bytes().split(b"\n")
        return b"\n".join(lines[first - 1:last]) + b"\n"
    lines = _build(e["from"]).split(b"\n")
    for n in e.get("comment", []):
        indent = re.match(rb"[ \t]*", lines[n - 1])
        assert indent is not None
        lines[n - 1] = indent.group(0) + b"# " + lines[n - 1][indent.end():]
    for n in e.get("continue", []):
        lines[n - 1] += b" \\"
    return b"\n".join(lines)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_fixtures_are_cut_from_the_seeds(name: str) -> None:
    assert (PASTED / name).read_bytes() == _build(name)


@pytest.fixture(scope="module")
def real_schema(server_bin: Path) -> Schema:
    return load_schema(str(server_bin))


def _text(name: str) -> str:
    return (PASTED / name).read_text(encoding="utf-8")


def _rules(report_findings: list, *rules: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {r: [] for r in rules}
    for f in report_findings:
        if f.rule in out:
            out[f.rule].append(f.line)
    return out


def test_user_final_as_pasted_every_garbled_line_named() -> None:
    """The script the RTX 3090 user ran, as the chat pasted it: prose lines that lost their `#`,
    lines that lost their `\\`, blank lines after a `\\`, prose after the last flags: each named
    on its own line."""
    rep = check(_text("seed000_user_final.pasted.sh"), schema=load_bundled(), cores=6)
    got = _rules(rep.findings, "paste-prose", "missing-backslash", "gap-after-backslash", "paste-prose-tail",
                 "continuation-broken")
    assert got["paste-prose"] == MANIFEST["seed000_user_final.hash.sh"]["comment"]
    assert got["missing-backslash"] == [6, 7, 8, 37, 39, 40, 41, 42, 43, 44, 45, 46]
    assert got["gap-after-backslash"] == [10, 14, 18, 22, 26, 30, 34]
    assert got["paste-prose-tail"] == [47]
    assert got["continuation-broken"] == [5]
    # one command, as the shell gets it (nothing) and as meant (all of it)
    assert len(rep.parsed.invocations) == 1
    inv = rep.parsed.invocations[0]
    assert inv.program == "./llama3-server" and inv.args == [] and inv.cut_line == 5
    assert rep.reading is not None and rep.reading.meant is not None
    assert rep.reading.meant.argv[:3] == ["./llama3-server", "-m", "/data/models/Qwen3.6-27B-Omnimerge-v4-IQ4_NLmanni.gguf"]
    # as bash runs it: the server with no argument, and seven fragments run as commands of their own
    received = rep.reading.received
    assert received[0].args == [] and [r.source for r in received[1:]] == ["fragment"] * 7


def test_105k_as_pasted_names_the_code_block_labels() -> None:
    rep = check(_text("seed000_105k.pasted.sh"), schema=load_bundled(), cores=6)
    got = _rules(rep.findings, "paste-fence", "paste-prose")
    assert got["paste-fence"] == [1, 2]
    assert got["paste-prose"] == MANIFEST["seed000_105k.hash.sh"]["comment"]


def test_hash_restored_reads_as_the_pasted_one() -> None:
    """With the `#` restored the meant command is the same; only the prose findings go."""
    for name in ("seed000_105k", "seed000_user_final"):
        pasted = read_script(_text(f"{name}.pasted.sh"))
        restored = read_script(_text(f"{name}.hash.sh"))
        assert pasted.meant_argv == restored.meant_argv
        assert not [n for n in restored.line_notes if n.kind == "paste-prose"]


@pytest.mark.parametrize("name", [f"{n}.pasted.sh" for n in SERVER_SCRIPTS]
                         + ["seed000_105k.hash.sh", "seed000_user_final.hash.sh"])
def test_fix_rebuilds_the_one_meant_command(name: str, real_schema: Schema, tmp_path: Path) -> None:
    """--fix writes one server command with every meant option (folklore replaced or removed
    with a reason), executable shell with the prose as comments, that checks clean against the
    real binary's flags."""
    rep = check(_text(name), schema=real_schema, cores=6)
    assert rep.errors
    fixed = fix(rep).text
    script = tmp_path / "fixed.sh"
    script.write_text(fixed, encoding="utf-8")
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    again = check(fixed, schema=real_schema, cores=6)
    assert not again.errors, [f.message for f in again.errors]
    assert not [f for f in again.findings if f.rule.startswith("paste-")]
    (inv,) = again.parsed.invocations
    assert inv.program == "./llama3-server" and not inv.orphans
    assert not again.parsed.others
    # every option meant reaches the fixed command, unless a finding's repair removed it
    meant = rep.readings[0]
    dropped = {f.use for f in rep.findings if f.invocation == 0 and f.action is not None and f.use is not None}
    names = {u.opt.name for u in again.readings[0].uses if u.opt is not None}
    for u in meant.uses:
        if u.opt is not None and u.index not in dropped:
            assert u.opt.name in names, (name, u.spelling)
    for must in ("--model", "--mmproj", "--ctx-size", "--batch-size", "--gpu-layers", "--flash-attn",
                 "--cache-type-k", "--reasoning-budget", "--parallel"):
        assert must in names, (name, must)
    # the prose is kept, as comments; the chat's labels are gone
    assert "# 杀死旧进程" in fixed or "杀死旧进程" not in _text(name)
    assert not re.search(r"^\s*(bash|运行)\s*$", fixed, re.M)


def test_fragments_alone_never_become_a_server_command() -> None:
    """The chat's "append these" flags (plans A and B) have no command to join: --fix writes them
    corrected as comments, never as a llama-server command without a model."""
    for name in ("seed000_extras.pasted.sh", "seed000_extras.hash.sh", "seed000_q3_k.pasted.sh"):
        rep = check(_text(name), schema=load_bundled(), cores=6)
        assert rep.reading is not None and rep.reading.meant is None
        fixed = fix(rep).text
        assert "llama-server" not in re.sub(r"#.*", "", fixed)
        again = check(fixed, schema=load_bundled(), cores=6)
        assert not again.parsed.invocations and not again.errors
    fixed = fix(check(_text("seed000_extras.pasted.sh"), schema=load_bundled(), cores=6)).text
    assert "#   --batch-size 8192" in fixed


@pytest.mark.server
def test_fixed_pasted_script_starts_real_server(synth_model, llama_server, real_schema: Schema,
                                                tmp_path: Path) -> None:
    """The command --fix rebuilds from the pasted script is accepted by the real llama-server: it
    starts with a tiny synthetic model in place of -m, without --mmproj, on loopback."""
    fixed = fix(check(_text("seed000_user_final.pasted.sh"), schema=real_schema, cores=6)).text
    inv = check(fixed, schema=real_schema, cores=6).parsed.invocations[0]
    words = [w.text for w in inv.args]
    args: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("-m", "--mmproj", "--host", "--port"):
            i += 2
            continue
        if w in ("--threads", "--threads-batch", "--log-file"):
            args += [w, "2" if w != "--log-file" else str(tmp_path / "server.log")]
            i += 2
            continue
        args.append(w)
        i += 1
    model = synth_model("llama", n_embd=128, n_head=4, n_head_kv=2, head_dim=32)
    srv = llama_server(model, *args)
    assert srv.get("/props") is not None


def test_fix_asks_which_command_unplaced_flags_are_for() -> None:
    """Flags before the only command, or after a real command (not prose) that follows it: --fix
    cannot tell where they go, writes them as comments, names the lines and exits 4."""
    text = "--port 8080 --metrics\nllama-server -m m.gguf -c 4096\nsleep 3\n--parallel 2\n"
    p = subprocess.run([sys.executable, "-m", "llamarig.cli.main", "check", "-", "--bundled", "--fix"], input=text,
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 4, p.stderr
    assert "lines 1, 4" in p.stderr
    assert re.search(r"(?m)^llama-server \\$", p.stdout) and "#   --parallel 2" in p.stdout
    assert not re.search(r"(?m)^--", p.stdout)


def test_large_garbled_paste_finishes_with_every_command() -> None:
    """About 4 MiB of the pasted script, one copy after another: read in one linear pass, every
    copy one meant command, every garbled line named (assertions on the result, not on time)."""
    one = _text("seed000_user_final.pasted.sh")
    n = (4 * 1024 * 1024 - 1024) // len(one.encode("utf-8"))
    rep = check(one * n, schema=load_bundled(), cores=6)
    assert len(rep.parsed.invocations) == n and not rep.parsed.others
    assert rep.reading is not None and len(rep.reading.meant_each) == n
    prose = [f for f in rep.findings if f.rule == "paste-prose"]
    assert len(prose) == 8 * n
    assert sum(1 for f in rep.findings if f.rule == "missing-backslash") == 12 * n


@pytest.mark.parametrize("name", sorted(n for n in MANIFEST))
def test_fix_of_a_paste_is_idempotent(name: str) -> None:
    once = fix(check(_text(name), schema=load_bundled(), cores=6)).text
    assert fix(check(once, schema=load_bundled(), cores=6)).text == once
