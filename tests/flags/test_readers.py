"""What llama-server actually receives, read the way bash / systemd / compose / llama-swap do."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from llamarig.flags.readers import is_server_program, parse_text


def argvs(text: str, kind: str | None = None) -> list[list[str]]:
    return [inv.argv for inv in parse_text(text, kind).invocations]


def test_one_line_and_quotes() -> None:
    assert argvs('llama-server -m "/my models/a.gguf" --alias \'My Model\' -c 4096') == [
        ["llama-server", "-m", "/my models/a.gguf", "--alias", "My Model", "-c", "4096"]]


def test_env_cd_and_background() -> None:
    p = parse_text("cd ~ && LLAMA_SET_ROWS=0 CUDA_VISIBLE_DEVICES=0 ./llama3-server -m a.gguf --port 1 &\n")
    inv = p.invocations[0]
    assert inv.argv == ["./llama3-server", "-m", "a.gguf", "--port", "1"]
    assert [e[0] for e in inv.env] == ["LLAMA_SET_ROWS", "CUDA_VISIBLE_DEVICES"]
    assert inv.background


def test_comment_line_cuts_the_command() -> None:
    text = "llama-server \\\n  -m a.gguf \\\n# big batch\n  -b 4096 \\\n  -ub 512\n"
    p = parse_text(text)
    inv = p.invocations[0]
    assert inv.argv == ["llama-server", "-m", "a.gguf"]
    assert inv.cut_line == 3 and [w.text for w in inv.orphans] == ["-b", "4096", "-ub", "512"]
    assert {n.kind for n in p.notes} >= {"continuation-broken", "orphan-flags"}


def test_blank_line_cuts_the_command() -> None:
    p = parse_text("llama-server -m a.gguf \\\n\n  -c 8192\n")
    inv = p.invocations[0]
    assert inv.argv == ["llama-server", "-m", "a.gguf"] and inv.cut_line == 2
    note = next(n for n in p.notes if n.kind == "continuation-broken")
    assert "blank" in note.message


def test_missing_backslash_and_space_after_backslash() -> None:
    p = parse_text("llama-server -m a.gguf\n  -c 8192\n")
    assert p.invocations[0].argv == ["llama-server", "-m", "a.gguf"]
    assert "does not end with" in next(n for n in p.notes if n.kind == "continuation-broken").message
    p = parse_text("llama-server -m a.gguf \\ \n  -c 8192\n")
    inv = p.invocations[0]
    assert inv.argv == ["llama-server", "-m", "a.gguf", " "]  # bash passes a lone space
    assert "followed by spaces" in next(n for n in p.notes if n.kind == "continuation-broken").message


def test_comment_after_words_and_hash_inside_word() -> None:
    assert argvs("llama-server -m a#b.gguf -c 1 # the context\n") == [["llama-server", "-m", "a#b.gguf", "-c", "1"]]


def test_several_commands_and_separators() -> None:
    text = ("killall llama-server 2>/dev/null; sleep 3\n"
            "llama-server -m a.gguf --port 8080 > /tmp/a.log 2>&1 &\n"
            "llama-server -m b.gguf --port 8081 && echo ok || echo bad\n")
    p = parse_text(text)
    assert [inv.argv for inv in p.invocations] == [
        ["llama-server", "-m", "a.gguf", "--port", "8080"], ["llama-server", "-m", "b.gguf", "--port", "8081"]]
    assert [inv.line for inv in p.invocations] == [2, 3]
    assert any(n.kind == "kill-by-name" and n.line == 1 for n in p.notes)


def test_export_and_wrappers() -> None:
    p = parse_text("export LLAMA_ARG_CTX_SIZE=4096 FOO=1\nnohup stdbuf -oL -eL taskset -c 0-5 "
                   "numactl --cpunodebind=0 /opt/bin/llama-server -m a.gguf &\n")
    inv = p.invocations[0]
    assert inv.argv == ["/opt/bin/llama-server", "-m", "a.gguf"]
    assert ("LLAMA_ARG_CTX_SIZE", "4096", 1) in inv.env


def test_substitution_heredoc_and_ansi_c_quotes() -> None:
    text = ("cat <<EOF > cfg\nllama-server --not-a-command\nEOF\n"
            "llama-server -m \"$(ls /m/*.gguf | head -1)\" --alias $'a\\tb' -t $(nproc)\n")
    assert argvs(text) == [["llama-server", "-m", "$(ls /m/*.gguf | head -1)", "--alias", "a\tb", "-t", "$(nproc)"]]


def test_docker_run() -> None:
    text = ("docker run --gpus all -p 8080:8080 -v /models:/models -e LLAMA_ARG_CTX_SIZE=8192 "
            "ghcr.io/ggml-org/llama.cpp:server-cuda -m /models/a.gguf --host 0.0.0.0 -ngl 99\n")
    inv = parse_text(text).invocations[0]
    assert [w.text for w in inv.args] == ["-m", "/models/a.gguf", "--host", "0.0.0.0", "-ngl", "99"]
    assert ("LLAMA_ARG_CTX_SIZE", "8192", 1) in inv.env


def test_systemd_continuation_skips_comment_lines() -> None:
    unit = ("[Service]\nEnvironment=\"LLAMA_ARG_N_PARALLEL=2\" CUDA_VISIBLE_DEVICES=1\n"
            "ExecStart=/usr/bin/llama-server \\\n  -m /m/a.gguf \\\n# a comment inside\n; another\n"
            "  -c 8192 \\\n  --port 8080\nRestart=always\n")
    p = parse_text(unit)
    assert p.kind == "systemd"
    inv = p.invocations[0]
    assert inv.argv == ["/usr/bin/llama-server", "-m", "/m/a.gguf", "-c", "8192", "--port", "8080"]
    assert [w.line for w in inv.args] == [4, 4, 7, 7, 8, 8]
    assert ("LLAMA_ARG_N_PARALLEL", "2", 2) in inv.env
    assert not p.notes


def test_compose_string_and_list() -> None:
    text = ("services:\n  llm:\n    image: ghcr.io/ggml-org/llama.cpp:server\n"
            "    command: -m /models/a.gguf --port 8080 -c 4096\n"
            "    environment:\n      LLAMA_ARG_N_PARALLEL: 2\n"
            "  other:\n    image: ghcr.io/ggml-org/llama.cpp:server\n"
            "    command: [\"-m\", \"/models/b.gguf\", \"--metrics\"]\n")
    p = parse_text(text)
    assert p.kind == "compose"
    assert [[w.text for w in inv.args] for inv in p.invocations] == [
        ["-m", "/models/a.gguf", "--port", "8080", "-c", "4096"], ["-m", "/models/b.gguf", "--metrics"]]
    assert p.invocations[0].line == 4 and p.invocations[0].label == "llm"
    assert p.invocations[0].env[0][:2] == ("LLAMA_ARG_N_PARALLEL", "2")


def test_llama_swap_cmd() -> None:
    text = ("models:\n  qwen:\n    cmd: |\n      /app/llama-server\n      --port ${PORT}\n"
            "      # a comment line does not cut a llama-swap cmd\n      -m /models/q.gguf\n"
            "      -c 32768 \\\n      --metrics\n    env:\n      - \"CUDA_VISIBLE_DEVICES=0\"\n")
    p = parse_text(text)
    assert p.kind == "llama-swap"
    inv = p.invocations[0]
    # llama-swap gives ${PORT} the first free port from startPort (5800 by default)
    assert inv.argv == ["/app/llama-server", "--port", "5800", "-m", "/models/q.gguf", "-c", "32768", "--metrics"]
    assert inv.label == "qwen" and inv.line == 4 and inv.args[3].line == 7
    assert inv.env[0][:2] == ("CUDA_VISIBLE_DEVICES", "0")


def test_program_names() -> None:
    for ok in ("llama-server", "./llama3-server", "/opt/bin/llama-server", "llama_server", "server", "llama-server.exe"):
        assert is_server_program(ok), ok
    for no in ("llama-cli", "python", "vllm", "serverless", "-m"):
        assert not is_server_program(no), no


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_agrees_with_bash_on_seed_script(tmp_path) -> None:
    """Run the seed script through real bash with a stub llama3-server that prints its argv:
    llamarig's effective argv must be exactly what bash passes."""
    from pathlib import Path

    text = (Path(__file__).with_name("fixtures") / "seed000_optimized.sh").read_text(encoding="utf-8")
    stub = tmp_path / "llama3-server"
    stub.write_text("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$OUT\"\n")
    stub.chmod(0o755)
    script = text.replace("killall llama3-server 2>/dev/null; sleep 3", "true").replace("cd ~ && ", "")
    script = script.replace("./llama3-server", str(stub)).replace(" &\n", "\nwait\n")
    out = tmp_path / "argv.txt"
    subprocess.run(["bash", "-c", script], env={"OUT": str(out), "PATH": "/usr/bin:/bin"},
                   capture_output=True, timeout=20)
    got = out.read_text().splitlines()
    inv = parse_text(text).invocations[0]
    assert got == [w.text for w in inv.args]


@pytest.mark.parametrize("redirs", [
    '>"$LOG" 2>&1', '> "$LOG" 2>&1', '2>>"$HOME/log.txt"', '&>"$LOG"', '&>> "$LOG"', ">|'a b.log'",
    "< /dev/null > x.log", "1>&2", "2> /dev/null", '>"/tmp/my logs/$(date +%F).log"', "3>&-", "<<<'hi'",
])
def test_redirections_are_not_arguments(redirs: str) -> None:
    for text in (f"llama-server -m x.gguf --port 8080 {redirs}\n", f"llama-server -m x.gguf {redirs} --port 8080 &\n",
                 f"{redirs} llama-server -m x.gguf --port 8080\n"):
        p = parse_text(text)
        assert [inv.argv for inv in p.invocations] == [["llama-server", "-m", "x.gguf", "--port", "8080"]], text
        assert not p.notes, text
    # kept as written (quotes included) so --fix can put them back
    assert " ".join(parse_text(f"llama-server -m x.gguf {redirs}").invocations[0].redirects) == redirs


def test_redirection_glued_to_a_word_and_fd_numbers() -> None:
    # bash: `<`/`>` end a word; an unquoted all-digit word glued to them is a file descriptor
    inv = parse_text('llama-server -m x.gguf>log --port 8080>log -c "2">log 4096\n').invocations[0]
    assert inv.argv == ["llama-server", "-m", "x.gguf", "--port", "-c", "2", "4096"]
    assert inv.redirects == [">log", "8080>log", ">log"]


def test_redirection_without_target_is_a_syntax_note() -> None:
    p = parse_text("llama-server -m x.gguf >\n")
    assert p.invocations[0].argv == ["llama-server", "-m", "x.gguf"]
    assert any(n.kind == "shell-syntax" and "without a target" in n.message for n in p.notes)


def test_heredoc_delimiter_after_redirection_rework() -> None:
    text = ("cat > run.sh << 'EOF'\nllama-server --never-run\nEOF\ncat <<-END\n\tllama-server --nope\n\tEND\n"
            "llama-server -m a.gguf < <(echo hi) 2>&1\n")
    assert argvs(text) == [["llama-server", "-m", "a.gguf"]]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_redirections_agree_with_bash(tmp_path) -> None:
    """A stub program prints the argv real bash gives it; llamarig must read the same argv."""
    stub = tmp_path / "llama-server"
    stub.write_text("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$OUT\"\n")
    stub.chmod(0o755)
    text = ('LOG="$HOME/my log.txt"\nllama-server -m "x y.gguf" >"$LOG" --port 8080 2>>"$HOME/e.txt" \\\n'
            '  -c 4096 &>"$LOG" -a "a>b" x>"$LOG" 7>&1 "2">"$LOG" < /dev/null 3>&- >| "$LOG" -t 4\n')
    out = tmp_path / "argv.txt"
    script = text.replace("llama-server ", f"{stub} ", 1)
    subprocess.run(["bash", "-c", script], env={"OUT": str(out), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
                   capture_output=True, timeout=20, check=True)
    inv = parse_text(text).invocations[0]
    assert out.read_text().splitlines() == [w.text for w in inv.args]


def test_function_wrapping_llama_server() -> None:
    text = ('#!/bin/bash\nLOG=/tmp/llama.log\nserver() {\n  llama-server -m "$1" --port 8080 >"$LOG" 2>&1 &\n}\n'
            "server a.gguf\nserver -m b.gguf --port 8081\ntime server c.gguf\n")
    p = parse_text(text)
    assert [(inv.argv, inv.line) for inv in p.invocations] == [
        (["llama-server", "-m", "$1", "--port", "8080"], 4)]
    assert p.invocations[0].background and p.invocations[0].redirects == ['>"$LOG"', "2>&1"]
    assert not [n for n in p.notes if n.severity == "error"]


@pytest.mark.parametrize("text", [
    "server() { llama-server -m x.gguf -c 4096; }\nserver -m y.gguf\n",
    "function server {\n  ./llama-server -m x.gguf -c 4096\n}\nserver -m y.gguf\n",
    "function server() { nohup llama-server -m x.gguf -c 4096 & }\nserver -m y.gguf\n",
    "server () (\n  exec llama-server -m x.gguf -c 4096\n)\nserver -m y.gguf &\n",
    "start_llm() {\n  if true; then llama-server -m x.gguf -c 4096; fi\n}\nstart_llm\n",
])
def test_function_forms_body_read_calls_not(text: str) -> None:
    assert [inv.argv[1:] for inv in parse_text(text).invocations] == [["-m", "x.gguf", "-c", "4096"]]


def test_function_name_bypassed_by_external_wrappers() -> None:
    # nohup / env / command look `server` up on PATH: that is the old llama.cpp server binary
    text = "server() { echo hi; }\nnohup server -m a.gguf &\ncommand server -m b.gguf\n./server -m c.gguf\n"
    assert argvs(text) == [["server", "-m", "a.gguf"], ["server", "-m", "b.gguf"], ["./server", "-m", "c.gguf"]]
    # a call before the definition runs the program too
    assert argvs("server -m a.gguf\nserver() { echo hi; }\nserver -m b.gguf\n") == [["server", "-m", "a.gguf"]]


def test_bare_server_needs_llama_server_arguments() -> None:
    text = "server start\nserver\nserver --config app.toml\nserver -m a.gguf\nserver --port 8080 -hf x/y\n" \
           "/opt/server models/q.gguf\n"
    assert argvs(text) == [["server", "-m", "a.gguf"], ["server", "--port", "8080", "-hf", "x/y"],
                           ["/opt/server", "models/q.gguf"]]
    assert argvs("llama-server\n") == [["llama-server"]]  # a llama-* name needs no arguments


def test_systemd_blank_line_cuts_the_command() -> None:
    # systemd's config_parse skips only comment lines inside a continuation: a blank line ends it,
    # and the option lines after it are ignored ("Missing '=', ignoring line.")
    unit = ("[Service]\nExecStart=/usr/bin/llama-server \\\n  -m /m/a.gguf \\\n# a comment is skipped\n"
            "  --port 8080 \\\n\n  --ctx-size 8192 \\\n  -ngl 99\nRestart=always\n")
    p = parse_text(unit)
    inv = p.invocations[0]
    assert inv.argv == ["/usr/bin/llama-server", "-m", "/m/a.gguf", "--port", "8080"]
    assert inv.cut_line == 6 and [(w.text, w.line) for w in inv.orphans] == [
        ("--ctx-size", 7), ("8192", 7), ("-ngl", 8), ("99", 8)]
    cut = next(n for n in p.notes if n.kind == "continuation-broken")
    assert cut.line == 6 and "blank" in cut.message and "conf-parser.c" in cut.message
    assert any(n.kind == "orphan-flags" and n.line == 7 for n in p.notes)
    # Restart= after the ignored lines is read as a setting again, not cut off
    assert all(w.text != "Restart=always" for w in inv.orphans)


def test_versioned_server_binary_names() -> None:
    for ok in ("llama-server-ec9e0301", "/opt/llama-server-b4567", "llama-server.cuda"):
        assert is_server_program(ok), ok
