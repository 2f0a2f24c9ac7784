"""``llamarig`` entry point: a lazy click group (subcommands import only when used) and the
one place that turns LlamarigError into a one-line message and its exit code."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from llamarig import __version__
from llamarig.cli.help import CLICK_WORDS, Group, lang_option, usage_error_text
from llamarig.cli.lang import N_, _
from llamarig.cli.layout import echo
from llamarig.errors import ExitCode, LlamarigError

#: command name -> ("module:attribute", short help). Modules are imported on first use.
COMMANDS: dict[str, tuple[str, str]] = {
    "inspect": ("llamarig.cli.inspect_cmd:inspect_cmd", N_("Read a GGUF header: architecture, layers, KV shape, tensors.")),
    "plan": ("llamarig.cli.plan_cmd:plan_cmd", N_("Predict memory per device (and speed) for a llama-server launch.")),
    "models": ("llamarig.cli.catalogue_cmd:models_cmd", N_("List the built-in model catalogue.")),
    "gpus": ("llamarig.cli.catalogue_cmd:gpus_cmd", N_("List the built-in GPU catalogue.")),
    "check": ("llamarig.cli.check_cmd:check_cmd", N_("Lint a llama-server command or script against the real flag schema.")),
    "explain": ("llamarig.cli.check_cmd:explain_cmd", N_("Explain every flag of a llama-server command.")),
    "bench": ("llamarig.cli.bench_cmd:bench_cmd", N_("Measure a running llama-server, with the method on every number.")),
    "logs": ("llamarig.cli.bench_cmd:logs_cmd", N_("Parse llama-server logs into timelines and findings.")),
    "gateway": ("llamarig.cli.gateway_cmd:gateway_cmd", N_("Run the tiered, KV-pool-aware OpenAI-compatible gateway.")),
    "render": ("llamarig.cli.render_cmd:render_cmd", N_("Render a plan or command as bash, systemd, compose or llama-swap.")),
    "launch": ("llamarig.cli.render_cmd:launch_cmd", N_("Start llama-server, wait healthy, verify allocations against the plan.")),
    "stop": ("llamarig.cli.render_cmd:stop_cmd", N_("Stop the llama-server that `llamarig launch` started.")),
    "tune": ("llamarig.cli.tune_cmd:tune_cmd", N_("Find the best config by measurement under constraints.")),
    "top": ("llamarig.cli.top_cmd:top_cmd", N_("Watch a llama-server or gateway live: slots, rates, pool, GPU, alerts.")),
    "quality": ("llamarig.cli.tune_cmd:quality_cmd", N_("Measure KV-cache quantization quality against f16 KV.")),
}


def _with_lang(cmd: click.Command) -> None:
    """Every subcommand takes ``--lang`` (one definition, cli/options.py), its subcommands too."""
    from llamarig.cli.options import lang_param

    if not any(isinstance(p, click.Option) and "--lang" in p.opts for p in cmd.params):
        cmd.params.insert(0, lang_param())
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            _with_lang(sub)


class LazyGroup(Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands:
            return self.commands[name]
        spec = COMMANDS.get(name)
        if spec is None:
            return None
        mod_name, attr = spec[0].split(":")
        try:
            mod = importlib.import_module(mod_name)
        except ModuleNotFoundError as e:
            if e.name == mod_name:
                return None
            raise
        cmd: click.Command = getattr(mod, attr)
        _with_lang(cmd)
        return cmd

    def short_help_of(self, name: str, cmd: click.Command) -> str:
        return _(COMMANDS[name][1]) if name in COMMANDS else super().short_help_of(name, cmd)


@click.group("llamarig", cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="llamarig", help=CLICK_WORDS[1])
@lang_option()
def cli(lang: str | None) -> None:
    """llamarig: plan, check, launch, measure and guard llama.cpp llama-server deployments.

    Every number carries its method; every flag rule is grounded in llama.cpp's source or the
    installed binary. Exit codes: 0 ok, 1 problems found, 2 bad input, 3 environment
    (binary/server), 130 interrupted.
    """
    from llamarig.i18n import set_language

    set_language(lang)


def main(argv: list[str] | None = None) -> Any:
    try:
        return cli.main(args=argv, prog_name="llamarig", standalone_mode=False)
    except LlamarigError as e:
        echo(_("llamarig: error: {message}").format(message=e), err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.UsageError as e:  # one line, like every other bad-input error
        no_args = getattr(click.exceptions, "NoArgsIsHelpError", ())
        if no_args and isinstance(e, no_args) and e.ctx is not None:  # bare `llamarig`: the help
            click.echo(e.ctx.get_help())
            sys.exit(ExitCode.OK)
        where = e.ctx.command_path if e.ctx is not None else "llamarig"
        msg = usage_error_text(e)
        echo(_("llamarig: error: {message} (see `{command} --help`)").format(message=msg, command=where), err=True)
        sys.exit(ExitCode.BAD_INPUT)
    except click.ClickException as e:
        echo(_("llamarig: error: {message}").format(message=" ".join(e.format_message().split())), err=True)
        sys.exit(ExitCode.BAD_INPUT)
    except click.exceptions.Abort:
        click.echo(_("llamarig: interrupted"), err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except KeyboardInterrupt:
        click.echo(_("llamarig: interrupted"), err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        sys.exit(ExitCode.OK)


if __name__ == "__main__":
    main()
