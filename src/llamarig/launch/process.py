"""``llamarig launch`` / ``llamarig stop``: start llama-server, wait for /health, compare the
buffers it really allocated (its ``-lv 4`` log, parsed by llamarig.plan.memory_log) with the plan,
and keep a small state file so that ``stop`` signals exactly the process that launch started.

The state file (``$LLAMARIG_STATE_DIR`` or ``$XDG_STATE_HOME/llamarig`` or
``~/.local/state/llamarig``, ``launch-<port>.json``) holds the pid, the process start time in
clock ticks since boot (/proc/<pid>/stat field 22) and the argv: a pid that was reused by another
process after a crash never matches both, so ``stop`` refuses to signal it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llamarig.errors import InputError, LlamarigError, ServerError
from llamarig.flags.argv import Command
from llamarig.hardware.cpu import CpuFeatures, from_system_info, system_info_line
from llamarig.i18n import _, join
from llamarig.launch.rpc import RpcServer, rpc_server_binary, start_rpc_server
from llamarig.launch.server import RunningServer, health, log_tail, spawn, wait_ready
from llamarig.paths import state_dir
from llamarig.plan.memory_log import VerifyRow, compare
from llamarig.plan.rpc import split_endpoint
from llamarig.procs import exit_description

if TYPE_CHECKING:
    from llamarig.plan.result import Plan

# ---------------------------------------------------------------------------- state


def state_path(port: int) -> Path:
    return state_dir() / f"launch-{port}.json"


@dataclass(frozen=True)
class ProcState:
    """One more process of a launch (an rpc-server of a loopback RPC deployment): what ``stop``
    needs to know it is still the same process."""

    pid: int
    start_ticks: int | None
    argv: tuple[str, ...]
    port: int
    log_path: str

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "start_ticks": self.start_ticks, "argv": list(self.argv), "port": self.port,
                "log_path": self.log_path}

    @staticmethod
    def from_json(d: dict[str, Any]) -> ProcState:
        return ProcState(int(d["pid"]), None if d.get("start_ticks") is None else int(d["start_ticks"]),
                         tuple(str(x) for x in d["argv"]), int(d["port"]), str(d["log_path"]))


@dataclass(frozen=True)
class LaunchState:
    pid: int
    start_ticks: int | None
    argv: tuple[str, ...]
    binary: str
    host: str
    port: int
    log_path: str
    started_at: float
    #: the rpc-servers launch started for this server (loopback endpoints of its --rpc)
    rpc: tuple[ProcState, ...] = ()

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["argv"] = list(self.argv)
        d["rpc"] = [r.to_json() for r in self.rpc]
        return d

    @staticmethod
    def from_json(d: dict[str, Any], source: str) -> LaunchState:
        try:
            return LaunchState(int(d["pid"]), None if d.get("start_ticks") is None else int(d["start_ticks"]),
                               tuple(str(x) for x in d["argv"]), str(d["binary"]), str(d["host"]),
                               int(d["port"]), str(d["log_path"]), float(d["started_at"]),
                               tuple(ProcState.from_json(r) for r in d.get("rpc") or ()))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise InputError(_("{source}: not a llamarig launch state file ({error})").format(source=source, error=e)) from None


def write_state(st: LaunchState) -> Path:
    p = state_path(st.port)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(st.to_json(), indent=1))
    tmp.replace(p)
    return p


def read_state(path: Path) -> LaunchState:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(_("{path}: no launch state (nothing started by `llamarig launch` on that port)").format(path=path)) from None
    except (OSError, ValueError) as e:
        raise InputError(_("{path}: unreadable launch state ({error})").format(path=path, error=e)) from None
    if not isinstance(data, dict):
        raise InputError(_("{path}: not a llamarig launch state file").format(path=path))
    return LaunchState.from_json(data, str(path))


def list_states() -> list[Path]:
    d = state_dir()
    return sorted(d.glob("launch-*.json")) if d.is_dir() else []


# ---------------------------------------------------------------------------- processes


def proc_start_ticks(pid: int) -> int | None:
    """Start time of a process in clock ticks after boot (proc(5), /proc/<pid>/stat field 22)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(raw[raw.rindex(")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


def proc_cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [x.decode(errors="replace") for x in raw.split(b"\0") if x]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped) counts as gone
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat[stat.rindex(")") + 2:].startswith("Z"):
            return False
    return True


def is_same_process(st: LaunchState | ProcState) -> tuple[bool, str]:
    """Whether ``st.pid`` is still the process launch started (pid + start time + argv)."""
    if not pid_alive(st.pid):
        return False, _("pid {pid} is not running").format(pid=st.pid)
    ticks = proc_start_ticks(st.pid)
    if st.start_ticks is not None and ticks is not None and ticks != st.start_ticks:
        return False, _("pid {pid} was reused by another process (start time differs)").format(pid=st.pid)
    cmd = proc_cmdline(st.pid)
    if cmd is not None and cmd != list(st.argv):
        return False, _("pid {pid} runs something else now ({command})").format(pid=st.pid, command=" ".join(cmd)[:80])
    return True, _("same pid, start time and command line")


def port_in_use(host: str, port: int) -> bool:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        # SO_REUSEADDR as llama-server's httplib sets it: TIME_WAIT leftovers are not "in use"
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host if host not in ("localhost",) else "127.0.0.1", port))
        except OSError:
            return True
    return False


# ---------------------------------------------------------------------------- verification


# ---------------------------------------------------------------------------- launch


def likely_causes(argv: Sequence[str], log: str) -> list[str]:
    """Why a server did not start: known log messages, then `llamarig check` errors."""
    out = []
    low = log.lower()
    patterns = (
        ("couldn't bind", "the port is taken or the address is not local (--host/--port)"),
        ("address already in use", "the port is taken by another process"),
        ("failed to load model", "the model file could not be loaded (path, permissions, or not a GGUF)"),
        ("error: invalid argument", "llama-server rejected a flag (see the last lines)"),
        ("unsupported cache type", "an unknown -ctk/-ctv type"),
        ("out of memory", "not enough memory: lower -c, quantize the KV cache, or offload fewer layers"),
        ("cudamalloc failed", "GPU out of memory: lower -c, -ub, or -ngl"),
        ("failed to allocate", "an allocation failed: not enough memory for the planned buffers"),
        ("unknown model architecture", "this llama.cpp build does not know the model's architecture"),
        # ggml/src/ggml-rpc/ggml-rpc.cpp:545-551 (connect, handshake), 355-361 (the server's version)
        ("failed to connect to", "an rpc-server of --rpc is not running or not reachable (firewall, address)"),
        ("rpc server version mismatch", "the rpc-server is of another RPC protocol version: run the same llama.cpp "
         "build on every host"),
        ("rpc handshake failed", "the rpc-server did not complete the HELLO handshake (another protocol version, "
         "or not an rpc-server)"),
    )
    for pat, why in patterns:
        if pat in low:
            out.append(why)
    try:
        from llamarig.flags.readers import parse_argv  # lazy: flags (70 ms), after a failed start
        from llamarig.flags.rules import lint  # lazy: as above
        from llamarig.flags.schema import load_bundled, load_schema  # lazy: as above

        try:
            schema = load_schema(argv[0])
        except LlamarigError:
            schema = load_bundled()
        _, findings = lint(parse_argv(list(argv)), schema)
        out += [f"check [{f.rule}]: " + f.message for f in findings if f.severity == "error"]
    except Exception as e:  # the diagnosis must never hide the real failure
        out.append(f"(llamarig check could not run: {e})")
    return out


@dataclass
class Launched:
    state: LaunchState
    state_file: Path
    proc: subprocess.Popen[bytes]
    rows: list[VerifyRow]
    url: str
    notes: list[str] = field(default_factory=list)
    #: the rpc-servers launch started first (loopback endpoints of --rpc), in --rpc order
    rpc: list[RpcServer] = field(default_factory=list)

    def wait(self) -> tuple[int, list[str]]:
        """A foreground launch: wait until llama-server ends, then stop the rpc-servers it came
        with (:func:`stop_rpc`) and remove its state file; (its exit code, what was done)."""
        code = self.proc.wait()
        done = stop_rpc(self.state)
        self.state_file.unlink(missing_ok=True)
        return code, done


def server_argv(binary: str, args: Command | Sequence[str], host: str, port: int, verbose_log: bool = True) -> list[str]:
    """The argv launch runs: ``args`` (a Command, not parsed again, or server args) with the
    host, port and log verbosity it needs when not given."""
    cmd = Command.of(args, program=False)
    a = cmd.server_args()
    if not cmd.has("--host"):
        a += ["--host", host]
    if not cmd.has("--port"):
        a += ["--port", str(port)]
    if verbose_log and not cmd.has("--verbosity", "--verbose"):
        # buffer sizes are libllama INFO lines, shown at verbosity 4 (common/log.cpp:532-540)
        a += ["-lv", "4"]
    return [binary] + a


def _refuse(plan: Plan | None, force: bool, binary: str, cmd: Command) -> None:
    if plan is not None and not plan.fits and not force:
        raise LlamarigError(_("the plan does not fit ({shortfalls}): not launching (use --force to launch anyway)").format(
            shortfalls=_("; ").join(plan.shortfalls())))
    if not (Path(binary).is_file() and os.access(binary, os.X_OK)):
        raise ServerError(_("{binary}: llama-server binary not found or not executable").format(binary=binary))
    model = cmd.get("--model")
    if model and not Path(model).is_file():
        raise InputError(_("-m {model}: model file not found").format(model=model))


def _address(cmd: Command, host: str | None, port: int | None) -> tuple[str, int]:
    host = host or cmd.get("--host") or "127.0.0.1"
    pv = port if port is not None else cmd.get("--port")
    try:
        return host, int(pv) if pv is not None else 8080
    except ValueError:
        raise InputError(_("--port {pv}: not a number").format(pv=pv)) from None


def _refuse_busy(bind_host: str, port: int) -> None:
    if port_in_use(bind_host if not bind_host.endswith(".sock") else "127.0.0.1", port):
        raise ServerError(_("port {port} on {bind_host} is already in use (another server? `llamarig stop --port "
                            "{port}` stops one that llamarig launched); choose --port").format(port=port, bind_host=bind_host))
    sp = state_path(port)
    if sp.exists():
        with contextlib.suppress(LlamarigError):
            old = read_state(sp)
            same, _why = is_same_process(old)
            if same:
                raise ServerError(_("llamarig already runs a server on port {port} (pid {pid}); `llamarig stop --port "
                                    "{port}` first").format(port=port, pid=old.pid))


def start(binary: str, args: Command | Sequence[str], *, plan: Plan | None = None, host: str | None = None,
          port: int | None = None, log_path: Path | None = None, timeout_s: float = 600,
          force: bool = False, replan: Callable[[CpuFeatures], Plan] | None = None,
          env: Mapping[str, str] | None = None) -> Launched:
    """Start llama-server detached (own session), wait for /health, verify against ``plan``.
    An RPC deployment on this machine (``--rpc`` endpoints on 127.0.0.1) gets its rpc-servers
    started first, detached too, and recorded in the same state file: ``stop`` stops them all.

    Raises ServerError (exit 3) for a missing binary, a port in use, or a server that exits or
    does not become healthy (with the last log lines and likely causes); LlamarigError (exit 1)
    for a plan that does not fit unless ``force``. ``replan(cpu)``: the plan again for the CPU
    features the server's own ``system_info`` line names, when they differ from the plan's (its
    AMX / CPU_REPACK buffers depend on the build, not only on the CPU). ``env``: variables the
    server gets on top of this process's environment (a script's ``export``/``Environment=``).
    ``args``: a Command (as resolved, not parsed again) or server args."""
    cmd = Command.of(args, program=False)
    _refuse(plan, force, binary, cmd)
    host, port = _address(cmd, host, port)
    argv = server_argv(binary, cmd, host, port)
    bind_host = host.split(",")[0]
    _refuse_busy(bind_host, port)
    log_path = log_path or state_dir() / f"launch-{port}.log"
    rpc, notes = start_loopback_rpc(binary, cmd.get("--rpc"), port, env)
    try:
        srv, sf, st = _start_detached(argv, binary, bind_host, port, log_path, env, timeout_s, rpc)
    except BaseException:
        for r in rpc:
            r.stop()
        raise
    for r in rpc:
        r.release()
    rows, more = _verify(plan, log_path, replan)
    return Launched(st, sf, srv.proc, rows, srv.url, notes + more, rpc)


def start_loopback_rpc(binary: str, rpc: str | None, port: int,
                       env: Mapping[str, str] | None) -> tuple[list[RpcServer], list[str]]:
    """The rpc-servers of ``--rpc`` that run on this machine (127.0.0.1 / localhost endpoints),
    started detached beside ``binary``, each listening before llama-server starts; an endpoint
    that already listens is taken as a running rpc-server (noted, not started, not stopped).
    Remote endpoints run their own rpc-server (``llamarig render`` writes its unit)."""
    started: list[RpcServer] = []
    notes: list[str] = []
    eps = [e.strip() for e in (rpc or "").split(",") if e.strip()]
    local = [(h, p) for h, p in (split_endpoint(e) for e in eps) if h in ("127.0.0.1", "localhost")]
    if not local:
        return started, notes
    rbin = rpc_server_binary(binary)
    if not (rbin.is_file() and os.access(rbin, os.X_OK)):
        raise ServerError(_("{rpc}: --rpc names this machine, but there is no {name} beside {binary} "
                            "(scripts/get-llama-server builds it; or start the rpc-servers yourself)").format(
            rpc=rpc, name=rbin.name, binary=binary))
    try:
        for h, p in local:
            if port_in_use("127.0.0.1", p):
                notes.append(_("rpc-server {endpoint}: something already listens there; taken as a running "
                               "rpc-server (not started, `llamarig stop` leaves it)").format(endpoint=f"{h}:{p}"))
                continue
            started.append(start_rpc_server(rbin, host="127.0.0.1" if h == "localhost" else h, port=p, threads=None,
                                            log_path=state_dir() / f"launch-{port}-rpc-{p}.log",
                                            env=env, detach=True))
    except BaseException:
        for r in started:
            r.stop()
        raise
    return started, notes


def _start_detached(argv: list[str], binary: str, bind_host: str, port: int, log_path: Path,
                    env: Mapping[str, str] | None, timeout_s: float,
                    rpc: Sequence[RpcServer]) -> tuple[RunningServer, Path, LaunchState]:
    """llama-server in its own session, its state file written, /health waited for; on any
    failure the server is stopped and the state file removed."""
    proc, log_file = spawn(argv, log_path, env, detach=True)
    url_host = "127.0.0.1" if bind_host in ("0.0.0.0", "::", "") else bind_host
    srv = RunningServer(proc, f"http://{url_host}:{port}", port, argv, log_path, log_file)
    st = LaunchState(proc.pid, proc_start_ticks(proc.pid), tuple(argv), binary, bind_host, port, str(log_path),
                     time.time(), tuple(ProcState(r.pid, proc_start_ticks(r.pid), tuple(r.argv), r.port, str(r.log_path))
                                        for r in rpc))
    sf = write_state(st)

    def exited(code: int) -> ServerError:
        tail = log_tail(log_path)
        causes = likely_causes(argv, log_path.read_text(errors="replace") if log_path.exists() else "")
        why = ("\nlikely cause: " + "\nlikely cause: ".join(causes)) if causes else ""
        return ServerError(_("llama-server {exit_description} before /health answered; last log lines "
                             "({log_path}):\n{tail}{why}").format(exit_description=exit_description(code),
                                                                  log_path=log_path, tail=tail, why=why))

    def timed_out() -> ServerError:
        return ServerError(_("llama-server not healthy after {timeout_s:.0f} s; stopped it. Last log lines "
                             "({log_path}):\n{log_tail}").format(timeout_s=timeout_s, log_path=log_path,
                                                                 log_tail=log_tail(log_path)))

    try:
        wait_ready(srv, lambda: health(srv.url) == 200, timeout_s, exited, timed_out)
    except BaseException:
        sf.unlink(missing_ok=True)
        raise
    srv.release()
    return srv, sf, st


def _verify(plan: Plan | None, log_path: Path, replan: Callable[[CpuFeatures], Plan] | None
            ) -> tuple[list[VerifyRow], list[str]]:
    """Every logged buffer against the plan (re-planned for the server's own CPU features when
    they differ from the plan's)."""
    if plan is None:
        return [], []
    notes: list[str] = []
    text = log_path.read_text(errors="replace")
    line = system_info_line(text)
    if line is not None and replan is not None:
        cpu = from_system_info(line)
        if plan.cpu is not None and cpu.features != plan.cpu.features:
            with contextlib.suppress(LlamarigError):
                plan = replan(cpu)
                notes.append(_("verified against a plan for the server's own CPU features ({cpu})").format(
                    cpu=cpu.describe()))
    return compare(plan, text), notes


def _terminate(pid: int, timeout_s: float = 30) -> str:
    """SIGTERM, wait, then SIGKILL. Returns how it ended."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return _("already gone")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            done, _status = os.waitpid(pid, os.WNOHANG)
            if done:
                return _("exited after SIGTERM")
        if not pid_alive(pid):
            return _("exited after SIGTERM")
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    return _("killed (SIGKILL) after {timeout_s:.0f} s without exiting on SIGTERM").format(timeout_s=timeout_s)


def stop(port: int | None = None, state_file: Path | None = None, timeout_s: float = 30) -> str:
    """Stop the server a launch recorded, and the rpc-servers it started: each only if its pid,
    start time and argv still match."""
    if state_file is None:
        if port is None:
            files = list_states()
            if not files:
                raise InputError(_("no server launched by llamarig (no launch-*.json in {state_dir})").format(state_dir=state_dir()))
            if len(files) > 1:
                ports = ", ".join(f.stem.split("-", 1)[1] for f in files)
                raise InputError(_("several servers launched by llamarig (ports {ports}): give --port").format(ports=ports))
            state_file = files[0]
        else:
            state_file = state_path(port)
    st = read_state(state_file)
    same, why = is_same_process(st)
    if same:
        out = [_("stopped llama-server pid {pid} on port {port}: {how}").format(
            pid=st.pid, port=st.port, how=_terminate(st.pid, timeout_s))]
    else:
        out = [_("not stopping anything: {why}; removed the stale state file {state_file}").format(
            why=why, state_file=state_file)]
    out += stop_rpc(st, timeout_s)
    state_file.unlink(missing_ok=True)
    return join("\n", out)


def stop_rpc(st: LaunchState, timeout_s: float = 30) -> list[str]:
    """Stop the rpc-servers a launch started (each only if pid, start time and argv match)."""
    out = []
    for r in st.rpc:
        same, why = is_same_process(r)
        out.append(_("stopped rpc-server pid {pid} on port {port}: {how}").format(
            pid=r.pid, port=r.port, how=_terminate(r.pid, timeout_s)) if same else
            _("rpc-server on port {port} not stopped: {why}").format(port=r.port, why=why))
    return out
