"""Reading a systemd unit: its ``ExecStart=`` (and ``ExecStartPre=``/``ExecStartPost=``) lines and
``Environment=`` assignments, by systemd.syntax(7): a trailing backslash joins the next line, and
comment lines that follow a backslash line are skipped (the continuation goes on), so comments
do not cut a unit's command as they cut a bash one. A *blank* line does: systemd's reader
(src/shared/conf-parser.c ``config_parse``) skips only comment lines inside a continuation, so an
empty line is appended and ends it; the option lines after it are then lines of their own, which
systemd ignores ("Missing '=', ignoring line."). Those are reported as cut off, as for bash.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from llamarig.flags.findings import Severity
from llamarig.flags.parsed import Invocation, Note, Parsed, Word
from llamarig.flags.readers.common import (
    basename,
    ends_with_backslash,
    is_server_call,
    unwrap,
    wrapper_words,
)
from llamarig.flags.readers.interpolate import read_env_file
from llamarig.i18n import _

_KEY_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*\s*=")


def _logical(raw: list[str], i: int) -> tuple[str, list[int], int, int | None]:
    """The logical line starting at raw[i]: its text (backslash-newlines joined, comment lines
    skipped), its physical line numbers, the index of its last line, and the line of a blank
    line that ended the continuation (or None)."""
    parts = []
    line_nos = [i + 1]
    cur = raw[i].rstrip()
    blank = None
    while ends_with_backslash(cur) and i + 1 < len(raw):
        parts.append(cur[:-1] + " ")
        i += 1
        # systemd.syntax(7): comment lines following a backslash line are ignored
        while i < len(raw) and raw[i].strip()[:1] in ("#", ";"):
            i += 1
        if i >= len(raw):
            cur = ""
            break
        cur = raw[i].rstrip()
        if not cur.strip():  # an empty line is appended, and ends the continuation
            blank = i + 1
            cur = ""
            break
        line_nos.append(i + 1)
    parts.append(cur)
    return "".join(parts), line_nos, i, blank


#: an entry of a unit: key, value, first line, its lines, (blank line that cut it, [(ignored
#: text, its lines)]), the file it is in ("" the unit itself, else a drop-in's name), its raw lines
Entry = tuple[str, str, int, list[int], int | None, list[tuple[str, list[int]]], str, list[str]]
#: drop-ins and environment files read per unit (and their size): bounded, whatever the directory holds
_MAX_DROPINS = 64
_MAX_FILE = 1 << 20


def _entries(raw: list[str], where: str) -> list[Entry]:
    entries: list[Entry] = []
    i = 0
    while i < len(raw):
        line = raw[i].strip()
        if not line or line[0] in "#;" or line.startswith("["):
            i += 1
            continue
        start = i
        joined, line_nos, i, blank = _logical(raw, i)
        ignored: list[tuple[str, list[int]]] = []
        if blank is not None:
            # the lines after the blank one, up to the next `Key=` or section: systemd ignores them
            j = blank  # 0-based index of the line after the blank one
            while j < len(raw):
                t = raw[j].strip()
                if not t or t[0] in "#;":
                    j += 1
                    continue
                if t.startswith("[") or _KEY_RE.match(t):
                    break
                text_j, nos_j, last_j = _logical(raw, j)[:3]
                ignored.append((text_j, nos_j))
                j = last_j + 1
            i = max(i, j - 1)
        key, sep, val = joined.partition("=")
        if sep:
            entries.append((key.strip(), val.strip(), start + 1, line_nos, blank, ignored, where, raw))
        i += 1
    return entries


def _read_small(path: Path) -> str | None:
    try:
        if not path.is_file():
            return None
        with open(path, "rb") as f:
            return f.read(_MAX_FILE).decode("utf-8", errors="replace").replace("\r\n", "\n")
    except OSError:
        return None


def _dropins(origin: Path | None) -> list[tuple[str, list[str]]]:
    """systemd.unit(5) "Description": the ``UNIT.d/*.conf`` drop-ins next to the unit, read after
    it in the order of their file names (each (name, lines))."""
    if origin is None:
        return []
    d = origin.parent / (origin.name + ".d")
    try:
        confs = sorted(d.glob("*.conf"), key=lambda p: p.name)[:_MAX_DROPINS] if d.is_dir() else []
    except OSError:
        return []
    out = []
    for conf in confs:
        text = _read_small(conf)
        if text is not None:
            out.append((f"{d.name}/{conf.name}", text.split("\n")))
    return out


def _environment_file(value: str, origin: Path | None, line: int, notes: list[Note]) -> list[tuple[str, str, int]]:
    """systemd.exec(5) EnvironmentFile=: ``NAME=value`` lines (``#``/``;`` comments, quotes
    removed); a leading ``-`` makes a missing file no error. The file is looked for where the unit
    names it, else next to the unit (a unit copied off its machine keeps its files beside it)."""
    optional = value.startswith("-")
    name = value.lstrip("-").strip()
    cands = [Path(name)] + ([origin.parent / Path(name).name] if origin is not None else [])
    text = next((t for t in (_read_small(c) for c in cands) if t is not None), None)
    if text is None:
        if not optional:
            notes.append(Note("unknown-variable", line,
                              _("EnvironmentFile={name} is not here (nor next to the unit): its variables "
                                "are not known; `$NAME` references to them are checked as written").format(name=name),
                              Severity.INFO))
        return []
    return [(n, v, line) for n, v, _line in read_env_file(text)]


def parse_systemd(text: str, origin: Path | None = None) -> Parsed:
    """Read ExecStart= (and Environment=, EnvironmentFile=) of a unit file and of its drop-ins
    (``origin``: the unit's path), systemd.syntax(7) continuation rules, ``$VAR``/``${VAR}``
    expanded as systemd.service(5) "Command lines" says."""
    raw = text.split("\n")
    entries = _entries(raw, "")
    for where, lines in _dropins(origin):
        entries.extend(_entries(lines, where))
    notes: list[Note] = []
    env = _unit_environment(entries, origin, notes)
    # systemd.service(5) ExecStart=: an empty assignment resets the list of commands before it
    # (a drop-in replaces the unit's command with `ExecStart=` then `ExecStart=...`)
    kept: list[Entry] = []
    for e in entries:
        if e[0] in _EXEC and not e[1]:
            kept = [k for k in kept if k[0] != e[0]]
        else:
            kept.append(e)
    invocations: list[Invocation] = []
    for e in kept:
        if e[0] in _EXEC:
            _exec_line(e, env, kept, invocations, notes)
    return Parsed("systemd", invocations, notes, [], raw)


_EXEC = ("ExecStart", "ExecStartPre", "ExecStartPost")


def _unit_environment(entries: list[Entry], origin: Path | None, notes: list[Note]) -> dict[str, tuple[str, str, int]]:
    """systemd.exec(5): Environment= and EnvironmentFile= apply to every command of the unit,
    wherever they are written; the files' settings override Environment='s, later ones earlier.
    Name -> (name, value, line)."""
    env: dict[str, tuple[str, str, int]] = {}
    from_files: list[tuple[str, str, int]] = []
    for key, val, ln, *_rest in entries:
        if key == "Environment":
            try:
                for item in shlex.split(val):
                    n, _eq, v = item.partition("=")
                    env.pop(n, None)
                    env[n] = (n, v, ln)
            except ValueError:
                notes.append(Note("shell-syntax", ln, _("unbalanced quotes in {key}=").format(key="Environment"),
                                  Severity.ERROR))
        elif key == "EnvironmentFile" and val:
            from_files.extend(_environment_file(val, origin, ln, notes))
    for fe in from_files:
        env.pop(fe[0], None)
        env[fe[0]] = fe
    return env


def _exec_line(e: Entry, env: dict[str, tuple[str, str, int]], kept: list[Entry], invocations: list[Invocation],
               notes: list[Note]) -> None:
    """One ExecStart=/ExecStartPre=/ExecStartPost= line: a llama-server invocation (its
    variables expanded), a kill by name, or nothing."""
    key, val, ln, line_nos, blank, ignored, where, lines = e
    v = val.lstrip("@-:+!|")
    try:
        words_text = shlex.split(v, comments=False)
    except ValueError:
        notes.append(Note("shell-syntax", ln, _("unbalanced quotes in {key}=").format(key=key), Severity.ERROR))
        return
    unknown: list[str] = []
    used: set[str] = set()
    words = _expand(_assign_lines(words_text, lines, line_nos), {n: x for n, x, _ in env.values()}, unknown, used)
    tmp_env: list[tuple[str, str, int]] = []
    idx = unwrap(words, tmp_env)[0]
    if idx < len(words) and is_server_call(words[idx].text, words[idx + 1:]):
        label = key if not where else _("{key}= in {file}").format(key=key, file=where)
        # a variable the command line expands is the unit's setting for systemd, not one for
        # llama-server to read (dead-env-var would have --fix remove it from Environment=)
        inv = Invocation(words[idx].text, words[idx + 1:], words[idx].line, line_nos[-1],
                         env=[x for x in [*env.values(), *tmp_env] if x[0] not in used], source="systemd", label=label,
                         wrappers=wrapper_words(words, idx), cwd=workdir_of(kept), written_here=not where)
        invocations.append(inv)
        k = len(invocations) - 1
        for name in dict.fromkeys(unknown):
            notes.append(Note("unknown-variable", ln,
                              _("`{name}` is not set by Environment= or an EnvironmentFile= here: systemd "
                                "expands it to nothing (`${{NAME}}`: an empty word; `$NAME`: no word at all; "
                                "systemd.service(5), {url})").format(
                                  name=name, url="https://www.freedesktop.org/software/systemd/man/"
                                  "latest/systemd.service.html#Command%20lines"), Severity.WARNING, k))
        if blank is not None and ignored:
            _cut(inv, k, key, blank, ignored, lines, notes)
    elif idx < len(words) and basename(words[idx].text) in ("killall", "pkill"):
        notes.append(Note("kill-by-name", ln, _("{key}= kills processes by name").format(key=key),
                          Severity.WARNING))


def workdir_of(entries: list[Entry]) -> str | None:
    """systemd.exec(5) WorkingDirectory= (the last one): a leading ``-`` only makes a missing
    directory no error."""
    return next((e[1].lstrip("-") or None for e in reversed(entries) if e[0] == "WorkingDirectory"), None)


_VAR_WORD_RE = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")
_BRACED_RE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(words: list[Word], values: dict[str, str], unknown: list[str], used: set[str]) -> list[Word]:
    """systemd.service(5) "Command lines" (https://www.freedesktop.org/software/systemd/man/latest/
    systemd.service.html#Command%20lines): ``${VAR}`` in a word is replaced by the value, whitespace
    and all, the word stays one argument; ``$VAR`` as a word of its own is replaced by the value
    split at whitespace (quotes respected, then removed): zero or more arguments; ``$$`` is a
    literal ``$``; an unset variable is empty. Specifiers: ``%%`` is a literal ``%`` (others kept)."""
    out: list[Word] = []
    for w in words:
        t = w.text.replace("%%", "%") if "%%" in w.text else w.text
        if "$" not in t:
            out.append(w if t == w.text else Word(t, w.line, written=w.text))
            continue
        m = _VAR_WORD_RE.match(t)
        if m:
            name = m.group(1)
            used.add(name)
            if name not in values:
                unknown.append("$" + name)
                continue
            try:
                parts = shlex.split(values[name])
            except ValueError:
                parts = values[name].split()
            out.extend(Word(p, w.line) for p in parts)
            continue

        def sub(mm: re.Match[str]) -> str:
            if mm.group(0) == "$$":
                return "$"
            used.add(mm.group(1))
            if mm.group(1) not in values:
                unknown.append("${" + mm.group(1) + "}")
            return values.get(mm.group(1), "")

        new = _BRACED_RE.sub(sub, t)
        out.append(Word(new, w.line, written=w.text if new != w.text else ""))  # --fix writes `${PORT}` back
    return out


def _cut(inv: Invocation, k: int, key: str, blank: int, ignored: list[tuple[str, list[int]]],
         raw: list[str], notes: list[Note]) -> None:
    """The lines after a blank line inside ``key=``'s continuation: cut off (``inv.orphans``)."""
    for text, nos in ignored:
        try:
            inv.orphans.extend(_assign_lines(shlex.split(text, comments=False), raw, nos))
        except ValueError:
            notes.append(Note("shell-syntax", nos[0], _("unbalanced quotes"), Severity.ERROR, k))
    inv.cut_line = blank
    first, last = ignored[0][1][0], ignored[-1][1][-1]
    n = len(inv.orphans)
    notes.append(Note(
        "continuation-broken", blank,
        _("the {key}= command started on line {start} is cut off at line {blank}: line {blank} is blank, and "
          "systemd skips only comment lines inside a `\\` continuation; an empty line is appended and ends it "
          "(src/shared/conf-parser.c config_parse). {n} word(s) after it are never passed to llama-server").format(
            key=key, start=inv.line, blank=blank, n=n), Severity.ERROR, k))
    notes.append(Note(
        "orphan-flags", first,
        _("systemd ignores line(s) {first}-{last} (\"Missing '=', ignoring line.\"): {n} word(s) never reach "
          "llama-server (started on line {start})").format(first=first, last=last, n=n, start=inv.line),
        Severity.ERROR, k))


def _assign_lines(words: list[str], raw: list[str], line_nos: list[int]) -> list[Word]:
    """Attach a line number to each word by finding it in the unit's physical lines, in order."""
    out: list[Word] = []
    li = 0
    pos = 0
    for w in words:
        probe = w.split()[0] if w.split() else w
        found = None
        for j in range(li, len(line_nos)):
            text = raw[line_nos[j] - 1]
            k = text.find(probe, pos if j == li else 0)
            if k >= 0:
                found = (j, k + len(probe))
                break
        if found:
            li, pos = found
            out.append(Word(w, line_nos[li]))
        else:
            out.append(Word(w, line_nos[min(li, len(line_nos) - 1)]))
    return out

