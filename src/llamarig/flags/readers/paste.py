"""A shell script pasted out of a chat, read as a person reads it.

Chat windows render a script as text: comment lines lose their ``#`` (the prose stands as a
command bash would run), a code block leaves its label (``bash``, ``运行``, ``plaintext``) or
its fences (```` ``` ````), lists add bullets and numbers, and typography turns quotes into
smart quotes, ``--`` into a dash, blanks into full-width spaces. :func:`scan` names each such
line (a :class:`~llamarig.flags.parsed.LineNote`) and writes the text as it was meant, line for
line: prose as comments, labels and fences dropped, markers and typography undone. The lines
of the text keep their numbers, so what is read from the repaired text is located in the text
as written. One pass over the text: the cost is linear in its size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from llamarig.flags.parsed import LineNote
from llamarig.flags.readers.bash_lexer import Lexer
from llamarig.flags.readers.common import is_server_program
from llamarig.i18n import N_, _

__all__ = ["Repaired", "scan"]

# ideographs, kana, hangul, CJK punctuation (not the full-width forms a command may hold by
# mistake: those are repaired), arrows, box drawing, dingbats, emoji: a word with one of these
# is prose, not a shell word
_PROSE_CHARS = (
    "\u2190-\u21ff\u2460-\u24ff\u2500-\u27bf\u2e80-\u2fff\u3001-\u303f\u3040-\u30ff\u3100-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff01\uff08\uff09\uff1b\uff1f"
    "\U0001f300-\U0001faff")
_PROSE_RE = re.compile(f"[{_PROSE_CHARS}]")
#: characters a command may hold by mistake, and what was meant; each kind is named apart
_WIDE = {"\u3000": " ", "\u00a0": " ", "\u2009": " ", "\u202f": " ", "\u200b": "", "\ufeff": "",
         "\uff02": '"', "\uff07": "'", "\uff0c": ",", "\uff0d": "-", "\uff1d": "=", "\uff1a": ":"}
_QUOTES = {"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"', "\u00ab": '"',
           "\u00bb": '"', "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'"}
_EM_DASHES = "\u2014\u2015"  # what `--` becomes
_DASHES = "\u2010\u2011\u2012\u2013\u2212\ufe63"  # what `-` (or `--`) becomes
_SPECIAL_RE = re.compile("[" + "".join(_WIDE) + "".join(_QUOTES) + _EM_DASHES + _DASHES + "]")
_BLANKS = " \t\u3000\u00a0"

_FENCE_RE = re.compile(r"^\s*(```|~~~)[\w+.#-]*\s*$")
#: a code block's label as chat windows print it above the code, alone on its line
_LABELS = frozenset({
    "bash", "sh", "shell", "zsh", "console", "terminal", "plaintext", "plain text", "text", "code",
    "copy", "copy code", "run", "运行", "复制", "复制代码", "代码", "命令", "终端", "bash 运行",
})
_MARKER_RE = re.compile(r"^(?P<bullet>[-*•·‣▪●○◦+])[ \t\u3000]+(?=\S)"
                        r"|^(?P<number>\(?\d{1,3}[.)、．]\)?)[ \t\u3000]*(?=\S)"
                        r"|^(?P<prompt>\$)[ \t]+(?=\S)")
_ASSIGN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
#: commands a line of a launch script starts with, so that a line like `echo 启动完成` is not prose
_PROGRAMS = frozenset({
    "echo", "printf", "cd", "pushd", "popd", "export", "unset", "set", "source", ".", "sleep", "wait",
    "kill", "killall", "pkill", "nohup", "sudo", "env", "exec", "time", "command", "taskset", "numactl",
    "stdbuf", "nice", "ionice", "timeout", "if", "then", "else", "elif", "fi", "for", "while", "do",
    "done", "case", "esac", "function", "local", "declare", "readonly", "return", "exit", "trap", "true",
    "false", "test", "[", "[[", "{", "}", "docker", "podman", "python", "python3", "pip", "pip3", "conda",
    "uv", "curl", "wget", "git", "ls", "cat", "tail", "head", "grep", "mkdir", "rm", "cp", "mv", "chmod",
    "chown", "ln", "tee", "nvidia-smi", "nvtop", "systemctl", "journalctl", "ulimit", "tmux", "screen",
    "watch", "bash", "sh", "ftllm", "vllm", "ollama", "lms", "sglang", "huggingface-cli", "hf",
    "modelscope", "apt", "apt-get", "yum", "dnf", "brew", "make", "cmake", "llama-cli", "llama-bench",
    "llama-quantize", "ssh", "scp", "rsync", "tar", "unzip", "ps", "top", "htop", "free", "df", "du",
})


@dataclass
class Repaired:
    """The text as meant (line for line), the notes on the lines that were not, and the lines the
    meant text leaves out (fence labels)."""

    lines: list[str]
    notes: list[LineNote] = field(default_factory=list)
    dropped: set[int] = field(default_factory=set)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def scan(text: str) -> Repaired:
    """Every garbled line of a shell text, named, and the text as meant."""
    lines = text.split("\n")
    out = Repaired(list(lines))
    fences = {i for i, ln in enumerate(lines) if _FENCE_RE.match(ln)}
    # the text with its fences blanked, lexed once: here-document bodies and lines inside a
    # quoted word are not lines of commands
    lex = Lexer("\n".join("" if i in fences else ln for i, ln in enumerate(lines)))
    tokens = lex.run()
    skip = {k for a, b in lex.heredoc_spans for k in range(a, b + 1)}
    inside: dict[int, int] = {}  # line -> the line its quoted word starts on
    for tok in tokens:
        if tok.kind == "word" and "\n" in lex.s[tok.start:tok.end]:
            for k in range(tok.line + 1, tok.line + lex.s.count("\n", tok.start, tok.end) + 1):
                inside.setdefault(k, tok.line)
    prose: set[int] = set()
    for i, ln in enumerate(lines):
        n = i + 1
        if i in fences:
            _note(out, n, "paste-fence", ln, None, "")
            continue
        if n in skip or (n in inside and inside[n] not in prose):
            continue
        if _line(out, n, ln):
            prose.add(n)
    return out


def _note(out: Repaired, n: int, kind: str, text: str, repaired: str | None, comment: str) -> None:
    out.notes.append(LineNote(n, kind, text, _message(kind, n, text, repaired), repaired, comment))
    if repaired is None:
        out.dropped.add(n)
        out.lines[n - 1] = ""
    else:
        out.lines[n - 1] = repaired


def _line(out: Repaired, n: int, text: str) -> bool:
    """Name and repair line ``n``; whether it is prose."""
    stripped = text.strip(_BLANKS)
    if not stripped or stripped.startswith("#"):
        return False
    indent = text[: len(text) - len(text.lstrip(_BLANKS))]
    if stripped.lower() in _LABELS:
        _note(out, n, "paste-fence", text, None, "")
        return False
    body = text[len(indent):]
    m = _MARKER_RE.match(body)
    rest = body[m.end():] if m else body
    if _is_prose(rest):
        _note(out, n, "paste-prose", text, indent + "# " + body, "")
        return True
    kinds: list[str] = []
    if m is not None:
        kinds.append("paste-bullet" if m.group("bullet") else "paste-numbered" if m.group("number")
                     else "paste-prompt")
    more, rest, comment = _tails(rest)
    kinds += more
    more, rest = _typography(rest)
    kinds += more
    for kind in kinds:
        _note(out, n, kind, text, indent + rest, comment)
    return False


def _tails(body: str) -> tuple[list[str], str, str]:
    """Prose after the flags of a line, and a ``\\ # comment`` ending it: the kinds found, the
    line without them, and the text moved off the line (--fix writes it above the command)."""
    kinds: list[str] = []
    comment = ""
    p = _prose_from(body) if body.startswith("-") else None
    if p is not None:
        kinds.append("paste-prose-tail")
        tail = body[p:].rstrip()
        goes_on = tail.endswith("\\")
        comment = tail.removesuffix("\\").rstrip()
        body = body[:p].rstrip() + (" \\" if goes_on else "")
    m = re.search(r"(?<=\s)\\[ \t]+#(.*)$", body)
    if m is not None and _unquoted(body, m.start()):
        kinds.append("comment-after-backslash")
        comment = m.group(1).strip()
        body = body[:m.start()] + "\\"
    return kinds, body, comment


def _is_prose(body: str) -> bool:
    """A line a person wrote as prose, not as a command: its first word is not a shell word
    (CJK text, arrows...), or it holds unquoted CJK text after a first word that is no
    command, or it reads as an English sentence ending in ``:``/``.``."""
    words = [w for w in re.split(f"[{_BLANKS}]+", body.strip(_BLANKS)) if w]
    if not words:
        return False
    first = words[0]
    if _PROSE_RE.search(first):
        return True
    if first.startswith(("-", "#")) or _known(first):
        return False
    if _PROSE_RE.search(_unquoted_text(body)):
        return True
    return _english(words, body)


def _known(word: str) -> bool:
    return (word in _PROGRAMS or word.startswith(("/", "./", "../", "~", "$", "\"", "'"))
            or _ASSIGN_RE.match(word) is not None or is_server_program(word))


def _english(words: list[str], body: str) -> bool:
    """An English sentence: a capitalised first word, no option, path, variable or shell
    operator, ending like a sentence (``Start the server:``)."""
    end = body.rstrip()[-1:]
    if not re.fullmatch(r"[A-Z][A-Za-z'’]*[,:]?", words[0]) or re.search(r"[=|&;<>`$\\]", body):
        return False
    if any(w.startswith(("-", "/", "./", "~")) for w in words):
        return False
    return (len(words) >= 2 and end in ":：") or (len(words) >= 3 and end in ".!?。")


def _unquoted_text(body: str) -> str:
    """The part of ``body`` outside ASCII quotes and before an unquoted comment."""
    out: list[str] = []
    quote = ""
    prev = " "
    for c in body:
        if quote:
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c == "#" and prev in _BLANKS:
            break
        else:
            out.append(c)
        prev = c
    return "".join(out)


def _unquoted(body: str, pos: int) -> bool:
    """Whether offset ``pos`` of ``body`` is outside ASCII quotes."""
    quote = ""
    for c in body[:pos]:
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
    return not quote


def _prose_from(body: str) -> int | None:
    """Where prose starts on a line of flags: the first unquoted word with CJK text, before any
    comment; None when there is none."""
    quote = ""
    start = 0
    prev = " "
    for i, c in enumerate(body):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in _BLANKS:
            start = i + 1
        elif c == "#" and prev in _BLANKS:
            return None
        elif _PROSE_RE.match(c):
            return start
        prev = c
    return None


def _typography(body: str) -> tuple[list[str], str]:
    """Full-width characters, smart quotes and typographic dashes outside ASCII quotes and
    before a comment, undone; the kinds found."""
    if not _SPECIAL_RE.search(body):
        return [], body
    kinds: list[str] = []
    out: list[str] = []
    quote = ""
    prev = " "
    for i, c in enumerate(body):
        if not quote and c == "#" and prev in " \t":
            out.append(body[i:])
            break
        rep, kind = _plain(c, prev, body[i + 1:i + 3])
        if kind and kind not in kinds:
            kinds.append(kind)
        for r in rep:
            if quote:
                quote = "" if r == quote else quote
            elif r in "'\"":
                quote = r
        out.append(rep)
        prev = c
    return kinds, "".join(out)


def _plain(c: str, prev: str, after: str) -> tuple[str, str]:
    """What a typographic character ``c`` stood for, and the kind of note it is."""
    if c in _WIDE:
        return _WIDE[c], "paste-fullwidth"
    if c in _QUOTES:
        return _QUOTES[c], "paste-quotes"
    at_word = prev in _BLANKS or prev == "="
    if c in _EM_DASHES and at_word:
        return "--", "paste-dash"
    if c in _DASHES and at_word:
        # `–ctx-size` was `--ctx-size`; `–c`, `−1` were `-c`, `-1`
        short = after[:1].isdigit() or (after[:1].isalpha() and (len(after) < 2 or after[1] in " \t"))
        return ("-" if short else "--"), "paste-dash"
    return c, ""


def _message(kind: str, n: int, text: str, repaired: str | None) -> str:
    """What bash does with line ``n`` and what was meant."""
    words = text.split()
    word = words[0] if words else ""
    shown = text.strip() if len(text.strip()) <= 40 else text.strip()[:39] + "…"
    if kind == "paste-prose":
        return _("line {line} is prose that lost its `#`: bash runs `{word}` as a command (\"command not "
                 "found\"); it was meant as a comment").format(line=n, word=word)
    if kind == "paste-fence":
        return _("line {line} `{text}` is what the chat left of a code block (its label or fence), not a "
                 "command: bash would run it").format(line=n, text=shown)
    if kind in ("paste-bullet", "paste-numbered", "paste-prompt"):
        what = {"paste-bullet": _("the list bullet"), "paste-numbered": _("the list number"),
                "paste-prompt": _("the shell prompt")}[kind]
        return _("line {line} starts with {what} `{marker}`: bash runs `{marker}` as the command, not `{meant}`").format(
            line=n, what=what, marker=word, meant=(repaired or "").split()[0] if (repaired or "").split() else "")
    return _(_TYPO_MESSAGES[kind]).format(line=n, text=shown)


#: what bash does with a line of each kind of typography, and what was meant
_TYPO_MESSAGES = {
    "paste-fullwidth": N_("line {line} has full-width characters where the shell needs ASCII (\"{text}\"): bash "
                          "does not read `　` as a blank nor `－` as `-`, so llama-server gets other words"),
    "paste-quotes": N_("line {line} has smart quotes (“ ” ‘ ’: \"{text}\"): to bash they are ordinary characters "
                       "that quote nothing, and they reach the command inside its arguments"),
    "paste-dash": N_("line {line} has a typographic dash (— or –) where `--` or `-` was meant (\"{text}\"): no "
                     "program knows such an option"),
    "paste-prose-tail": N_("line {line} has prose after its flags (\"{text}\"): bash passes its words to the "
                           "command as arguments; it was meant as a comment"),
    "comment-after-backslash": N_("line {line} ends with `\\ # …` (\"{text}\"): `\\ ` is an escaped blank, so ` #` "
                                  "and the comment's words are arguments of the command, and since the line does not "
                                  "end with `\\` the newline ends the command; a comment cannot follow a continuation"),
}
