"""``llamarig plan``, ``llamarig models``, ``llamarig gpus``: memory per device before launch.

plan takes llama-server's own flag spellings, so its arguments are parsed here (not by click):
``llamarig plan MODEL [plan options] [llama-server flags] [-- whole llama-server command]``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from llamarig.cli.lang import _
from llamarig.errors import InputError, UnknownNameError
from llamarig.plan.inputs import (
    PlanArgs,
    build_inputs,
    build_plan,
)
from llamarig.units import parse_size

PLAN_HELP = """\
Usage: llamarig plan MODEL [OPTIONS] [LLAMA-SERVER FLAGS] [-- LLAMA-SERVER COMMAND]

  Predict memory per device (weights, KV, recurrent state, compute, mmproj, draft, other)
  and host RAM for a llama-server launch, from the GGUF header (or a catalogue entry) alone.
  Every figure carries its formula. Exit 0 if it fits, 1 if it does not (the plan says by how
  much), 2 on bad input.

  MODEL is a GGUF path or a catalogue id (`llamarig models`), e.g. qwen3.6-27b:iq4_nl.

Plan options:
  --mmproj FILE|catalogue|f16|bf16|none   multimodal projector to plan for
  --draft FILE|ID                         a separate draft model (-md)
  --gpu NAME[:VRAM_GB]                    a GPU, repeatable, in device order (`llamarig gpus`)
  --detect                                read GPUs (nvidia-smi), CPU cores, CPU features
                                          (/proc/cpuinfo) and RAM here
  --cpu-features LIST                     the CPU llama-server runs on, e.g. avx2 or
                                          avx512f,avx512_vnni,amx_int8 or neon,dotprod,i8mm
                                          (decides AMX / CPU_REPACK weight buffers; default:
                                          x86-64 with AVX2, no AVX-512/AMX)
  --ram SIZE                              host RAM, e.g. 64G
  --overhead SIZE                         per-GPU driver/context overhead (default: catalogue)
  --why                                   every figure's formula and source, and the speed table
  --lang en|zh                            language of the output (default: the locale)
  --json                                  machine-readable output (docs/plan.md)
  -h, --help                              this text

llama-server flags understood (same spellings and defaults as llama-server):
  -c/--ctx-size, -np/--parallel, -kvu/--kv-unified, -no-kvu/--no-kv-unified,
  --kv-unified-per-slot, -ctk/-ctv, -ctkd/-ctvd, -fa, -b/-ub, -ngl, -sm, -ts, -mg,
  --n-cpu-moe, -cmoe, -ot, -nkvo, --swa-full, --cache-ram, --ctx-checkpoints,
  --checkpoint-min-step, --spec-type, --spec-draft-n-max, --load-mode, --fit, -fitt,
  -fitc, --no-mmproj-offload, -dev, --rpc, -md, -ngld, -devd, -otd, -cmoed, -ncmoed

Examples:
  llamarig plan qwen3.6-27b:iq4_nl --mmproj f16 --gpu rtx3090 -c 105000 -np 1 -ctk q4_0 -ctv q4_0
  llamarig plan model.gguf --gpu 5070ti --gpu 5060ti --gpu 4060ti -ts 3,2,2 -c 65536
  llamarig plan --gpu rtx3090 -- llama-server -m model.gguf -c 65000 -ngl 99 -fa on
"""


def _server_flag_takes_value(tok: str) -> bool:
    from llamarig.plan.config import flag_takes_value

    return flag_takes_value(tok)


_OWN_VALUE = {"--mmproj", "--draft", "--gpu", "--ram", "--overhead", "--model-id", "--cpu-features", "--lang"}


def split_args(args: list[str]) -> PlanArgs:
    out = PlanArgs()
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            out.command = args[i + 1:]
            break
        key, eq, val = a.partition("=") if a.startswith("--") else (a, "", "")
        if key in _OWN_VALUE:
            if not eq:
                if i + 1 >= len(args):
                    raise InputError(_("{a}: missing value").format(a=a))
                val = args[i + 1]
                i += 1
            if key == "--gpu":
                out.gpus.append(val)
            elif key == "--mmproj":
                out.mmproj = val
            elif key == "--draft":
                out.draft = val
            elif key == "--ram":
                out.ram = parse_size(val, "g")
            elif key == "--overhead":
                out.overhead = parse_size(val, "mib")
            elif key == "--cpu-features":
                out.cpu_features = val
            elif key == "--lang":
                from llamarig.i18n import set_language

                set_language(val)
        elif a == "--detect":
            out.detect = True
        elif a == "--json":
            out.as_json = True
        elif a == "--why":
            out.why = True
        elif a in ("-h", "--help"):
            out.help = True
        elif not a.startswith("-") and out.model is None and Path(a).name.startswith("llama-server") \
                and out.command is None:
            # `plan --json -- llama-server ...`: click drops the `--` after an option of plan's own,
            # so a llama-server program where MODEL would be starts the command
            out.command = args[i:]
            break
        elif not a.startswith("-") and out.model is None:
            out.model = a
        else:
            out.server_args.append(a)
            if _server_flag_takes_value(a) and i + 1 < len(args):
                out.server_args.append(args[i + 1])
                i += 1
        i += 1
    return out


# ------------------------------------------------------------------------------- rendering

@click.command("plan", context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                          "help_option_names": [], "allow_interspersed_args": False})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def plan_cmd(args: tuple[str, ...]) -> None:
    """Predict memory per device for a llama-server launch (llamarig plan --help)."""
    from llamarig.cli.speed_view import SPEED_HELP, extract_speed_args

    sa, rest = extract_speed_args(list(args))
    pa = split_args(rest)
    if pa.help or (not args):
        click.echo(PLAN_HELP + "\n" + SPEED_HELP)
        return
    inp = build_inputs(pa)
    cal = sa.calibration_obj()
    host_bw = sa.host_bandwidth_gbs
    # --detect measures the host's bandwidth, unless a calibration file (tune writes one)
    # already recorded the bandwidth its efficiencies were solved against
    if host_bw is None and pa.detect and cal.source == "built-in":
        from llamarig.plan.calibration import measure_host_bandwidth

        host_bw = measure_host_bandwidth()
    from rich.console import Console

    if sa.wants_optimiser:
        from llamarig.cli.speed_view import optimise_report

        renderable, js, code = optimise_report(inp, sa.targets(inp), cal=cal, host_bandwidth_gbs=host_bw)
        if pa.as_json:
            click.echo(json.dumps(js, indent=2))
        else:
            Console().print(renderable)
        if code:
            raise click.exceptions.Exit(code)
        return
    from llamarig.cli.speed_view import speed_table
    from llamarig.plan.planner import effective_inputs, make_plan
    from llamarig.plan.speed import attach_speed

    plan = make_plan(inp)
    # the speed model sees what llama-server would run after --fit (layers moved to the CPU)
    plan = attach_speed(plan, effective_inputs(inp, plan), cal=cal, host_bandwidth_gbs=host_bw,
                        acceptance_ratio=sa.acceptance)
    if pa.as_json:
        click.echo(json.dumps(plan.to_json(), indent=2))
    else:
        from llamarig.cli import plan_view

        console = Console()
        plan_view.render(plan, console, why=pa.why)
        if plan.speed is not None and pa.why:
            console.print(speed_table(plan.speed))
    if not plan.fits:
        raise click.exceptions.Exit(1)


__all__ = ["plan_cmd", "build_inputs", "build_plan", "split_args", "UnknownNameError"]
