"""The file corpus: whole launch files of every kind check reads (Kubernetes, Helm values,
llama-swap with macros, compose list and string forms, systemd with a blank-line cut, bash with
arrays), real ones from public repositories or modelled on them (tests/flags/corpus.yaml
entries with ``file:``; each says which).

Each entry gives, written by hand from the runner's rules (kubectl, docker, llama-swap, systemd,
bash), the argv every invocation receives (``argv:``) and the real binary's verdict per flag
(``rejects:``, in the order it stops at them). llamarig must read exactly that argv, and report
a parse error for exactly those flags. The verdict itself is re-checked against the pinned
llama-server: the argv is run, the argument the binary stops at is recorded and removed (with
its value when the value was the problem), and the run repeats until the binary accepts.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from llamarig.flags.readers import parse_text
from llamarig.flags.rules import PARSE_RULES, Context, lint
from llamarig.flags.schema import load_bundled, schema_from_binary

from .test_corpus import binary_rejects

HERE = Path(__file__).parent
ENTRIES = [e for e in yaml.safe_load((HERE / "corpus.yaml").read_text(encoding="utf-8")) if "file" in e]
KINDS = {"kubernetes", "helm-values", "llama-swap", "compose", "systemd", "shell", "models-preset"}
_STOP_RE = re.compile(r'error while handling argument "([^"]+)": ([^\n]*)|error: invalid argument: (\S*)')


def _text(entry: dict) -> str:
    return (HERE / entry["file"]).read_text(encoding="utf-8")


def test_file_corpus_covers_every_reader() -> None:
    assert {e["kind"] for e in ENTRIES} == KINDS
    for e in ENTRIES:
        assert e.get("source"), e["id"]
        first = _text(e).splitlines()[0]
        # a modelled file says so in its first line, a real one is cited by URL in the entry
        assert ("Modelled on https://" in first) == e["source"].startswith("modelled on"), e["id"]
    assert any(e["kind"] == "llama-swap" and "macros" in _text(e) for e in ENTRIES)
    assert any(e["kind"] == "systemd" and e.get("cut") for e in ENTRIES)
    # every entry with a cut-off says at which line it is found
    assert all("cut_lines" in e for e in ENTRIES if e.get("cut"))
    assert any(e["kind"] == "shell" and "[@]}" in _text(e) for e in ENTRIES)
    # the readers' later features: function calls and sourced files, drop-ins and
    # EnvironmentFile=, compose interpolation from .env, ConfigMap key references
    assert any(e["kind"] == "shell" and "(dirname" in _text(e) and '"$@"' in _text(e) for e in ENTRIES)
    assert any(e["kind"] == "systemd" and (HERE / (e["file"] + ".d")).is_dir() for e in ENTRIES)
    assert any(e["kind"] == "compose" and (HERE / e["file"]).with_name(".env").is_file() for e in ENTRIES)
    assert any(e["kind"] == "kubernetes" and "configMapKeyRef" in _text(e) for e in ENTRIES)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_llamarig_reads_the_argv_and_rejects_those_flags(entry: dict) -> None:
    parsed = parse_text(_text(entry), origin=HERE / entry["file"])  # files next to it are read too
    assert parsed.kind == entry["kind"]
    _, findings = lint(parsed, load_bundled(), Context(physical_cores=8))  # a preset's argv is made here
    assert [[w.text for w in inv.args] for inv in parsed.invocations] == entry["argv"]
    assert [[w.text for w in inv.orphans] for inv in parsed.invocations] == entry.get(
        "cut", [[] for _ in parsed.invocations])
    if "cut_lines" in entry:  # every cut-off found at its line
        assert [inv.cut_line for inv in parsed.invocations] == entry["cut_lines"]
        breaks = {n.line for n in parsed.notes if n.kind == "continuation-broken"}
        assert breaks == {ln for ln in entry["cut_lines"] if ln is not None}
    errors = [f for f in findings if f.rule in PARSE_RULES and f.severity == "error" and f.passed]
    for k, rejects in enumerate(entry["rejects"]):
        mine = [f for f in errors if f.invocation == k]
        assert bool(mine) == bool(rejects), (entry["id"], k, [(f.rule, f.flag) for f in mine])
        named = " ".join(f"{f.flag} {f.message}" for f in mine)
        for word in rejects:
            assert word in named, (entry["id"], k, word, [(f.rule, f.flag) for f in mine])


def binary_verdicts(server_bin: Path, argv: list[str], tmp: Path) -> list[str]:
    """The arguments the real llama-server stops at, in order: after each stop the argument is
    removed, with the word after it when that is its value (a handler that failed on it, or an
    unknown option followed by a word that is not an option), and it runs again."""
    args = [a for a in argv if a not in ("$@", "$*")]  # the script's own arguments: none given
    stops: list[str] = []
    for _ in range(12):
        rejected, out = binary_rejects(server_bin, args, tmp)
        if not rejected:
            return stops
        m = _STOP_RE.search(out)
        assert m, out[-800:]
        bad = m.group(1) or m.group(3)
        stops.append(bad)
        i = args.index(bad)
        handled = m.group(1) is not None and "expected value" not in m.group(2)
        unknown_option = m.group(3) is not None and bad.startswith("-")
        with_value = (handled or unknown_option) and i + 1 < len(args) and not args[i + 1].startswith("-")
        del args[i:i + 2 if with_value else i + 1]
    raise AssertionError(f"still rejected after {stops}")


@pytest.mark.server
@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_rejects_are_the_binary_verdict(entry: dict, server_bin: Path, tmp_path: Path) -> None:
    for argv, rejects in zip(entry["argv"], entry["rejects"], strict=True):
        assert binary_verdicts(server_bin, argv, tmp_path) == rejects, entry["id"]


@pytest.mark.server
def test_bundled_and_binary_schema_agree_on_the_files(server_bin: Path) -> None:
    real = schema_from_binary(server_bin)
    for entry in ENTRIES:
        parsed = parse_text(_text(entry), origin=HERE / entry["file"])
        a = [(f.rule, f.line, f.message) for f in lint(parsed, load_bundled(), Context(physical_cores=8))[1]]
        b = [(f.rule, f.line, f.message) for f in lint(parsed, real, Context(physical_cores=8))[1]]
        assert a == b, entry["id"]
