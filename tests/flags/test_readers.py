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
    """A function is read where it is called, once per call, with the call's arguments as $1."""
    text = ('#!/bin/bash\nLOG=/tmp/llama.log\nserver() {\n  llama-server -m "$1" --port 8080 >"$LOG" 2>&1 &\n}\n'
            "server a.gguf\nserver -m b.gguf --port 8081\ntime server c.gguf\n")
    p = parse_text(text)
    assert [(inv.argv, inv.line) for inv in p.invocations] == [
        (["llama-server", "-m", "a.gguf", "--port", "8080"], 4),
        (["llama-server", "-m", "-m", "--port", "8080"], 4),
        (["llama-server", "-m", "c.gguf", "--port", "8080"], 4)]
    assert [inv.label for inv in p.invocations] == [f"function server, called on line {n}" for n in (6, 7, 8)]
    assert [inv.args[1].line for inv in p.invocations] == [6, 7, 8]  # the value is written on the call's line
    assert all(inv.background and inv.redirects == ['>"$LOG"', "2>&1"] for inv in p.invocations)
    assert not any(inv.written_here for inv in p.invocations)  # --fix leaves a shared body as written


_FUNCTIONS = (
    "#!/bin/bash\n"
    "start() {\n"
    "  local model=$1; shift\n"
    '  llama-server -m "$model" --port "${PORT:-8080}" "$@"\n'
    "}\n"
    "function both {\n"
    '  start "$1" -c 4096 $2\n'
    "}\n"
    'both a.gguf "--temp 0.7"\n'
    "start 'my model.gguf' -a \"x y\" --jinja\n"
    "start\n"
)


def test_function_calls_match_real_bash(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Nested calls, `shift`, `"$@"`, an unquoted `$2` split by the shell: the argv real bash
    gives a stub llama-server, call by call."""
    stub = tmp_path / "llama-server"
    stub.write_text("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$OUT.$$\"\n")
    stub.chmod(0o755)
    script = tmp_path / "run.sh"
    script.write_text(_FUNCTIONS.replace("  llama-server", f"  {stub}").replace("start\n", "") + "true\n")
    out = tmp_path / "argv"
    got = []
    for k in range(2):  # run the calls one at a time, so each argv file is the call's
        lines = script.read_text().splitlines()
        calls = [ln for ln in lines if ln.startswith(("both ", "start '"))]
        body = [ln for ln in lines if ln not in calls]
        one = tmp_path / f"one{k}.sh"
        one.write_text("\n".join([*body, calls[k]]) + "\n")
        subprocess.run(["bash", str(one)], env={"OUT": str(out), "PATH": "/usr/bin:/bin"}, check=True, timeout=20)
        (f,) = list(tmp_path.glob("argv.*"))
        got.append(f.read_text().splitlines())
        f.unlink()
    p = parse_text(_FUNCTIONS)
    assert [[w.text for w in inv.args] for inv in p.invocations][:2] == got
    assert got[0] == ["-m", "a.gguf", "--port", "8080", "-c", "4096", "--temp", "0.7"]
    # `start` called without arguments: $model is empty, "$@" nothing
    assert p.invocations[2].argv == ["llama-server", "-m", "", "--port", "8080"]
    assert p.invocations[0].label == "function start, called on line 7 (function both, called on line 9)"


def test_sourced_files_are_read_next_to_the_script(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`source`/`.` of a file next to the script (also written `$(dirname "$0")/...`): its
    variables and functions are known; a missing file is a warning; a file that sources itself
    stops."""
    (tmp_path / "env.sh").write_text('MODEL=/m/a.gguf\nserve() {\n  llama-server -m "$MODEL" "$@"\n}\n'
                                     "source ./env.sh\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "more.sh").write_text("CTX=8192\n")
    script = tmp_path / "run.sh"
    text = ('#!/bin/bash\nsource ./env.sh\n. "$(dirname "$0")/lib/more.sh"\nsource missing.sh\n'
            'serve -c "$CTX" --temp 0.7\n')
    script.write_text(text)
    p = parse_text(text, origin=script)
    (inv,) = p.invocations
    assert inv.argv == ["llama-server", "-m", "/m/a.gguf", "-c", "8192", "--temp", "0.7"]
    assert inv.label == "function serve of env.sh, called on line 5" and inv.line == 3
    missing = [n for n in p.notes if n.kind == "source-missing"]
    assert len(missing) == 1 and missing[0].line == 4 and "missing.sh" in missing[0].message
    assert missing[0].severity.value == "warning"
    assert [n.kind for n in p.notes if n.kind == "not-followed"] == ["not-followed"]  # env.sh sources itself
    # without a file there is no directory to look in: a note, nothing read
    p = parse_text(text)
    assert not p.invocations and any(n.kind == "source-not-read" for n in p.notes)
    # real bash agrees on the argv
    stub = tmp_path / "llama-server"
    stub.write_text("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$OUT\"\n")
    stub.chmod(0o755)
    (tmp_path / "env.sh").write_text((tmp_path / "env.sh").read_text().replace("source ./env.sh\n", ""))
    run = text.replace("source missing.sh\n", "")
    script.write_text(run)
    subprocess.run(["bash", str(script)], cwd=tmp_path, check=True, timeout=20,
                   env={"OUT": str(tmp_path / "argv.txt"), "PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert (tmp_path / "argv.txt").read_text().splitlines() == inv.argv[1:]


@pytest.mark.parametrize("text", [
    "server() { llama-server -m x.gguf -c 4096; }\nserver -m y.gguf\n",
    "function server {\n  ./llama-server -m x.gguf -c 4096\n}\nserver -m y.gguf\n",
    "function server() { nohup llama-server -m x.gguf -c 4096 & }\nserver -m y.gguf\n",
    "server () (\n  exec llama-server -m x.gguf -c 4096\n)\nserver -m y.gguf &\n",
    "start_llm() {\n  if true; then llama-server -m x.gguf -c 4096; fi\n}\nstart_llm\n",
])
def test_function_forms_body_read_once(text: str) -> None:
    """Every form of definition: the body is read once (one call with arguments it ignores, or a
    subshell body read as ordinary commands)."""
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


def test_wrappers_and_directory_are_kept_as_read() -> None:
    """What runs llama-server (render --from-script keeps it): the wrappers with their options,
    without the command's own assignments or the shell's `exec`; the last `cd` before it."""
    p = parse_text("cd ~ && /usr/bin/stdbuf -oL -eL ./llama3-server -m a.gguf\n"
                   "cd /opt/llama; cd models\n"
                   "CUDA_VISIBLE_DEVICES=0 exec env -u X A=1 taskset -c 0-7 numactl --interleave=all "
                   "nohup llama-server -m b.gguf &\n")
    a, b = p.invocations
    assert (a.program, a.wrappers, a.cwd) == ("./llama3-server", ["/usr/bin/stdbuf", "-oL", "-eL"], "~")
    assert b.wrappers == ["env", "-u", "X", "A=1", "taskset", "-c", "0-7", "numactl", "--interleave=all", "nohup"]
    assert b.cwd == "/opt/llama/models" and b.argv == ["llama-server", "-m", "b.gguf"]
    assert parse_text("llama-server -m a.gguf\n").invocations[0].cwd is None
    unit = parse_text("[Service]\nWorkingDirectory=-/srv/llm\n"
                      "ExecStart=/usr/bin/stdbuf -oL /opt/llama-server -m a.gguf\n")
    inv = unit.invocations[0]
    assert (inv.wrappers, inv.cwd, inv.program) == (["/usr/bin/stdbuf", "-oL"], "/srv/llm", "/opt/llama-server")


def test_systemd_expands_environment_as_systemd_does(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """systemd.service(5) "Command lines"
    (https://www.freedesktop.org/software/systemd/man/latest/systemd.service.html#Command%20lines):
    `${VAR}` is one word (whitespace kept), `$VAR` as a word of its own is split at whitespace
    (quotes respected), `$$` is `$`, `%%` is `%`; Environment= written after ExecStart= counts;
    EnvironmentFile= (found next to the unit) overrides Environment=; an unset variable is empty,
    with a warning."""
    unit = tmp_path / "llama.service"
    (tmp_path / "llama.env").write_text('# comment\nCTX=8192\nMODEL="/m/my model.gguf"\n')
    unit.write_text(
        "[Service]\n"
        'ExecStart=/usr/bin/llama-server -m ${MODEL} -c $CTX $EXTRA -a "${ALIAS}" --api-key $$ecret%% ${NOPE}\n'
        "Environment=CTX=4096 \"EXTRA=--temp 0.7 -a 'two words'\" \"ALIAS=a  b\"\n"
        "EnvironmentFile=-/etc/default/llama.env\n")
    p = parse_text(unit.read_text(), origin=unit)
    (inv,) = p.invocations
    assert inv.argv[1:] == ["-m", "/m/my model.gguf", "-c", "8192", "--temp", "0.7", "-a", "two words",
                            "-a", "a  b", "--api-key", "$ecret%", ""]
    (warn,) = [n for n in p.notes if n.kind == "unknown-variable"]
    assert "${NOPE}" in warn.message and warn.severity.value == "warning"
    # not next to the unit and not optional: a note, the variables unknown
    p = parse_text(unit.read_text().replace("=-/etc/default/llama.env", "=/etc/nowhere.env"), origin=unit)
    assert any("EnvironmentFile=/etc/nowhere.env" in n.message for n in p.notes)
    assert p.invocations[0].argv[4] == "4096"


def test_systemd_drop_ins_replace_exec_start(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """systemd.unit(5): `UNIT.d/*.conf` drop-ins are read after the unit in file-name order; an
    empty `ExecStart=` resets the commands before it (systemd.service(5) ExecStart=)."""
    unit = tmp_path / "llama.service"
    unit.write_text("[Service]\nEnvironment=PORT=8080\nExecStart=/usr/bin/llama-server -m /m/a.gguf --port $PORT\n")
    d = tmp_path / "llama.service.d"
    d.mkdir()
    (d / "20-model.conf").write_text("[Service]\nExecStart=\nExecStart=/usr/bin/llama-server -m /m/b.gguf \\\n"
                                     "  --port ${PORT} -c 4096\n")
    (d / "10-port.conf").write_text("[Service]\nEnvironment=PORT=9090\n")
    (d / "notes.txt").write_text("ExecStart=/usr/bin/llama-server -m /m/c.gguf\n")  # not a .conf
    p = parse_text(unit.read_text(), origin=unit)
    (inv,) = p.invocations
    assert inv.argv == ["/usr/bin/llama-server", "-m", "/m/b.gguf", "--port", "9090", "-c", "4096"]
    assert inv.label == "ExecStart= in llama.service.d/20-model.conf" and inv.line == 3
    assert [w.line for w in inv.args] == [3, 3, 4, 4, 4, 4] and not inv.written_here
    assert inv.env == []  # PORT is the command line's (systemd expands it): not dead-env-var's business
    # without the file's path there are no drop-ins to read: the unit's own command
    assert parse_text(unit.read_text()).invocations[0].argv[-1] == "8080"


def test_script_dir_variable_sources_next_to_the_script(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)" then `source "$SCRIPT_DIR/..."`:
    the script's directory; real bash run from elsewhere agrees."""
    (tmp_path / "env.sh").write_text("CTX=4096\n")
    text = ('SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\nsource "$SCRIPT_DIR/env.sh"\n'
            'llama-server -m a.gguf -c "$CTX"\n')
    script = tmp_path / "run.sh"
    script.write_text(text)
    (inv,) = parse_text(text, origin=script).invocations
    assert inv.argv == ["llama-server", "-m", "a.gguf", "-c", "4096"]
    stub = tmp_path / "bin" / "llama-server"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$OUT\"\n")
    stub.chmod(0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run(["bash", str(script)], cwd=elsewhere, check=True, timeout=20,
                   env={"OUT": str(tmp_path / "argv.txt"), "PATH": f"{stub.parent}:/usr/bin:/bin"})
    assert (tmp_path / "argv.txt").read_text().splitlines() == inv.argv[1:]
