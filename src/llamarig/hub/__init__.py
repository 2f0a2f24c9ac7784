"""Model references that are not local files: ``hf:OWNER/REPO:QUANT``, ``OWNER/REPO:QUANT``,
``hf:OWNER/REPO/FILE.gguf``, ``ms:OWNER/REPO:QUANT`` (ModelScope) and ``https://…/file.gguf``.

Only the GGUF header is read, by HTTP range requests that grow until the tensor table is complete
(``hub.fetch``), and kept in a local cache keyed by the file's ETag (``hub.cache``), so a second
plan of the same file reads nothing. Hugging Face is reached through ``huggingface_hub``
(``HF_ENDPOINT`` mirrors, ``HF_TOKEN``, ``HF_HUB_OFFLINE``), ModelScope through ``modelscope_hub``
when it is installed. Which file a ``:QUANT`` names follows llama-server's ``-hf``
(common/download.cpp, ``hub.select``).
"""

from llamarig.hub.ref import ModelRef, is_remote, parse_ref

__all__ = ["ModelRef", "is_remote", "parse_ref"]
