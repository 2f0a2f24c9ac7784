"""Compose file interpolation, as the compose specification defines it
(https://github.com/compose-spec/compose-spec/blob/main/spec.md#interpolation): ``$VAR`` and
``${VAR}`` are the variable's value; ``${VAR:-default}`` the default when VAR is unset or empty,
``${VAR-default}`` only when unset; ``${VAR:+alt}`` / ``${VAR+alt}`` the alternative when set
(and non-empty); ``${VAR:?err}`` / ``${VAR?err}`` an error when unset (or empty); defaults may
themselves hold ``${...}``; ``$$`` is a literal ``$``. The values come from the ``.env`` file next
to the compose file (the shell that runs ``docker compose`` may set more: what is not in
``.env`` is reported). Applied to a Located string, every character keeps its line: a
substituted value gets the line of the ``$`` it replaces.

``read_env_file`` reads ``NAME=value`` files: compose's ``.env`` and systemd's
``EnvironmentFile=`` (comments, ``export``, quotes removed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from llamarig.flags.readers.located import Located, LocatedBuilder

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACED_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-+?])(.*))?", re.S)


@dataclass
class Missing:
    """A variable the interpolation needed and did not have."""

    name: str
    line: int
    required: str | None = None  # `${VAR:?message}`: docker compose refuses the file
    invalid: bool = False  # `${...}` that is not an interpolation compose accepts


@dataclass
class Interpolation:
    env: dict[str, str]
    missing: list[Missing] = field(default_factory=list)

    def text(self, s: str, line: int) -> str:
        """``s`` interpolated (every substitution on ``line``)."""
        return self.located(Located.at(s, line)).text if "$" in s else s

    def located(self, loc: Located) -> Located:
        s = loc.text
        if "$" not in s:
            return loc
        b = LocatedBuilder()
        i = 0
        n = len(s)
        while i < n:
            k = s.find("$", i)
            if k < 0:
                b.add(loc, i, n)
                break
            b.add(loc, i, k)
            line = loc.line_at(k)
            value, end = self._one(s, k, line)
            b.add_text(value, line)
            i = end
        return b.build()

    def _one(self, s: str, k: int, line: int) -> tuple[str, int]:
        """The value of the reference at ``s[k] == "$"`` and where it ends."""
        if s.startswith("$$", k):
            return "$", k + 2
        if s.startswith("${", k):
            depth, j = 1, k + 2
            while j < len(s) and depth:
                if s.startswith("${", j):
                    depth += 1
                    j += 2
                    continue
                if s[j] == "}":
                    depth -= 1
                j += 1
            if depth:
                self.missing.append(Missing(s[k:k + 20], line, invalid=True))
                return s[k:], len(s)
            return self._braced(s[k + 2:j - 1], s[k:j], line), j
        m = _NAME_RE.match(s, k + 1)
        if m:
            return self._value(m.group(0), line), m.end()
        return "$", k + 1

    def _value(self, name: str, line: int) -> str:
        v = self.env.get(name)
        if v is None:
            self.missing.append(Missing(name, line))
            return ""
        return v

    def _braced(self, inner: str, written: str, line: int) -> str:
        m = _BRACED_RE.fullmatch(inner)
        if not m:
            self.missing.append(Missing(written, line, invalid=True))
            return written
        name, op, word = m.group(1), m.group(2), m.group(3) or ""
        if op is None:
            return self._value(name, line)
        v = self.env.get(name)
        present = v is not None and (v != "" or not op.startswith(":"))
        if op.endswith("-"):
            return v if present and v is not None else self.text(word, line)
        if op.endswith("+"):
            return self.text(word, line) if present else ""
        if not present or v is None:  # `?`
            self.missing.append(Missing(name, line, required=self.text(word, line) or "required"))
            return ""
        return v


def read_env_file(text: str) -> list[tuple[str, str, int]]:
    """``NAME=value`` lines (each with its line): blank and ``#`` lines skipped, an ``export``
    prefix dropped, one pair of surrounding quotes removed, an unquoted value cut at `` #``."""
    out = []
    for k, raw in enumerate(text.split("\n"), 1):
        t = raw.strip()
        if not t or t[0] in "#;":
            continue
        t = t.removeprefix("export ").strip()
        name, sep, v = t.partition("=")
        name = name.strip()
        if not sep or not _NAME_RE.fullmatch(name):
            continue
        v = v.strip()
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
            v = v[1:-1]
        elif " #" in v:
            v = v.split(" #", 1)[0].rstrip()
        out.append((name, v, k))
    return out
