"""When a flag came and went: every spelling's presence across the bundled schemas.

The bundled schemas (``llamarig/data/schemas/llama-server-<build>.json``) are samples of
llama.cpp's history: build 11434 (the pinned build, read from the real binary) and older builds
read from the real binary or derived from their ``common/arg.cpp`` (llamarig.flags.from_source).
A spelling the user's build rejects but another bundled build accepts was either removed after
the last build that has it, or added after the user's build. Because the builds are samples, the
change is placed *between* two bundled builds, never at an exact build.

Loaded lazily: only a flag the user's build rejects pays for reading the other schemas.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from llamarig.flags.schema import Schema, bundled_builds, load_bundled
from llamarig.i18n import _


@dataclass(frozen=True)
class FlagHistory:
    """The bundled builds that accept ``spelling`` (sorted), out of all bundled builds."""

    spelling: str
    builds: tuple[int, ...]
    sampled: tuple[int, ...]

    def note(self, current: int | None) -> str | None:
        """One sentence on when the flag existed, relative to the user's build, or None when no
        bundled build knows it."""
        if not self.builds:
            return None
        have = self.builds
        if current is None:
            return _("bundled builds {builds} accept `{flag}`; this build does not").format(
                builds=_span(have), flag=self.spelling)
        older = [b for b in have if b < current]
        newer = [b for b in have if b > current]
        if older:
            last = older[-1]
            gone = next((b for b in self.sampled if b > last and b not in have), None)
            where = (_("between builds {a} and {b}").format(a=last, b=gone) if gone is not None and gone <= current
                     else _("after build {a}").format(a=last))
            return _("removed from llama-server {where} (bundled builds {builds} accept it; this is build "
                     "{current})").format(where=where, builds=_span(older), current=current)
        first = newer[0]
        before = [b for b in self.sampled if b < first]
        since = (_("between builds {a} and {b}").format(a=before[-1], b=first) if before and before[-1] >= current
                 else _("by build {a}").format(a=first))
        return _("added to llama-server {since}, newer than this build {current}: upgrade llama-server to use "
                 "it, or drop it").format(since=since, current=current)


def _span(builds: list[int] | tuple[int, ...]) -> str:
    return str(builds[0]) if len(builds) == 1 else f"{builds[0]}–{builds[-1]}"


@lru_cache(maxsize=1)
def _index() -> tuple[dict[str, tuple[int, ...]], tuple[int, ...]]:
    builds = tuple(bundled_builds())
    where: dict[str, list[int]] = {}
    for b in builds:
        s = load_bundled(b)
        if s.build != b:
            continue
        for sp in s.by_spelling:
            where.setdefault(sp, []).append(b)
    return {k: tuple(v) for k, v in where.items()}, builds


def flag_history(spelling: str) -> FlagHistory:
    key = spelling.replace("_", "-") if spelling.startswith("--") else spelling
    where, builds = _index()
    return FlagHistory(key, where.get(key, ()), builds)


def history_note(schema: Schema, spelling: str) -> str | None:
    """Why ``schema`` lacks a spelling that other bundled builds have (None: no build has it)."""
    return flag_history(spelling).note(schema.build)
