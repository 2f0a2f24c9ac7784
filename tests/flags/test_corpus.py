"""The corpus: >= 40 real-world llama-server command lines (tests/flags/corpus.yaml, each with its
source). For every one the real binary decides accept/reject, and llamarig must agree.

How the binary decides, cheaply: the argv is run as given (program replaced by the pinned
llama-server) with ``--port 0`` appended. A rejected argv stops while parsing with
"error: invalid argument" / "error while handling argument" (common/arg.cpp) and exit 1; an
accepted one goes on to load the model, which does not exist here, and fails later. Values that
depend on the machine rather than on the flags are neutralised first: device names (this build
has no GPU) become ``none``, ``--rpc`` is dropped (no RPC backend), and files the handlers open
while parsing (``--chat-template-file``...) are replaced by small temporary files. llamarig
checks the command exactly as written.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from llamarig.flags.readers import is_server_program, parse_text
from llamarig.flags.rules import PARSE_RULES, Context, lint
from llamarig.flags.schema import load_bundled, schema_from_binary

CORPUS = Path(__file__).with_name("corpus.yaml")
#: command-line entries (the file entries, with `file:`, are tests/flags/test_corpus_files.py's)
ENTRIES = [e for e in yaml.safe_load(CORPUS.read_text(encoding="utf-8")) if "cmd" in e]

REJECT_MARKERS = ("error: invalid argument", "error while handling argument", "expected value for argument")
FILE_OPTS = {"--chat-template-file": "{{ messages }}", "--grammar-file": 'root ::= "x"',
             "--api-key-file": "k\n", "-jf": "{}", "--json-schema-file": "{}", "--ui-config-file": "{}"}
DIR_OPTS = {"--slot-save-path"}
DEVICE_OPTS = {"-dev", "--device", "-devd", "--device-draft", "--spec-draft-device", "--mmproj-device"}


def test_corpus_size_and_sources() -> None:
    assert len(ENTRIES) >= 40
    ids = [e["id"] for e in ENTRIES]
    assert len(ids) == len(set(ids))
    for e in ENTRIES:
        assert e.get("source") and e.get("cmd"), e


def _truth_argv(cmd: str) -> list[str]:
    words = shlex.split(cmd.replace("\\\n", " "), comments=True)
    for i, w in enumerate(words):
        if is_server_program(w):
            return words[i + 1:]
    raise AssertionError(f"no server program in {cmd!r}")


def _neutralise(argv: list[str], tmp: Path) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if a in DEVICE_OPTS and nxt is not None:
            out += [a, "none"]
            i += 2
        elif a == "--rpc" and nxt is not None:
            i += 2
        elif a in FILE_OPTS and nxt is not None:
            f = tmp / f"file{i}"
            f.write_text(FILE_OPTS[a])
            out += [a, str(f)]
            i += 2
        elif a in DIR_OPTS and nxt is not None:
            d = tmp / f"dir{i}"
            d.mkdir(exist_ok=True)
            out += [a, str(d)]
            i += 2
        else:
            out.append(a)
            i += 1
    return out


def binary_rejects(server_bin: Path, argv: list[str], tmp: Path) -> tuple[bool, str]:
    run = [str(server_bin), *_neutralise(argv, tmp), "--port", "0", "--offline"]
    try:
        p = subprocess.run(run, capture_output=True, text=True, timeout=8, errors="replace",
                           stdin=subprocess.DEVNULL, cwd=tmp)
        out = p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:  # router mode etc.: parsed fine and kept running
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
    return any(m in out for m in REJECT_MARKERS), out


@pytest.fixture(scope="module")
def real_schema(server_bin: Path):
    return schema_from_binary(server_bin)


@pytest.mark.server
@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_corpus_agrees_with_binary(entry, server_bin: Path, real_schema, tmp_path: Path) -> None:
    rejected, out = binary_rejects(server_bin, _truth_argv(entry["cmd"]), tmp_path)
    parsed = parse_text(entry["cmd"])
    assert parsed.invocations, entry["id"]
    _, findings = lint(parsed, real_schema)
    parse_errors = [f for f in findings if f.rule in PARSE_RULES and f.severity == "error"]
    tail = "\n".join(out.strip().splitlines()[-4:])
    assert bool(parse_errors) == rejected, (
        f"{entry['id']}: binary {'rejects' if rejected else 'accepts'}, llamarig says "
        f"{[(f.rule, f.flag) for f in parse_errors]}\n{tail}")
    if rejected:
        # llamarig names the same argument the binary stopped at
        m = re.search(r'error while handling argument "([^"]+)"|error: invalid argument: (\S+)', out)
        if m:
            bad = m.group(1) or m.group(2)
            flagged = {f.flag for f in parse_errors} | {f.message for f in parse_errors}
            assert any(bad in (x or "") for x in flagged), (entry["id"], bad, flagged)


@pytest.fixture(scope="module")
def bundled_schema():
    return load_bundled()


@pytest.mark.server
@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_corpus_bundled_schema_same_verdicts(entry, real_schema, bundled_schema) -> None:
    """The bundled schema (what `check --bundled` and a machine without llama-server use) gives
    every corpus line the same verdict as the schema read from the binary's --help: the same
    accept/reject, and the same findings (rule, severity, line, flag, message)."""
    parsed = parse_text(entry["cmd"])

    def verdict(schema) -> tuple[bool, list[tuple]]:
        _, findings = lint(parsed, schema, Context(physical_cores=8))
        rejected = any(f.rule in PARSE_RULES and f.severity == "error" for f in findings)
        return rejected, [(f.rule, f.severity, f.line, f.flag, f.message) for f in findings]

    assert bundled_schema.source == "bundled" and real_schema.source != "bundled"
    assert verdict(bundled_schema) == verdict(real_schema), entry["id"]
