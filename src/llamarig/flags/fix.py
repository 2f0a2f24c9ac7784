"""``llamarig check --fix``: print the input with every llama-server command rewritten so that it
parses: one option per line, every line but the last ending in `` \\``, comments moved above
the command, folklore replaced by the real flag (or removed with a comment), bad values
replaced, dead environment variables dropped. Other lines of the script are kept as written.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from dataclasses import dataclass, field

from llamarig.flags.argv import FALSY, Reading, Use
from llamarig.flags.engines.fastllm import fix_fastllm, read_fastllm, translate_fastllm
from llamarig.flags.findings import CUT_OFF_NOTE, Finding, Fix, Severity
from llamarig.flags.parsed import Invocation, Parsed, ShellCommand
from llamarig.flags.schema import Schema
from llamarig.i18n import Message, _, localize

_SAFE_RE = re.compile(r"^[A-Za-z0-9_@%+=:,./~${}\-]+$")

#: warning/info rules whose repair --fix applies (errors are always repaired)
_APPLY_WARNINGS = frozenset({
    "duplicate-flag", "cache-reuse-mmproj", "cache-reuse-ge-ctx", "ubatch-gt-batch",
    "underscore-spelling", "dead-env-var", "value-truncated", "deprecated-flag", "cache-reuse-no-shift",
})


def quote(word: str) -> str:
    if word and _SAFE_RE.match(word) and not word.startswith("$("):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


@dataclass
class FixedInvocation:
    args: list[str]  # one option per item, as shell text (quoted)
    comments: list[str]
    dropped_env: set[str]
    groups: list[list[str]] = field(default_factory=list)  # the same, word by word, unquoted


def fix_invocation(inv: Invocation, reading: Reading, findings: list[Finding], schema: Schema,
                   lang: str = "en") -> FixedInvocation:
    """The corrected argument list of one invocation and the comments explaining the changes (in
    ``lang``)."""
    actions: dict[int, list[Finding]] = {}
    dropped_env: set[str] = set()
    comments: list[str] = []
    for f in findings:
        if f.action is None or (f.severity != Severity.ERROR and f.rule not in _APPLY_WARNINGS):
            continue
        if f.action.action == "drop-env":
            dropped_env.update(f.action.args)
            comments.append("# llamarig: " + _("removed {what}: {why}").format(what=f.action.args[0],
                                                                               why=_short(f.message, lang)))
        elif f.use is not None:
            actions.setdefault(f.use, []).append(f)
    present = {u.opt.name for u in reading.uses if u.opt is not None}
    edit = _Edit(schema, present, comments, lang)
    out = [g for u in reading.uses if (g := edit.use(u, actions.get(u.index, []))) is not None]
    final = _last_wins(out, schema)
    # words kept as they were keep their quoting as written (`-m "$1"` stays quoted), unless
    # the written form is itself broken (an unterminated quote): then it is re-quoted
    raw_of = {w.text: w.raw for w in inv.intended_args if w.raw and _well_formed(w.raw, w.text)}
    raw_of.update({w.text: w.written for w in inv.intended_args if w.written})  # llama-swap `${PORT}`
    written = {w.text: w.written for w in inv.intended_args if w.written}
    return FixedInvocation([" ".join(raw_of.get(x) or quote(x) for x in g) for g in final],
                           [w for c in _dedupe(comments) for w in _wrap(localize(c, lang))], dropped_env,
                           [[written.get(x, x) for x in g] for g in final])


def _last_wins(groups: list[list[str]], schema: Schema) -> list[list[str]]:
    """The last occurrence of a non-appending option wins: only that one kept."""
    seen: set[str] = set()
    final: list[list[str]] = []
    for group in reversed(groups):
        look = schema.lookup(group[0])
        name = look[0].name if look else group[0]
        if look and not look[0].appending and name in seen:
            continue
        seen.add(name)
        final.append(group)
    final.reverse()
    return final


@dataclass
class _Edit:
    """The repairs of one invocation's options, one use at a time: each gives the option's
    words as fixed (None: removed) and adds a comment saying what changed."""

    schema: Schema
    present: set[str]  # options the command sets (a replacement that is already set is dropped)
    comments: list[str]
    lang: str

    def use(self, u: Use, acts: list[Finding]) -> list[str] | None:
        kinds = {a.action.action: a for a in acts if a.action}
        fixes = {a.action.action: a.action for a in acts if a.action}  # kinds[k].action, typed as a Fix
        if u.opaque:  # `"$@"`, `$EXTRA`: kept as written
            return [u.spelling]
        if u.opt is None and not u.spelling.startswith("-"):
            return None  # a stray word (`on` after --metrics): dropped
        if "drop" in kinds and not kinds.keys() & {"replace", "rename", "split-equals"}:
            f = kinds["drop"]
            if f.rule != "duplicate-flag":
                self._say(_("removed {what}: {why}").format(what=f"`{_show(u)}`", why=_short(f.message, self.lang)))
            return None
        if "replace" in kinds:
            return self._replace(u, kinds["replace"], list(fixes["replace"].args))
        if "split-equals" in kinds:
            return list(fixes["split-equals"].args)
        return self._change(u, kinds, fixes)

    def _say(self, text: str) -> None:
        self.comments.append("# llamarig: " + text)

    def _replace(self, u: Use, f: Finding, new: list[str]) -> list[str] | None:
        target = self.schema.lookup(new[0])
        if target is not None and target[0].name in self.present:
            self._say(_("removed `{what}` (`{flag}` is already set): {why}").format(
                what=_show(u), flag=target[0].name, why=_short(f.message, self.lang)))
            return None
        if target is not None:
            self.present.add(target[0].name)
        self.comments.append(f"# llamarig: `{_show(u)}` -> `{' '.join(new)}`")
        return new

    def _change(self, u: Use, kinds: dict[str, Finding], fixes: dict[str, Fix]) -> list[str] | None:
        """A known option (or a misspelled one) kept, its spelling or value repaired."""
        spelling = u.spelling
        values = [v.text for v in u.values]
        if "rename" in kinds:
            new_sp = fixes["rename"].args[0]
            if u.opt is None:
                self.comments.append(f"# llamarig: `{u.spelling}` -> `{new_sp}` " + _("(closest real spelling)"))
            spelling = new_sp
        if "set-value" in kinds:
            new_v = fixes["set-value"].args[0]
            if values and values[0] != new_v:
                self.comments.append(f"# llamarig: `{spelling} {values[0]}` -> `{spelling} {new_v}`: "
                                     f"{_short(kinds['set-value'].message, self.lang)}")
                values = [new_v] + values[1:]
        if "add-value" in kinds:
            new_v = fixes["add-value"].args[0]
            self.comments.append(f"# llamarig: `{spelling}` -> `{spelling} {new_v}` " + _("(it takes a value)"))
            values = [new_v]
        if "drop-value" in kinds:
            spelling_or_none = self._drop_value(u, spelling, fixes["drop-value"].args[0])
            if spelling_or_none is None:
                return None
            spelling = spelling_or_none
        if u.opt is None and "rename" not in kinds:
            self._say(_("removed unknown `{what}`").format(what=_show(u)))
            return None
        return [spelling] + values

    def _drop_value(self, u: Use, spelling: str, stray: str) -> str | None:
        """A flag written with a value it does not take: the flag alone, its negation for an
        "off", or nothing (off is the default)."""
        if stray.lower() not in FALSY:
            self.comments.append(f"# llamarig: `{spelling} {stray}` -> `{spelling}` " + _("(it takes no value)"))
            return spelling
        if u.opt is not None and u.opt.negations:
            self.comments.append(f"# llamarig: `{spelling} {stray}` -> `{u.opt.negations[-1]}`")
            return u.opt.negations[-1]
        self._say(_("removed `{what}` (off is the default)").format(what=f"{spelling} {stray}"))
        return None


def _well_formed(raw: str, text: str) -> bool:
    """``raw`` is one complete shell word that reads back as ``text``."""
    try:
        return shlex.split(raw) == [text]
    except ValueError:  # unterminated quote
        return False


def _show(u: Use) -> str:
    return " ".join([u.spelling] + [v.text for v in u.values])


def _short(msg: str, lang: str) -> str:
    """The finding's message for a fix comment in ``lang``, whole (a cut comment cut a flag name
    in half: 'iq4_n...'); long ones are wrapped over several comment lines by _wrap."""
    if isinstance(msg, Message) and msg.parts and msg.parts[-1] == CUT_OFF_NOTE:
        return localize(Message.concat(msg.parts[:-1]), lang).rstrip()
    text = localize(msg, lang)
    for note in {CUT_OFF_NOTE, localize(_(CUT_OFF_NOTE), lang)}:
        if text.endswith(note):
            return text[: -len(note)].rstrip()
    return text


#: the pieces a comment may be broken between: one wide (CJK) character, a run of other
#: non-blank characters (a word, a flag name: never broken), a run of blanks
_PIECE_RE = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef]"
                       r"|[^\s\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef]+|\s+")


def _cells(text: str) -> int:
    """Terminal columns of ``text``: wide (CJK, full-width) characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _wrap(comment: str, width: int = 100) -> list[str]:
    """A '# ...' comment over lines of at most ``width`` terminal columns, never breaking a word
    (Chinese text, which has no blanks, breaks between characters)."""
    if _cells(comment) <= width:
        return [comment]
    lines: list[str] = []
    line = ""
    for piece in _PIECE_RE.findall(comment):
        if piece.isspace():
            if line:
                line += " "
            continue
        if line and _cells(line + piece) > width:
            lines.append(line.rstrip())
            line = "#   " + piece
        else:
            line += piece
    if line.strip():
        lines.append(line.rstrip())
    return lines or [comment]


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))  # first occurrences, in order


def _dedupe_comments(lines: list[str], above: set[str]) -> list[str]:
    """Comment lines without repeats, a wrapped comment judged as a whole: its '#   '
    continuation lines stay with their first line (two findings can share a continuation line,
    e.g. the list of allowed KV types, and dropping the second copy cut that comment short)."""
    out: list[str] = []
    seen: set[tuple[str, ...]] = set()
    group: list[str] = []
    for ln in [*lines, ""]:
        if ln.startswith("#   ") and group:
            group.append(ln)
            continue
        if group:
            key = tuple(group)
            if key not in seen and not all(g in above for g in group):
                seen.add(key)
                out.extend(group)
        group = [ln] if ln else []
    return out


def _prefix(inv: Invocation, lines: list[str], dropped_env: set[str]) -> str:
    """The text of the command's first line up to the program (or image), without dropped
    assignments."""
    if inv.head:
        head = inv.head
    else:
        idx = inv.line - 1
        line = lines[idx] if 0 <= idx < len(lines) else inv.program
        pos = line.find(inv.program)
        head = line[: pos + len(inv.program)] if pos >= 0 else inv.program
    for name in dropped_env:
        head = re.sub(rf"(^|\s){re.escape(name)}=\S*\s*", r"\1", head)
    return head.rstrip()


def fix_text(parsed: Parsed, readings: list[Reading], findings: list[Finding], schema: Schema,
             lang: str = "en") -> str:
    """The whole input, corrected; its comments in ``lang`` (llamarig.i18n)."""
    by_inv: dict[int, list[Finding]] = {}
    for f in findings:
        if f.invocation is not None:
            by_inv.setdefault(f.invocation, []).append(f)
    if parsed.kind in ("shell", "systemd"):
        return _fix_lines(parsed, readings, by_inv, schema, lang)
    if parsed.kind in ("compose", "kubernetes", "helm-values", "llama-swap", "yaml"):
        from llamarig.flags.fix_yaml import fix_yaml  # lazy: YAML inputs only

        fixed = [fix_invocation(inv, readings[k], by_inv.get(k, []), schema, lang)
                 for k, inv in enumerate(parsed.invocations)]
        return fix_yaml("\n".join(parsed.lines), parsed, fixed, lang)
    if parsed.kind == "models-preset":  # the file as written (still INI), the repairs as comments
        out = "\n".join(parsed.lines).rstrip("\n") + "\n"
        for k, inv in enumerate(parsed.invocations):
            fx = fix_invocation(inv, readings[k], by_inv.get(k, []), schema, lang)
            if fx.comments:
                out += "\n; llamarig: " + localize(_("{label}: the preset's keys as corrected options:").format(
                    label=inv.label), lang) + "\n"
                out += "".join(f"; {c.lstrip('# ')}\n" for c in fx.comments)
                out += "".join(f";   {a}\n" for a in fx.args)
        return out
    blocks = []
    for k, inv in enumerate(parsed.invocations):
        fx = fix_invocation(inv, readings[k], by_inv.get(k, []), schema, lang)
        head = ("# " + _("{kind} {label}: corrected command").format(kind=parsed.kind, label=inv.label) if inv.label
                else "# " + _("corrected command"))
        blocks.append("\n".join([localize(head, lang), *fx.comments, _join(inv.program, fx.args, False)]))
    return "\n\n".join(blocks) + "\n"


def _join(head: str, args: list[str], background: bool, indent: str = "  ",
          redirects: list[str] | None = None) -> str:
    tail = "".join(" " + r for r in redirects or []) + (" &" if background else "")
    if not args:
        return head + tail
    parts = [head + " \\"]
    for i, a in enumerate(args):
        last = i == len(args) - 1
        parts.append(indent + a + ("" if last else " \\"))
    parts[-1] += tail
    return "\n".join(parts)


def _fix_lines(parsed: Parsed, readings: list[Reading], by_inv: dict[int, list[Finding]], schema: Schema,
               lang: str) -> str:
    lines = parsed.lines
    # the command whose last word is on a line (the first one), for _orphan_end: one pass, not
    # one per invocation
    by_last: dict[int, ShellCommand] = {}
    for cmd in parsed.commands:
        if cmd.words:
            by_last.setdefault(cmd.words[-1].line, cmd)
    fixed = [fix_invocation(inv, readings[k], by_inv.get(k, []), schema, lang) for k, inv in enumerate(parsed.invocations)]
    moved = {n.line: n.comment for n in parsed.line_notes if n.comment}
    replace: dict[int, tuple[int, str]] = {}  # first line index -> (last line index, new text)
    for k, inv in enumerate(parsed.invocations):
        if not inv.written_here:  # another file's, or a function body shared by its calls: as written
            continue
        start, end = _span(inv, by_last)
        kept = [ln.strip() for ln in lines[start:end + 1] if ln.strip().startswith("#")]
        kept += [f"# {moved[n]}" for n in range(start + 1, end + 2) if n in moved]
        if inv.source == "fragment":
            block = _fragment_block(inv, fixed[k], len(parsed.invocations) + len(parsed.others) > 1, lang)
            replace[start] = (end, "\n".join([*kept, block]))
            continue
        warn = [w for f in by_inv.get(k, []) if f.rule == "public-no-api-key"
                for w in _wrap("# llamarig: " + _short(f.message, lang))]
        above = _comments_above(lines, start)
        header = _dedupe_comments([*kept, *fixed[k].comments, *warn], above)
        replace[start] = (end, "\n".join([*header, _command_text(parsed, inv, fixed[k], lines, start)]))
    for inv in parsed.others:
        if inv.written_here:
            start, end = _span(inv, by_last)
            kept = [ln.strip() for ln in lines[start:end + 1] if ln.strip().startswith("#")]
            kept += [f"# {moved[n]}" for n in range(start + 1, end + 2) if n in moved]
            replace[start] = (end, "\n".join([*kept, _engine_text(inv, lines, lang, _has_equivalent(lines, end))]))
    notes_at = _kill_notes(parsed, lang)
    if parsed.kind == "systemd":
        _systemd_env(lines, replace, {n for fx in fixed for n in fx.dropped_env}, lang)
    dropped = {n.line - 1 for n in parsed.line_notes if n.repaired is None}
    text = "\n".join(_assemble(lines, replace, notes_at, dropped))
    return text if text.endswith("\n") else text + "\n"


def _span(inv: Invocation, by_last: dict[int, ShellCommand]) -> tuple[int, int]:
    """The 0-based first and last line of an invocation's text, its cut-off words included."""
    start = inv.line - 1
    end = max([inv.end_line] + [w.line for w in inv.intended_args]) - 1
    if inv.orphans:
        end = max(end, _orphan_end(by_last, inv) - 1)
    return start, end


def _comments_above(lines: list[str], start: int) -> set[str]:
    above: set[str] = set()
    j = start - 1
    while j >= 0 and lines[j].strip().startswith("#"):
        above.add(lines[j].strip())
        j -= 1
    return above


def _command_text(parsed: Parsed, inv: Invocation, fx: FixedInvocation, lines: list[str], start: int) -> str:
    """The command rewritten: its head as written (a systemd ``ExecStart=``), one option per line."""
    if parsed.kind == "systemd":
        line = lines[start]
        head = line[: line.find(inv.program) + len(inv.program)] if inv.program in line else f"ExecStart={inv.program}"
        return _join(head.rstrip(), fx.args, False)
    return _join(_prefix(inv, lines, fx.dropped_env), fx.args, inv.background and inv.tail is None,
                 redirects=inv.redirects) + (inv.tail or "")


def _has_equivalent(lines: list[str], end: int) -> bool:
    """Whether the comment lines after line ``end`` (0-based) hold a llama-server equivalent an
    earlier --fix wrote (it stays: a second --fix changes nothing)."""
    j = end + 1
    while j < len(lines) and lines[j].startswith("#"):
        if lines[j].startswith("#   llama-server "):
            return True
        j += 1
    return False


def _engine_text(inv: Invocation, lines: list[str], lang: str, has_equivalent: bool = False) -> str:
    """Another engine's command rewritten: its words joined again, one option per line, and for
    FastLLM its flags repaired against its parser and its llama-server equivalent below it."""
    if inv.engine == "fastllm":
        groups, said = fix_fastllm(inv)
        uses = read_fastllm(inv)[1]
    else:
        groups, said, uses = _option_groups([w.text for w in inv.intended_args]), [], []
    raw_of = {w.text: w.raw for w in inv.intended_args if w.raw and _well_formed(w.raw, w.text)}
    args = [" ".join(raw_of.get(x) or quote(x) for x in g) for g in groups]
    head = " ".join([_prefix(inv, lines, set()), *args[:1]]) if inv.engine == "fastllm" else _prefix(inv, lines, set())
    args = args[1:] if inv.engine == "fastllm" else args
    comments = [w for c in said for w in _wrap(localize("# llamarig: " + c, lang))]
    out = [*comments, _join(head, args, inv.background and inv.tail is None, redirects=inv.redirects)
           + (inv.tail or "")]
    if uses and not has_equivalent:
        tr = translate_fastllm(uses)
        out += _wrap("# llamarig: " + localize(_("the llama-server equivalent ({model}):").format(model=tr.model), lang))
        out.append("#   " + tr.command())
    return "\n".join(out)


def _option_groups(words: list[str]) -> list[list[str]]:
    """Words grouped one option (with the words after it that are no option) per group."""
    groups: list[list[str]] = []
    for w in words:
        if groups and not w.startswith("-"):
            groups[-1].append(w)
        else:
            groups.append([w])
    return groups


def _fragment_block(inv: Invocation, fx: FixedInvocation, others: bool, lang: str) -> str:
    """Flags with no command in front, corrected, as comments: --fix never makes them a
    llama-server command of their own (it would have no model)."""
    lines = [_span_text(inv.line, inv.end_line)]
    if others:
        head = _("line(s) {lines}: llama-server flags with no command to join them to: which command are they "
                 "for? Corrected, they are:")
    else:
        head = _("line(s) {lines}: llama-server flags with no command here to join them to; corrected, they "
                 "are (add them to your llama-server command):")
    out = _wrap("# llamarig: " + localize(head.format(lines=lines[0]), lang))
    out += fx.comments
    out += [f"#   {a}" for a in fx.args]
    return "\n".join(out)


def _span_text(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def _kill_notes(parsed: Parsed, lang: str) -> dict[int, list[str]]:
    notes_at: dict[int, list[str]] = {}
    for n in parsed.notes:
        if n.kind == "kill-by-name":
            notes_at.setdefault(n.line - 1, []).append(localize(
                "# llamarig: " + _("killall matches every process with this name; prefer "
                                   "`kill \"$(cat server.pid)\"` or `pkill -x NAME -u \"$USER\"` and wait for the exit"), lang))
    return notes_at


def _systemd_env(lines: list[str], replace: dict[int, tuple[int, str]], dropped: set[str], lang: str) -> None:
    """``Environment=`` lines without the dead variables the fix drops."""
    for i, ln in enumerate(lines):
        if ln.strip().startswith("Environment=") and i not in replace:
            new = ln
            for name in dropped:
                new = re.sub(rf"(\s|=)\"?{re.escape(name)}=[^\s\"]*\"?", r"\1", new)
            if new != ln:
                replace[i] = (i, "# llamarig: " + localize(_("was `{line}`").format(line=ln.strip()), lang) + (
                    f"\n{new.rstrip()}" if new.strip() != "Environment=" else ""))


def _assemble(lines: list[str], replace: dict[int, tuple[int, str]], notes_at: dict[int, list[str]],
              dropped: set[int]) -> list[str]:
    """The lines of the output: the replaced spans, the notes above their lines, the dropped
    lines (a chat's code-block labels) left out."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        if i in notes_at:
            out.extend(n for n in notes_at[i] if not (out and out[-1] == n) and lines[i - 1:i] != [n])
        if i in replace:
            end, text = replace[i]
            out.append(text)
            i = end + 1
            continue
        if i not in dropped:
            out.append(lines[i])
        i += 1
    return out


def _orphan_end(by_last: dict[int, ShellCommand], inv: Invocation) -> int:
    last = inv.orphans[-1].line if inv.orphans else inv.end_line
    cmd = by_last.get(last)
    if cmd is not None:
        return cmd.end_line if cmd.comment_break is None else cmd.end_line - 1
    return last
