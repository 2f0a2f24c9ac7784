"""Text in terminal cells, for every language: the one line-breaking rule of llamarig.

:func:`wrap` breaks text at a width in terminal cells (a Chinese character takes two): at
blanks, and between Chinese characters, never inside an English word, a flag, a number or a
`code span`; no line starts with a closing mark (，。）…) or ends with an opening one (（“). A
path or URL wider than the line stays whole on its own line; another token wider than the line
is broken after ``/`` or ``,`` (a list), only then by cells. :func:`shorten_middle` shortens a
path from the middle. The terminal's tables and blocks are built on these; the library
uses them for text it writes into files (render's and check --fix's comments).
"""

from __future__ import annotations

import re
import unicodedata

from rich.cells import cell_len

#: may not begin a line (closing marks and sentence punctuation, both widths)
NO_START = frozenset("，。、；：！？）」』》】〉〕…—％,.;:!?)]}%”’·～")
#: may not end a line (opening marks)
NO_END = frozenset("（「『《【〈〔([{“‘")
#: where a token wider than the line may be broken, best first (after the character)
SOFT_BREAKS = ("/", ",", ";", "=", ":", "|", "-", "_", ".")


def cells(text: str) -> int:
    """The width of ``text`` in terminal cells."""
    return cell_len(text)


def is_wide(ch: str) -> bool:
    """A character that takes two cells (Chinese, full-width punctuation)."""
    return unicodedata.east_asian_width(ch) in ("W", "F")


def has_wide(text: str) -> bool:
    return any(is_wide(c) for c in text)


_TOKEN = re.compile(r"\s+|[^\s]")


def _atoms(text: str) -> list[tuple[int, int]]:
    """(start, end) of the unbreakable pieces of ``text`` and of its blank runs: a run of
    non-blank narrow characters is one piece (a word, a flag, a number, a path), each wide
    character is one; closing marks join the piece before them, opening marks the one after."""
    pieces: list[list[int]] = []
    kinds: list[str] = []  # "s" blank, "w" wide, "n" narrow run
    for m in _TOKEN.finditer(text):
        ch = m.group()
        kind = "s" if ch[0].isspace() else ("w" if is_wide(ch) else "n")
        if kind == "n" and kinds and kinds[-1] == "n":
            pieces[-1][1] = m.end()
            continue
        pieces.append([m.start(), m.end()])
        kinds.append(kind)
    out: list[list[int]] = []
    out_kinds: list[str] = []
    glue_next = False
    for (s, e), kind in zip(pieces, kinds, strict=True):
        first = text[s]
        joins_prev = out and out_kinds[-1] != "s" and kind != "s" and (first in NO_START or glue_next)
        if joins_prev:
            out[-1][1] = e
        else:
            out.append([s, e])
            out_kinds.append(kind)
        glue_next = kind != "s" and text[e - 1] in NO_END
    return [(s, e) for s, e in out]


def _split_long(text: str, width: int) -> list[str]:
    """A token wider than ``width`` in pieces of at most ``width`` cells, broken after a
    separator where there is one (a path after ``/``, a list after ``,``), else by cells."""
    out: list[str] = []
    rest = text
    while cells(rest) > width:
        fit = 0
        used = 0
        for i, ch in enumerate(rest):
            used += cells(ch)
            if used > width:
                break
            fit = i + 1
        fit = max(fit, 1)
        cut = fit
        for sep in SOFT_BREAKS:
            k = rest.rfind(sep, 0, fit)
            if k >= fit // 3:
                cut = k + 1
                break
        out.append(rest[:cut])
        rest = rest[cut:]
    if rest:
        out.append(rest)
    return out


def _split_kept(text: str, first: int, width: int) -> list[str]:
    """A `code span` wider than the line in lines broken at its blanks (each piece keeps its
    trailing blank; a word wider than the line on its own is cut by :func:`_split_long`)."""
    words = re.findall(KEEP + r"*[^" + KEEP + r"]+" + KEEP + "*", text) or [text]
    out: list[str] = []
    line, limit = "", first
    for w in words:
        if line and cells(line + w.rstrip(KEEP)) > limit:
            out.append(line)
            line, limit = "", width
        if not line and cells(w.rstrip(KEEP)) > limit:
            pieces = _split_long(w, limit)
            out += pieces[:-1]
            line, limit = pieces[-1], width
            continue
        line += w
    if line:
        out.append(line)
    return out


#: a path or a URL: one token with a slash (kept whole when it is wider than the line)
_PATH = re.compile(r"[（(“'\"`]?(?:https?://|\.{0,2}/|~/)?[\w.@%+=:~-]*/[\w./@%+=:~#?&-]*[)”'\"`]?")

#: a blank that does not break (one cell wide, like a blank; see :func:`keep_together`)
KEEP = "\ue000"
_CODE = re.compile(r"`[^`\n]+`")


#: two short values around a slash ("K / V", "f16 / f16", "2048 / 512"): never on two lines
_PAIR = re.compile(r"(?<!\S)[\w.-]{1,12} / [\w.-]{1,12}(?!\S)")

#: a number and its unit ("319.79 MiB", "40 tok/s"): never on two lines
_QUANTITY = re.compile(r"(?<![\w.])\d[\d.,]* (?:[KMGT]i?B|B|GB/s|TB/s|tok/s|ms|s|%|token|tokens|TFLOPS|TOPS|Gbps|MHz|W)(?![\w/])")


def keep_together(text: str, groups: re.Pattern[str] | str = _CODE) -> str:
    """``text`` with the blanks inside each match of ``groups`` (default: a `code span`) made
    unbreakable: :data:`KEEP`, the same length, so offsets into it are offsets into ``text``."""
    return re.sub(groups, lambda m: m.group(0).replace(" ", KEEP), text)


def line_spans(text: str, width: int, first: int | None = None) -> list[tuple[int, int]]:
    """(start, end) of each line of one paragraph (no newlines) wrapped at ``width`` cells
    (``first``: the first line's width when it differs). Blanks at a break are dropped; a
    `code span` is not broken at its blanks."""
    text = keep_together(keep_together(keep_together(text), _QUANTITY), _PAIR)
    width = max(1, width)
    limit = max(1, first if first is not None else width)
    spans: list[tuple[int, int]] = []
    start: int | None = None
    end = 0
    used = 0
    for s, e in _atoms(text):
        piece = text[s:e]
        if piece.isspace():
            if start is not None:
                used += cells(piece)
            continue
        w = cells(piece)
        if start is not None and used + w <= limit:
            end, used = e, used + w
            continue
        if start is not None:
            spans.append((start, end))
            limit = width
        if w <= limit:
            start, end, used = s, e, w
            continue
        if _PATH.fullmatch(piece.rstrip("，。；：）,.;:)")):
            # a path or URL wider than the line: alone on its line, whole (copied as it is; a
            # table cell shortens it from the middle instead)
            start, end, used = s, e, limit
            continue
        # wider than a line on its own: a `code span` at its blanks, else in pieces (after / or ,
        # where possible)
        pos = s
        parts = _split_kept(piece, limit, width) if KEEP in piece else _split_long(piece, limit)
        for part in parts[:-1]:
            spans.append((pos, pos + len(part)))
            pos += len(part)
            limit = width
        start, end, used = pos, e, cells(parts[-1])
    if start is not None:
        spans.append((start, end))
    return spans or [(0, 0)]


def wrap(text: str, width: int, indent: str = "", first_indent: str | None = None) -> list[str]:
    """``text`` in lines of at most ``width`` cells (newlines kept): the first line starts with
    ``first_indent`` (default ``indent``), the others with ``indent``."""
    lead = indent if first_indent is None else first_indent
    out: list[str] = []
    for para in text.split("\n"):
        p_first = lead if not out else indent
        for i, (s, e) in enumerate(line_spans(para, width - cells(indent), width - cells(p_first))):
            out.append(hang(p_first if i == 0 else indent, para[s:e], width) + para[s:e])
    return out


def hang(indent: str, line: str, width: int) -> str:
    """The indent of a wrapped line: none for a line (a long path or URL on its own) that fits
    the width only without it."""
    return "" if indent and cells(indent + line) > width >= cells(line) else indent


def command_lines(line: str, width: int) -> list[str]:
    """A verbatim line (an example command) as it is when it fits ``width``, else broken at
    blanks into shell continuation lines (`` \\``, the next indented by four): a flag keeps its
    value on its line, a ``<placeholder with blanks>`` stays whole."""
    if cells(line) <= width:
        return [line]
    lead = line[:len(line) - len(line.lstrip())]
    words = line.split()
    joined: list[str] = []
    for w in words:  # a flag and its value stay on one line
        if joined and joined[-1].startswith("-") and " " not in joined[-1] and not w.startswith("-"):
            joined[-1] += KEEP + w
        else:
            joined.append(w)
    out = wrap(keep_together(" ".join(joined), r"<[^<>]*>"), width - 2, indent=lead + "    ", first_indent=lead)
    return [ln.replace(KEEP, " ") + " \\" for ln in out[:-1]] + [out[-1].replace(KEEP, " ")]


def shorten_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, the middle replaced by "…" (a path keeps its
    file name: ``/data/models/…/Qwen3.6-27B-IQ4_NL.gguf``)."""
    if cells(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    room = width - 1
    head_room = max(1, room // 3)
    tail = _take_cells(text[::-1], room - head_room)[::-1]
    slash = tail.find("/")
    if 0 < slash < len(tail) // 2:  # start the tail at a directory boundary
        tail = tail[slash:]
    head = _take_cells(text, room - cells(tail))
    return head + "…" + tail


def _take_cells(text: str, width: int) -> str:
    used = 0
    for i, ch in enumerate(text):
        used += cells(ch)
        if used > width:
            return text[:i]
    return text
