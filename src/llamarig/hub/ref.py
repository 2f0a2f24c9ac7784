"""Parsing a model reference: which hub, repo, revision, quant or file, or which URL."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from llamarig.errors import RemoteError
from llamarig.i18n import _

Hub = Literal["hf", "ms", "url"]

#: a Hugging Face / ModelScope repo id: OWNER/NAME (huggingface_hub validate_repo_id's characters)
_REPO = r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*"
#: OWNER/REPO[@REVISION][:QUANT] or OWNER/REPO[@REVISION]/PATH/FILE.gguf
_REF_RE = re.compile(
    rf"^(?P<repo>{_REPO})(?:@(?P<rev>[A-Za-z0-9._/-]+?))?"
    r"(?:(?::(?P<quant>[A-Za-z0-9_.-]+))|(?:/(?P<file>[^:]+\.gguf)))?$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ModelRef:
    """A model that lives on a hub or behind a URL."""

    hub: Hub
    repo: str = ""  # OWNER/NAME
    quant: str = ""  # the :QUANT tag ("" = llama-server's default choice)
    file: str = ""  # a file path inside the repo
    revision: str = ""  # a branch, tag or commit ("" = the hub's default branch)
    url: str = ""  # for hub == "url"
    text: str = ""  # as the user wrote it

    @property
    def hf_repo_arg(self) -> str:
        """The value of llama-server's ``-hf`` for this reference (``OWNER/REPO[:QUANT]``)."""
        return f"{self.repo}:{self.quant}" if self.quant else self.repo


def is_remote(text: str) -> bool:
    """Whether ``text`` is written as a remote reference (not whether it exists)."""
    t = text.strip()
    if t.startswith(("hf:", "ms:", "http://", "https://")):
        return True
    # the bare -hf spelling needs its :QUANT, so that a relative path like models/x is not taken
    m = _REF_RE.match(t)
    return bool(m and m.group("quant") and not t.lower().endswith(".gguf"))


def parse_ref(text: str) -> ModelRef:
    """Parse a remote model reference; RemoteError (exit 2) when it is malformed."""
    t = text.strip()
    if t.startswith(("http://", "https://")):
        if not t.split("?")[0].lower().endswith(".gguf"):
            raise RemoteError(_("{ref}: a model URL must name a .gguf file").format(ref=t))
        return ModelRef("url", url=t, text=t)
    hub: Hub = "hf"
    body = t
    if t.startswith(("hf:", "ms:")):
        hub = "hf" if t.startswith("hf:") else "ms"
        body = t[3:].lstrip("/")
    m = _REF_RE.match(body)
    if not m:
        raise RemoteError(_("{ref}: expected hf:OWNER/REPO[:QUANT], hf:OWNER/REPO/FILE.gguf, "
                            "ms:OWNER/REPO[:QUANT] or an https://…/FILE.gguf URL").format(ref=t))
    return ModelRef(hub, repo=m.group("repo"), quant=(m.group("quant") or "").upper(),
                    file=m.group("file") or "", revision=m.group("rev") or "", text=t)
