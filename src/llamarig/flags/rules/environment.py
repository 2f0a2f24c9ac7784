"""Environment variables set for the server: ``LLAMA_ARG_*`` this build reads (and the command
line overrides), and names llama.cpp no longer (or never) reads at run time."""

from __future__ import annotations

import difflib

from llamarig.flags.findings import Finding, Fix, Severity, finding
from llamarig.flags.knowledge import DEAD_ENV, LIVE_GGML_ENV, LIVE_GGML_PREFIXES, LIVE_LLAMA_ENV
from llamarig.flags.rules.context import Subject
from llamarig.i18n import _


def env_vars(s: Subject) -> list[Finding]:
    """dead-env-var, unknown-env-var, env-overridden."""
    inv, schema, r, k = s.inv, s.schema, s.reading, s.k
    # common/arg.cpp: LLAMA_ARG_* are read before the CLI, the CLI overrides them
    out = []
    for name, value, line in inv.env:
        if name in DEAD_ENV:
            out.append(finding("dead-env-var", Severity.WARNING, line, name,
                               _("`{setting}` has no effect: {why}").format(setting=f"{name}={value}",
                                                                            why=_(DEAD_ENV[name])),
                               _("remove `{setting}`").format(setting=f"{name}={value}"),
                               k, True, Fix("drop-env", (name,))))
        elif name.startswith("LLAMA_ARG_"):
            opt = schema.by_env.get(name)
            if opt is None:
                near = difflib.get_close_matches(name, list(schema.by_env), n=2, cutoff=0.7) \
                    if schema.memo.take_search() else []
                out.append(finding("unknown-env-var", Severity.WARNING, line, name,
                                   _("`{name}` is not read by this llama-server").format(name=name) +
                                   (_("; closest: {names}").format(names=", ".join(near)) if near else ""),
                                   _("use `{fixed}`").format(fixed=near[0]) if near else _("remove it"), k, True, Fix("drop-env", (name,))))
            elif (cli := r.last(opt.name)) is not None:
                out.append(finding("env-overridden", Severity.INFO, line, name,
                                   _("`{name}` is overridden by `{flag}` on the command line (the CLI "
                                     "wins)").format(name=name, flag=cli.spelling), None, k))
        elif name.startswith("LLAMA_") and name not in LIVE_LLAMA_ENV:
            out.append(finding("dead-env-var", Severity.WARNING, line, name,
                               _("`{name}` is not read anywhere in llama.cpp build {build} (no getenv in src/, "
                                 "common/, tools/server/)").format(name=name, build=schema.build or "?"),
                               _("remove `{setting}`").format(setting=f"{name}={value}"),
                               k, True, Fix("drop-env", (name,))))
        elif name.startswith("GGML_") and name not in LIVE_GGML_ENV and not name.startswith(LIVE_GGML_PREFIXES):
            out.append(finding("dead-env-var", Severity.INFO, line, name,
                               _("`{name}` is not read at run time by ggml in this build (often a CMake "
                                 "option, which must be set when compiling)").format(name=name), None, k))
    return out
