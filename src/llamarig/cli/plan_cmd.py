"""``llamarig plan``, ``llamarig models``, ``llamarig gpus``: memory per device before launch.

plan takes llama-server's own flag spellings, so its arguments are parsed here (not by click):
``llamarig plan MODEL [plan options] [llama-server flags] [-- whole llama-server command]``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from llamarig import api
from llamarig.cli.help import HelpCommand, HelpPage
from llamarig.cli.lang import N_, _
from llamarig.cli.speed_view import SPEED_ROWS
from llamarig.errors import InputError, UnknownNameError
from llamarig.units import parse_size

if TYPE_CHECKING:
    from llamarig.cli.speed_view import SpeedArgs
    from llamarig.plan.deployment import Deployment

PLAN_HELP = HelpPage(
    usage=N_("MODEL [OPTIONS] [LLAMA-SERVER FLAGS] [-- LLAMA-SERVER COMMAND]"),
    paragraphs=(
        N_("Predict memory per device (weights, KV, recurrent state, compute, mmproj, draft, other) and host RAM "
           "for a llama-server launch, from the GGUF header (or a catalogue entry) alone. Every figure carries "
           "its formula. Exit 0 if it fits, 1 if it does not (the plan says by how much), 2 on bad input."),
        N_("MODEL is a GGUF path, a catalogue id (`llamarig models`), e.g. qwen3.6-27b:iq4_nl, or a remote GGUF "
           "read by its header alone: hf:OWNER/REPO:QUANT (or OWNER/REPO:QUANT, as -hf takes it), "
           "hf:OWNER/REPO/FILE.gguf, ms:OWNER/REPO:QUANT (ModelScope), https://…/FILE.gguf."),
    ),
    sections=(
        (N_("Plan options"), (
            ("--mmproj FILE|catalogue|f16|bf16|none", N_("multimodal projector to plan for")),
            ("--draft FILE|ID", N_("a separate draft model (-md)")),
            ("--gpu NAME[:VRAM_GB]", N_("a GPU, repeatable, in device order (`llamarig gpus`)")),
            ("--detect", N_("read GPUs (nvidia-smi), CPU cores, CPU features (/proc/cpuinfo) and RAM here")),
            ("--cpu-features LIST", N_("the CPU llama-server runs on, e.g. avx2 or avx512f,avx512_vnni,amx_int8 or "
                                       "neon,dotprod,i8mm (decides AMX / CPU_REPACK weight buffers; default: x86-64 "
                                       "with AVX2, no AVX-512/AMX)")),
            ("--rpc-device HOST:PORT=SPEC", N_("what an rpc-server of --rpc brings: a GPU (=rtx3090, =rtx3090:20) "
                                               "or its CPU device's RAM (=64G); repeatable")),
            ("--link 1gbe|2.5gbe|10gbe|GBIT[:RTT_MS]", N_("the network to the rpc-servers (repeatable; default the "
                                                           "three)")),
            ("--depth N", N_("context depth of the network figures")),
            ("--from-script FILE", N_("plan the command of a script, systemd unit or compose file as llama-server "
                                      "receives it (a cut-off continuation cuts it there; what the script meant "
                                      "is named first); MODEL then stands in for an -m not on this machine")),
            ("--invocation N", N_("which llama-server command of --from-script (default 1)")),
            ("--ram SIZE", N_("host RAM, e.g. 64G")),
            ("--overhead SIZE", N_("per-GPU driver/context overhead (default: catalogue)")),
            ("--why", N_("every figure's formula and source, and the speed table")),
            ("--lang en|zh", N_("language of the output (default: the locale)")),
            ("--json", N_("machine-readable output (docs/plan.md)")),
            ("-h, --help", N_("this text")),
        )),
        (N_("Speed and optimiser options (docs/speed.md)"), SPEED_ROWS),
        (N_("llama-server flags understood (same spellings and defaults as llama-server)"),
         "-c/--ctx-size, -np/--parallel, -kvu/--kv-unified, -no-kvu/--no-kv-unified, --kv-unified-per-slot, "
         "-ctk/-ctv, -ctkd/-ctvd, -fa, -b/-ub, -ngl, -sm, -ts, -mg, --n-cpu-moe, -cmoe, -ot, -nkvo, --swa-full, "
         "--cache-ram, --ctx-checkpoints, --checkpoint-min-step, --spec-type, --spec-draft-n-max, --load-mode, "
         "--fit, -fitt, -fitc, --no-mmproj-offload, -dev, --rpc, -md, -ngld, -devd, -otd, -cmoed, -ncmoed"),
    ),
    examples=(
        "llamarig plan qwen3.6-27b:iq4_nl --mmproj f16 --gpu rtx3090 -c 105000 -np 1 -ctk q4_0 -ctv q4_0",
        "llamarig plan hf:unsloth/Qwen3-8B-GGUF:Q4_K_M --gpu rtx3090 -c 65536",
        "llamarig plan model.gguf --gpu 5070ti --gpu 5060ti --gpu 4060ti -ts 3,2,2 -c 65536",
        "llamarig plan --gpu rtx3090 -- llama-server -m model.gguf -c 65000 -ngl 99 -fa on",
        "llamarig plan qwen3.6-27b:iq4_nl --gpu rtx3090 --from-script run105k.sh",
        "llamarig plan qwen3.6-27b:q8_0 --rpc-device 192.168.1.20:50052=rtx3090 --gpu rtx3090 "
        "--rpc 192.168.1.20:50052 -c 65536 --link 2.5gbe",
    ),
)


@dataclass
class PlanOptions:
    """What ``llamarig plan`` was given, as typed: the MODEL, plan's own options (strings until
    :meth:`deployment` reads them) and the llama-server flags."""

    model: str | None = None
    mmproj: str | None = None
    draft: str | None = None
    gpus: list[str] = field(default_factory=list)
    #: ``HOST:PORT=SPEC`` per rpc-server (llamarig.plan.rpc.parse_rpc_device)
    rpc_devices: list[str] = field(default_factory=list)
    detect: bool = False
    ram: str | None = None
    overhead: int | None = None
    cpu_features: str | None = None
    server_args: list[str] = field(default_factory=list)
    command: list[str] | None = None
    #: --from-script: a script, unit or compose file whose command is planned as llama-server receives it
    from_script: str | None = None
    invocation: int = 1

    def deployment(self) -> Deployment:
        """The Deployment these options describe (llamarig.api.deployment, or
        llamarig.api.script_deployment with --from-script)."""
        from llamarig.cli.options import hardware_of

        hw, notes = hardware_of(self.gpus, self.ram, self.detect, self.cpu_features, self.rpc_devices)
        if self.from_script is not None:
            if self.command is not None:
                raise InputError(_("give either --from-script FILE or a command, not both"))
            return api.script_deployment(self.from_script, invocation=self.invocation, model=self.model,
                                         hardware=hw, mmproj=self.mmproj, draft=self.draft, overhead=self.overhead,
                                         extra_args=self.server_args)
        return api.deployment(self.model, self.server_args, command=self.command, hardware=hw, mmproj=self.mmproj,
                              draft=self.draft, overhead=self.overhead, notes=notes)


@dataclass
class PlanView:
    """How ``llamarig plan`` prints (not what it plans)."""

    as_json: bool = False
    why: bool = False  # --why/-v: formulas and sources in the human output
    help: bool = False
    links: list[str] = field(default_factory=list)  # --link: the network to the rpc-servers
    depth: int | None = None  # --depth: context depth of the network figures


def _n_values(tok: str) -> int:
    """How many words a llama-server flag takes (the flag schema, as llama-server reads argv; a
    word it does not know takes none): looked up, the command is parsed once, by the Deployment."""
    from llamarig.flags.argv import default_schema

    hit = default_schema().lookup(tok)
    return hit[0].n_values if hit is not None and hit[1] else 0


def _set_lang(_pa: PlanOptions, _view: PlanView, val: str) -> None:
    from llamarig.i18n import set_language

    set_language(val)


def _set_ram(pa: PlanOptions, val: str) -> None:
    parse_size(val, "g")  # a bad size is an error here, before anything is read
    pa.ram = val


def _set_depth(_pa: PlanOptions, view: PlanView, val: str) -> None:
    view.depth = _depth(val)


#: plan's own options that take a value: option -> what it sets
_OWN_VALUE: dict[str, Callable[[PlanOptions, PlanView, str], None]] = {
    "--gpu": lambda pa, _v, val: pa.gpus.append(val),
    "--rpc-device": lambda pa, _v, val: pa.rpc_devices.append(val),
    "--link": lambda _pa, view, val: view.links.append(val),
    "--depth": _set_depth,
    "--mmproj": lambda pa, _v, val: setattr(pa, "mmproj", val),
    "--draft": lambda pa, _v, val: setattr(pa, "draft", val),
    "--ram": lambda pa, _v, val: _set_ram(pa, val),
    "--overhead": lambda pa, _v, val: setattr(pa, "overhead", parse_size(val, "mib")),
    "--model-id": lambda pa, _v, val: None,
    "--cpu-features": lambda pa, _v, val: setattr(pa, "cpu_features", val),
    "--lang": _set_lang,
    "--from-script": lambda pa, _v, val: setattr(pa, "from_script", val),
    "--invocation": lambda pa, _v, val: setattr(pa, "invocation", _invocation(val)),
}


def _invocation(val: str) -> int:
    if not val.isdigit() or int(val) < 1:
        raise InputError(_("--invocation {val}: expected a command number (1 or more)").format(val=val))
    return int(val)


def _flag(a: str, out: PlanOptions, view: PlanView, speed: dict[str, Any]) -> bool:
    """plan's own options without a value; False when ``a`` is none of them."""
    if a in ("--vision", "--agent"):
        speed[a[2:]] = True
    elif a == "--detect":
        out.detect = True
    elif a == "--json":
        view.as_json = True
    elif a == "--why":
        view.why = True
    elif a in ("-h", "--help"):
        view.help = True
    else:
        return False
    return True


def split_args(args: list[str]) -> tuple[PlanOptions, PlanView, SpeedArgs]:
    """plan's own options (memory, speed and output), the MODEL, and the llama-server flags,
    each with the words it takes, so a flag's value is never read as an option of plan's."""
    from llamarig.cli.speed_view import SPEED_VALUE, speed_args, speed_option

    out = PlanOptions()
    view = PlanView()
    speed: dict[str, Any] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            out.command = args[i + 1:]
            break
        key, eq, val = a.partition("=") if a.startswith("--") else (a, "", "")
        if (key in SPEED_VALUE or key in _OWN_VALUE) and not eq:
            if i + 1 >= len(args):
                raise InputError(_("{tok}: missing value").format(tok=a))
            val = args[i + 1]
            i += 1
        if key in SPEED_VALUE:
            field, value = speed_option(key, val)
            speed[field] = value
        elif key in _OWN_VALUE:
            _OWN_VALUE[key](out, view, val)
        elif _flag(a, out, view, speed):
            pass
        elif not a.startswith("-") and out.model is None and Path(a).name.startswith("llama-server") \
                and out.command is None:
            # `plan --json -- llama-server ...`: click drops the `--` after an option of plan's own,
            # so a llama-server program where MODEL would be starts the command
            out.command = args[i:]
            break
        elif not a.startswith("-") and out.model is None:
            out.model = a
        else:
            n = _n_values(a)
            out.server_args += args[i:i + 1 + n]
            i += n
        i += 1
    return out, view, speed_args(speed)


def _depth(val: str) -> int:
    try:
        n = int(val)
    except ValueError:
        n = -1
    if n < 0:
        raise InputError(_("--depth {val}: expected a number of tokens (0 or more)").format(val=val))
    return n


# ------------------------------------------------------------------------------- rendering

@click.command("plan", cls=HelpCommand, context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                          "help_option_names": [], "allow_interspersed_args": False})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def plan_cmd(args: tuple[str, ...]) -> None:
    """Predict memory per device for a llama-server launch (llamarig plan --help)."""
    opts, view, sa = split_args(list(args))
    if view.help or (not args):
        click.echo(PLAN_HELP.render("llamarig plan"), nl=False)
        return
    d = opts.deployment()
    inp = api.plan_inputs(d)
    if inp.spec.remote is not None:  # what reading the remote header cost, on stderr
        from llamarig.hub.resolve import describe

        click.echo(describe(inp.spec.remote), err=True)
    cal = sa.calibration
    from rich.console import Console

    if sa.wants_optimiser:
        from llamarig.cli.speed_view import optimise_report

        found = api.plan_targets(d, target_ctx=sa.target_ctx, target_decode=sa.target_decode,
                                 target_depth=sa.target_depth, headroom=sa.headroom, slots=sa.slots, vision=sa.vision,
                                 agent=sa.agent, acceptance=sa.acceptance, calibration=cal,
                                 host_bandwidth_gbs=sa.host_bandwidth_gbs, inputs=inp)
        if view.as_json:
            click.echo(json.dumps(found.to_json(), indent=2))
        else:
            Console().print(optimise_report(found))
        if not found.met:
            raise click.exceptions.Exit(found.exit_code)
        return
    from llamarig.cli.speed_view import speed_table

    # the speed model sees what llama-server would run after --fit (layers moved to the CPU)
    plan = api.plan_command(d, calibration=cal, host_bandwidth_gbs=sa.host_bandwidth_gbs, acceptance=sa.acceptance,
                            inputs=inp)
    from llamarig.cli.network_view import network_report, parse_link, render_network

    net = network_report(inp, plan, [parse_link(x) for x in view.links], view.depth)
    if view.as_json:
        click.echo(json.dumps({**plan.to_json(), **({"network": net.to_json()} if net else {})}, indent=2))
    else:
        from llamarig.cli import plan_view

        console = Console()
        plan_view.render(plan, console, why=view.why)
        if net is not None:
            render_network(net, console)
        if plan.speed is not None and view.why:
            console.print(speed_table(plan.speed))
    if not plan.fits:
        raise click.exceptions.Exit(1)


__all__ = ["PlanOptions", "plan_cmd", "split_args", "UnknownNameError"]
