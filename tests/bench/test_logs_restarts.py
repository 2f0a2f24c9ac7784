"""``llamarig logs`` on a log with restarts (what a systemd journal or a file the server appends to
holds): the real llama-server (build 11434) started three times with different ``-np``/``-c``
on a synthetic model, each run's log captured and the three concatenated. Each run is read on its
own: its settings, slots and pool; task ids start again at 0, and spans never pair across runs.

The faults this reproduces (issue 40, item 5): a ``-np 4`` server reported with "up to 7 at once"
(three requests a killed run left unfinished counted as running through the later runs), a serial
run counted as parallel, three n_ctx_slot values in one median. The same log cut before the first
restart gives the same findings for that run."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from llamarig.bench.logparse import parse_log_text
from llamarig.bench.logs import logs_report
from llamarig.cli.main import main

pytestmark = pytest.mark.server

#: the three runs: (-np, -c, unified); n_ctx_slot 4096, 2048, 3072
RUNS = (("4", "4096", True), ("1", "2048", False), ("2", "6144", False))
SERIAL = 15  # requests one after the other in run 2


def _post(url: str, n: int, prompt: str) -> Any:
    body = json.dumps({"prompt": prompt, "n_predict": n, "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/completion", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, ConnectionError, OSError) as e:  # the killed run's requests
        return {"error": str(e)}


def _parallel(url: str, jobs: list[tuple[int, str]]) -> list[threading.Thread]:
    threads = [threading.Thread(target=_post, args=(url, n, p), daemon=True) for n, p in jobs]
    for t in threads:
        t.start()
    return threads


def _wait_for(srv: Any, pattern: str, count: int, timeout: float = 120) -> None:
    """Until the server's log has ``count`` lines matching ``pattern`` (an event, not a time)."""
    deadline = time.monotonic() + timeout
    while len(re.findall(pattern, srv.log)) < count:
        assert time.monotonic() < deadline, f"no {count} x {pattern!r} in the log:\n{srv.log[-2000:]}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def restarted_log(tmp_path_factory: pytest.TempPathFactory, server_bin: Path, synth_dir: Path) -> tuple[str, list[int]]:
    """The three runs' logs concatenated, and each run's pid."""
    from llamarig.testing.server import start_server
    from llamarig.testing.synth import write_model

    model = write_model(synth_dir / "llama-restarts.gguf", "llama", n_ctx_train=8192)
    tmp = tmp_path_factory.mktemp("restarts")
    logs, pids = [], []
    for k, (np_, c, unified) in enumerate(RUNS, 1):
        args = ["-np", np_, "-c", c, "-t", "2"] + (["-kvu"] if unified else [])
        srv = start_server(server_bin, model, args, log_dir=tmp / f"run{k}")
        try:
            pids.append(srv.pid)
            if k == 1:  # four in parallel that finish, then three left running when the server is killed
                for t in _parallel(srv.url, [(32, f"job {i}") for i in range(4)]):
                    t.join()
                left = _parallel(srv.url, [(100000, f"long {i}") for i in range(3)])
                _wait_for(srv, r"processing task", 7)
                srv.proc.kill()  # by pid: a crash, no 'cleaning up before exit'
                srv.proc.wait(30)
                for t in left:
                    t.join(30)
            elif k == 2:  # one request after the other
                for i in range(SERIAL):
                    _post(srv.url, 32, f"serial {i}")
            else:
                for t in _parallel(srv.url, [(32, f"pair {i}") for i in range(2)]):
                    t.join()
        finally:
            srv.stop()
        logs.append(srv.log_path.read_text(errors="replace"))
    return "".join(logs), pids


def _doc(tmp_path: Path, text: str) -> dict[str, Any]:
    path = tmp_path / "server.log"
    path.write_text(text)
    return logs_report(path).to_json()


def _check_runs(doc: dict[str, Any]) -> None:
    runs = doc["runs"]
    assert doc["source"]["runs"] == len(runs) == 3
    # each run its own section: its slots and pool
    got = [(r["server"]["n_slots"], r["server"]["n_ctx_slot"], r["server"]["kv_unified"]) for r in runs]
    assert got == [(4, 4096, True), (1, 2048, False), (2, 3072, False)]
    assert [r["requests"] for r in runs] == [7, SERIAL, 2]
    rows = doc["timeline"]
    by_run = {k: [t for t in rows if t["run"] == k] for k in (1, 2, 3)}
    # spans never pair across runs: at most as many at once as the run has slots
    assert max(t["concurrency"] for t in by_run[1]) <= 4  # not 7
    assert all(t["concurrency"] == 1 for t in by_run[2])  # serial is serial
    assert max(t["concurrency"] for t in by_run[3]) <= 2
    # task ids start again at 0 in each run; the killed run's requests end with it (the three long
    # ones: killed mid-run, or ended by the full pool first when the machine outran the kill)
    assert [t["task"] for t in by_run[2]][0] == 0 and [t["task"] for t in by_run[3]][0] == 0
    long = by_run[1][4:]
    assert all(t["outcome"] in (None, "context_exceeded") for t in long), long
    left = sum(1 for t in long if t["outcome"] is None)
    if left:
        assert any(f"{left} request(s) were still running when this run ended" in x for x in runs[0]["findings"])
    assert all(t["outcome"] == "done" for t in by_run[2] + by_run[3])
    # one median per run, each saying how its requests decoded
    f = {x["name"]: x for x in doc["figures"]}
    assert "every request decoded alone" in f["log_decode_tok_s_median_run2"]["method"]
    assert f["log_decode_tok_s_median_run2"]["n"] == SERIAL and f["log_decode_tok_s_median"]["n"] == 2
    assert "run 3 of 3" in f["log_decode_tok_s_median"]["method"]
    # each run states its own one n_ctx_slot, never three in one line
    for r, ctx in zip(runs, (4096, 2048, 3072), strict=True):
        assert any(f"n_ctx_slot = {ctx} tokens per slot" in x for x in r["findings"]), r["findings"]
    assert not any(re.search(r"n_ctx_slot = \d+, \d+", x) for x in doc["findings"])
    # the restarts are findings: where, how the run before ended, what changed
    text = "\n".join(doc["findings"])
    assert "llama-server started again (run 2 of 3) after run 1 ended without 'cleaning up before exit'" in text
    assert "(run 3 of 3) after run 2 stopped cleanly" in text
    assert "; before, 4 slot(s) sharing one KV pool of 4096 cells, n_ctx_slot 4096;" in text
    assert "up to 7" not in text


def test_each_run_is_read_on_its_own(restarted_log: tuple[str, list[int]], tmp_path: Path, validate_doc) -> None:
    text, _pids = restarted_log
    doc = _doc(tmp_path, text)
    validate_doc(doc)
    _check_runs(doc)


def test_the_log_cut_before_the_first_restart_reads_the_same(restarted_log: tuple[str, list[int]],
                                                              tmp_path: Path) -> None:
    text, _pids = restarted_log
    whole = _doc(tmp_path, text)
    second = whole["runs"][1]["line"]
    cut = _doc(tmp_path, "".join(text.splitlines(keepends=True)[: second - 1]))
    assert cut["source"]["runs"] == 1
    # the same, but that a restart followed (which ended the requests the run left running)
    assert cut["findings"] == [f for f in whole["runs"][0]["findings"] if "still running when this run ended" not in f]
    drop = ("run", "line", "line_end")
    assert [{k: v for k, v in t.items() if k not in drop} for t in cut["timeline"]] == \
        [{k: v for k, v in t.items() if k not in drop} for t in whole["timeline"] if t["run"] == 1]


def test_a_journal_reads_the_same(restarted_log: tuple[str, list[int]], tmp_path: Path) -> None:
    """As ``journalctl -u llama-server`` shows it: each line behind the journal's prefix, the
    llama-server timestamps kept, the PID of each run in the prefix, systemd's lines about the
    unit between the runs."""
    text, pids = restarted_log
    plain = parse_log_text(text)
    lines = []
    for run, pid in zip(plain.runs, pids, strict=True):
        lines.append("Dec 07 23:00:00 gpu-box systemd[1]: Started llama-server.service - llama-server.")
        for ln in text.splitlines()[run.first_line - 1: run.last_line]:
            lines.append(f"Dec 07 23:00:01 gpu-box llama-server[{pid}]: {ln}")
        lines.append("Dec 07 23:00:02 gpu-box systemd[1]: llama-server.service: Deactivated successfully.")
    doc = _doc(tmp_path, "\n".join(lines) + "\n")
    _check_runs(doc)
    assert [r["pid"] for r in doc["runs"]] == pids
    # systemd's own lines are skipped, not taken for another run
    assert doc["source"]["skipped"] == logs_report_skipped(tmp_path, text) + 2 * len(pids)


def logs_report_skipped(tmp_path: Path, text: str) -> int:
    path = tmp_path / "plain.log"
    path.write_text(text)
    return int(logs_report(path).to_json()["source"]["skipped"])


def test_the_screen_has_a_section_per_run(restarted_log: tuple[str, list[int]], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "server.log"
    path.write_text(restarted_log[0])
    assert main(["logs", str(path)]) in (None, 0)
    out = capsys.readouterr().out
    assert "Run 1 of 3 (lines 1-" in out and "Run 3 of 3" in out and "started again" in out
