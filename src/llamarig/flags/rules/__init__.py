"""Lint rules for a llama-server invocation, checked against the schema of the installed build.

``lint`` reads each invocation as llama-server's parser would (llamarig.flags.argv, which
reports what the parser itself rejects) and runs every rule in ``RULES`` on it, in that order.
A rule is a function of one ``Subject`` (the invocation, its reading, the schema, the
``Context``) returning ``Finding``s; the rule families live one per module here (values,
options, combinations, environment, safety, rpc, model, memory; script for the text around
the command). Each rule cites the llama.cpp source file it is grounded in; docs/check.md lists
them all.

To add a rule: write the function in the module of its family, add it to ``RULES``, describe it
in docs/check.md's rule table and test it in tests/flags/.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from llamarig.flags.argv import Reading, read_invocation
from llamarig.flags.findings import Finding, Fix, Severity
from llamarig.flags.parsed import Invocation, Parsed
from llamarig.flags.preset import preset_invocation
from llamarig.flags.rules import (
    combinations,
    engines,
    environment,
    memory,
    model,
    options,
    rpc,
    safety,
    script,
    values,
)
from llamarig.flags.rules.context import Context, Subject, physical_cores
from llamarig.flags.schema import Schema
from llamarig.hardware.cpu import detect_cpu

if TYPE_CHECKING:
    from llamarig.hardware.cpu import CpuFeatures

__all__ = [
    "PARSE_RULES", "RESOLVED_RULES", "RULES", "Context", "Finding", "Fix", "Rule", "Severity", "Subject",
    "lint", "lint_invocation", "physical_cores",
]

Rule = Callable[[Subject], list[Finding]]

#: every rule, in the order their findings are listed for equal line, severity and rule id
RULES: tuple[Rule, ...] = (
    values.check_values,
    options.removed_deprecated,
    options.duplicates,
    options.underscore_spelling,
    combinations.cache_reuse,
    combinations.cache_idle_slots,
    combinations.kv_types_flash_attention,
    combinations.batch_sizes,
    combinations.ctx_padding,
    combinations.slot_context,
    combinations.split_tensor_flash_attention,
    combinations.threads_above_cores,
    combinations.mtp_draft_kv_types,
    combinations.default_values,
    environment.env_vars,
    safety.public_listen,
    rpc.rpc_endpoints,
    model.model_unreadable,
    model.mtp_without_nextn,
    model.slot_ctx_above_train,
    model.amx_tile_crash,
    model.cache_reuse_no_shift,
    memory.memory_plan,
)

#: rules whose findings mean llama-server refuses the argv while parsing it (exit 1 before
#: any model loading); the corpus test compares exactly these with the real binary.
PARSE_RULES = frozenset({
    "unknown-flag", "equals-syntax", "stray-argument", "flag-takes-no-value", "missing-value",
    "invalid-value", "removed-flag",
})


#: rules whose findings come from the resolved deployment of a command (llamarig.app.resolution,
#: added by app/check.py's resolution_findings), not from a function of ``RULES``: what --fit can
#: do where it is written (common/fit.cpp:455, 464-486), and what it could do for the command as
#: meant where that differs; docs/check.md lists them
RESOLVED_RULES = ("fit-cannot-act", "fit-context-fixed", "fit-layers-fixed", "fit-meant")

#: findings about the text itself rather than the invocation: reported once per script
_ONCE_PER_SCRIPT = frozenset({"dead-env-var", "unknown-env-var"})


def _this_cpu() -> CpuFeatures | None:
    return detect_cpu()  # looked up here at call time, so a test can replace rules.detect_cpu


def lint_invocation(inv: Invocation, schema: Schema, k: int | None = None,
                    ctx: Context | None = None) -> tuple[Reading, list[Finding]]:
    """The reading of one invocation and every rule's findings on it (unsorted)."""
    ctx = ctx or Context()
    r = read_invocation(inv, schema, k)
    subject = Subject(inv, schema, r, k, ctx, _this_cpu)
    out = list(r.findings)
    for rule in RULES:
        out += rule(subject)
    return r, out


def lint(parsed: Parsed, schema: Schema, ctx: Context | None = None,
         model_loader: Callable[[Invocation, Context], Context] | None = None
         ) -> tuple[list[Reading], list[Finding]]:
    """All findings for a parsed input, sorted by line."""
    schema.memo.search_budget = MAX_SIMILARITY_SEARCHES
    try:
        return _lint(parsed, schema, ctx, model_loader)
    finally:
        schema.memo.search_budget = None


#: difflib searches for "closest spelling" per lint (llamarig.flags.argv.closest)
MAX_SIMILARITY_SEARCHES = 2000


def _lint(parsed: Parsed, schema: Schema, ctx: Context | None,
          model_loader: Callable[[Invocation, Context], Context] | None) -> tuple[list[Reading], list[Finding]]:
    findings: list[Finding] = [script.note_to_finding(n) for n in parsed.notes]
    readings = []
    default_ctx = None
    # an environment variable set once for the whole script is judged once, not once per
    # invocation that inherits it (the output stays linear in the input)
    seen_env: set[tuple[str, int, str | None]] = set()
    for k, inv in enumerate(parsed.invocations):
        if inv.preset is not None and not inv.args:  # a --models-preset section: its argv, for this build
            inv = parsed.invocations[k] = preset_invocation(inv, schema)
        if ctx is None and default_ctx is None:  # detected once, not per invocation
            default_ctx = Context(physical_cores=physical_cores(), cores_source="this machine")
        c = ctx or default_ctx
        assert c is not None
        if model_loader is not None:
            c = model_loader(inv, c)
        r, fs = lint_invocation(inv, schema, k, c)
        readings.append(r)
        for f in fs:
            if f.rule in _ONCE_PER_SCRIPT:
                key = (f.rule, f.line, f.flag)
                if key in seen_env:
                    continue
                seen_env.add(key)
            findings.append(f)
        findings.extend(script.background_no_log(inv, r, k))
    for inv in parsed.others:  # other engines' commands: named, FastLLM's flags checked and translated
        findings.extend(engines.engine_findings(inv, schema, ctx or default_ctx or Context()))
    if not parsed.invocations and not parsed.others and parsed.kind == "shell":
        findings.extend(engines.modelfile_findings(parsed.lines))
    order = {s: i for i, s in enumerate(Severity)}
    findings.sort(key=lambda f: (f.line, order.get(f.severity, 9), f.rule))
    return readings, findings
