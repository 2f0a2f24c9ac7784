"""llama-server's own router preset: the INI file ``llama-server --models-preset FILE`` reads
(tools/server/README.md "Model presets"; common/preset.cpp at build 11434).

How the pinned build reads it (file:line in its source tree):

- ``parse_ini_from_file`` (common/preset.cpp:170-249): ``[section]`` headers, ``key = value``
  lines, ``;`` or ``#`` comments; a value ends at whitespace followed by ``;`` or ``#`` and at the
  line's end, so such a value cannot be written (refused here);
- ``load_from_ini`` (:285-348): a key is an option's spelling without its dashes or its
  environment variable; ``version`` is skipped; an unknown key makes llama-server refuse the
  file ("option 'KEY' not recognized in preset"); ``[*]`` is the global preset, cascaded under
  every model (tools/server/server-models.cpp:719-721); a flag with a negation takes
  true/false (``parse_bool_arg`` :268-277, ``to_args`` :37-79 writes the negative spelling for a
  false value);
- the router gives each model its own host, port and alias (the section's name), and drops the
  API key, SSL and ``--models-*`` options from a preset (``unset_reserved_args`` and
  ``update_args``, tools/server/server-models.cpp:479-538): those belong on the router's own
  command line, which this file says in a comment;
- ``load-on-startup``, ``stop-timeout`` are preset-only options (common/arg.cpp:4767-4792).

The rendered file holds one model: its section carries the model's options, ``[*]`` the ones
about the machine (threads, devices, offload, flash attention, load mode, metrics, logging), so
more models can be added beside it with the same defaults.
"""

from __future__ import annotations

import re

from llamarig.errors import InputError
from llamarig.flags.argv import Arg
from llamarig.i18n import _
from llamarig.render.common import RenderSpec, flag_comment

#: options of the router's own HTTP server, or reserved by it for each model: its command line
ROUTER_OPTIONS = frozenset({
    "--host", "--port", "--reuse-port", "--path", "--api-prefix", "--api-key", "--api-key-file", "--ssl-key-file",
    "--ssl-cert-file", "--cors-origins", "--cors-methods", "--cors-headers", "--cors-credentials", "--ui",
    "--ui-config", "--ui-config-file", "--ui-mcp-proxy", "--tools", "--tools-runtime", "--mcp-servers-config",
    "--mcp-servers-json", "--agent", "--timeout", "--sse-ping-interval", "--threads-http", "--models-dir",
    "--models-preset", "--models-max", "--models-autoload", "--log-colors"})
#: options about the machine rather than one model: the [*] defaults every model shares
MACHINE_OPTIONS = frozenset({
    "--threads", "--threads-batch", "--cpu-mask", "--cpu-range", "--cpu-strict", "--prio", "--poll",
    "--cpu-mask-batch", "--cpu-range-batch", "--cpu-strict-batch", "--prio-batch", "--poll-batch", "--numa",
    "--device", "--split-mode", "--tensor-split", "--main-gpu", "--fit", "--fit-target", "--no-host", "--repack",
    "--rpc", "--load-mode", "--lazy-mode", "--flash-attn", "--kv-offload", "--op-offload", "--metrics", "--props",
    "--slots", "--cont-batching", "--offline", "--verbosity", "--log-prefix", "--log-timestamps", "--log-jsonl",
    "--perf", "--warmup"})
#: what a value cannot hold in this INI (common/preset.cpp:189-202): a comment start after a
#: blank, a newline, blanks at either end
_BAD_VALUE = re.compile(r"(^[;#])|(\s[;#])|[\r\n]|^\s|\s$")


def _key(a: Arg) -> str:
    assert a.opt is not None
    return a.opt.name.lstrip("-")


def _value(a: Arg) -> str:
    """The INI value of one use: a flag is true (false for its negation), else its value."""
    assert a.opt is not None
    if not a.opt.takes_value:
        return "true" if a.positive else "false"
    if a.opt.kind == "two_values":  # common_preset::to_args refuses them (common/preset.cpp:70-75)
        raise InputError(_("{flag}: takes two values, which a --models-preset file cannot hold "
                           "(common/preset.cpp:70-75)").format(flag=a.spelling))
    return a.values[0] if a.values else ""


def _entries(args: list[Arg]) -> list[tuple[str, str, Arg]]:
    """(key, value, first use) per option: an option given several times is one comma-separated
    value when llama-server takes a list there, else a file cannot say it."""
    by: dict[str, list[Arg]] = {}
    for a in args:
        by.setdefault(_key(a), []).append(a)
    out = []
    for key, uses in by.items():
        first = uses[0]
        if len(uses) > 1 and first.opt is not None and first.opt.appending:
            listed = "comma-separated" in first.opt.help or (first.opt.value_hint or "").endswith(",...")
            if not listed:
                raise InputError(_("{flag} is given {n} times: a --models-preset file holds one value per key and "
                                   "llama-server takes no list there").format(flag=first.spelling, n=len(uses)))
            value = ",".join(_value(a) for a in uses)
        else:
            value = _value(uses[-1])  # llama-server: the last one wins
        if _BAD_VALUE.search(value):
            raise InputError(_("{flag} {value}: a --models-preset value cannot start or end with a blank, hold a "
                               "newline, or a ';' or '#' after a blank (common/preset.cpp:189-202)").format(
                flag=first.spelling, value=value))
        out.append((key, value, first))
    return out


def preset_name(spec: RenderSpec, explicit: bool) -> str:
    """The model's name in the router (its section): ``--name``, else the command's ``--alias``
    (the router sets the alias to the section's name), else the model file's stem."""
    cmd = spec.command()
    if not explicit:
        alias = (cmd.get("--alias") or "").split(",")[0].strip()
        model = cmd.get("--model") or ""
        stem = re.sub(r"\.gguf$", "", model.rsplit("/", 1)[-1])
        for cand in (alias, stem):
            if cand and re.fullmatch(r"[A-Za-z0-9_.@-]+", cand):
                return cand
    return spec.name


def render_preset(spec: RenderSpec, name: str, load_on_startup: bool = True, path: str | None = None) -> str:
    """``spec`` as a --models-preset INI: the model's section, ``[*]`` with the machine's
    options, and the router's command line in a comment (``path``: where the file goes)."""
    cmd = spec.command()
    unknown = [a.spelling for a in cmd.args if a.opt is None]
    if unknown:
        raise InputError(_("{flags}: not flags of this llama-server: a --models-preset file with them is refused "
                           "(common/preset.cpp:329)").format(flags=", ".join(unknown)))
    router = [a for a in cmd.args if a.name in ROUTER_OPTIONS]
    rest = [a for a in cmd.args if a.name not in ROUTER_OPTIONS and a.name != "--alias"]
    machine = _entries([a for a in rest if a.name in MACHINE_OPTIONS])
    model = _entries([a for a in rest if a.name not in MACHINE_OPTIONS])
    env = [f"{k}={v}" for k, v in spec.env]
    start = " ".join([*env, *spec.wrappers, spec.binary, "--models-preset", path or "FILE.ini",
                      *(w for a in router for w in a.words)])
    out = ["; " + ln if ln else ";" for ln in spec.header()]
    out += ["; " + ln if ln else ";" for ln in spec.local([
        "",
        _("start the router with this file (host, port, API key and SSL stay on its command line: the router sets "
          "each model's own, tools/server/server-models.cpp:479-538):"),
        "  " + start,
        _("then ask for model \"{name}\" (the section below) at /v1/chat/completions; GET /models lists it").format(
            name=name),
        "",
    ])]
    out += ["version = 1", ""]
    if machine:
        out.append("; " + spec.local([_("defaults for every model of this router: this machine's options")])[0])
        out.append("[*]")
        out += _lines(spec, machine)
        out.append("")
    out.append(f"[{name}]")
    out += _lines(spec, model)
    if load_on_startup:
        out.append("; " + spec.local([_("preset-only: load it when the router starts (common/arg.cpp:4767-4792)")])[0])
        out.append("load-on-startup = true")
    return "\n".join(out) + "\n"


def _lines(spec: RenderSpec, entries: list[tuple[str, str, Arg]]) -> list[str]:
    """``key = value`` lines, each under a comment saying what the option does (the build's
    --help, in the file's language)."""
    out = []
    for key, value, a in entries:
        what = flag_comment(a.spelling, spec.schema, spec.lang)
        if what:
            out.append(f"; {what}")
        out.append(f"{key} = {value}")
    return out
