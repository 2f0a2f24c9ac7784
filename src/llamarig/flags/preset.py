"""A ``--models-preset`` preset's keys as the argv the router gives the model's server
(common/preset.cpp ``load_from_ini``:285-345 and ``common_preset::to_args``:36-78): a key is an
option's spelling without dashes or its environment variable; a flag is given when its value is
not false (``off``/``disabled``/``false``/``0``, common/arg.cpp:1341), its negative spelling
(``--no-mmap``) when it is false and the option has one; a negative key (``no-mmap = true``)
reverses the value; an option with a value is given ``--OPTION VALUE``; ``load-on-startup``,
``stop-timeout`` and ``dedup-cache-models`` are the router's own. A key the build does not know
is given as ``--KEY`` (llama-server refuses the file: "option 'KEY' not recognized in preset",
common/preset.cpp:329), so the unknown-flag rule names it, with the closest real spelling.
"""

from __future__ import annotations

from dataclasses import replace

from llamarig.flags.parsed import Invocation, Word
from llamarig.flags.schema import Schema

#: common/arg.cpp:4767 common_params_add_preset_options: not CLI arguments
PRESET_ONLY = frozenset({"load-on-startup", "stop-timeout", "dedup-cache-models",
                         "__PRESET_LOAD_ON_STARTUP", "__PRESET_STOP_TIMEOUT", "__PRESET_DEDUP_CACHE_MODELS"})
_FALSEY = frozenset({"off", "disabled", "false", "0"})


def preset_invocation(inv: Invocation, schema: Schema) -> Invocation:
    """``inv`` (read from a preset file) with its argv."""
    args: list[Word] = []
    for kw, vw in inv.preset or ():
        key, value = kw.text, vw.text
        if key in PRESET_ONLY:
            continue
        spelling = next((s for s in ("--" + key, "-" + key) if schema.lookup(s) is not None), None)
        hit = schema.lookup(spelling) if spelling else None
        if hit is None and key in schema.by_env:
            opt = schema.by_env[key]
            hit, spelling = (opt, True), opt.name
        if hit is None or spelling is None:
            args += [Word("--" + key, kw.line), Word(value, vw.line)] if value else [Word("--" + key, kw.line)]
            continue
        opt, positive = hit
        if opt.takes_value:
            args += [Word(spelling if positive else opt.name, kw.line), Word(value, vw.line)]
            continue
        on = value not in _FALSEY
        if opt.negations and not positive:  # `no-mmap = true`: mmap off
            on = not on
        if on:
            args.append(Word(opt.name if not positive else spelling, kw.line))
        elif opt.negations:
            args.append(Word(opt.negations[-1], kw.line))
    return replace(inv, args=args)
