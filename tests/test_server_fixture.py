"""The real llama-server fixture itself: starts, answers, logs, stops."""

from __future__ import annotations

import pytest

from llamarig.errors import ServerError
from llamarig.testing.server import start_server


@pytest.mark.server
def test_server_answers_and_stops(llama_server, synth_model) -> None:
    srv = llama_server(synth_model("llama"), "-c", "256", "-np", "1")
    out = srv.post("/completion", {"prompt": "hello", "n_predict": 4, "temperature": 0})
    assert out["tokens_predicted"] == 4
    props = srv.get("/props")
    assert props["default_generation_settings"]["n_ctx"] == 256
    assert "llama-server" in srv.argv[0]
    assert srv.log  # captured output
    assert srv.stop() is not None
    assert srv.proc.poll() is not None


@pytest.mark.server
def test_server_failure_shows_log_tail(server_bin, tmp_path) -> None:
    with pytest.raises(ServerError, match="exited with code"):
        start_server(server_bin, tmp_path / "missing.gguf", ["-c", "256"], log_dir=tmp_path, timeout=60)
