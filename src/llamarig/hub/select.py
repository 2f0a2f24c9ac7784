"""Which files of a repo a reference names, the way llama-server's ``-hf`` chooses them
(common/download.cpp at build 11434: get_gguf_split_info :471, extract_quant_bits :502,
get_split_files :513, find_best_sibling :534, gguf_filename_is_model :626, find_best_model :644,
common_download_get_hf_plan :693)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)


@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int | None = None
    etag: str = ""  # the LFS sha256 or git blob id the hub lists for it ("" when unknown)


@dataclass(frozen=True)
class SplitInfo:
    prefix: str  # the tag included
    tag: str
    index: int
    count: int


def split_info(path: str) -> SplitInfo | None:
    """get_gguf_split_info (common/download.cpp:471): prefix, QUANT tag, part number and count."""
    if not path.endswith(".gguf"):
        return None
    prefix = path[: -len(".gguf")]
    index = count = 1
    m = _SPLIT.match(prefix)
    if m:
        prefix, index, count = m.group(1), int(m.group(2)), int(m.group(3))
    t = _TAG.search(prefix)
    return SplitInfo(prefix, t.group(1).upper() if t else "", index, count)


def quant_bits(path: str) -> int:
    """extract_quant_bits (common/download.cpp:502): Q4_K_M -> 4, F16 -> 16."""
    si = split_info(path)
    m = re.search(r"\d+", si.tag) if si else None
    return int(m.group(0)) if m else 0


def is_model_file(path: str) -> bool:
    """gguf_filename_is_model (common/download.cpp:626)."""
    if not path.endswith(".gguf"):
        return False
    name = path.rsplit("/", 1)[-1]
    return not any(k in name for k in ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"))


def best_model(files: Sequence[RepoFile], tag: str) -> RepoFile | None:
    """find_best_model (common/download.cpp:644): the first model file (first part of a split)
    whose name has ``TAG`` followed by '.' or '-'; without a tag Q4_K_M, then Q8_0, then the
    first model file."""
    for t in ([tag] if tag else ["Q4_K_M", "Q8_0"]):
        pattern = re.compile(re.escape(t) + r"[.-]", re.IGNORECASE)
        for f in files:
            if is_model_file(f.path) and pattern.search(f.path):
                si = split_info(f.path)
                if si and si.count > 1 and si.index != 1:
                    continue
                return f
    if not tag:
        for f in files:
            si = split_info(f.path)
            if is_model_file(f.path) and not (si and si.count > 1 and si.index != 1):
                return f
    return None


def split_parts(files: Sequence[RepoFile], primary: RepoFile) -> list[RepoFile]:
    """get_split_files (common/download.cpp:513): every part of the primary's split, in part order."""
    si = split_info(primary.path)
    if si is None or si.count <= 1:
        return [primary]
    parts = [f for f in files if (o := split_info(f.path)) and o.count == si.count and o.prefix == si.prefix]
    return sorted(parts, key=lambda f: split_info(f.path).index)  # type: ignore[union-attr]


def best_sibling(files: Sequence[RepoFile], model: str, keyword: str = "mmproj", tag: str = "") -> RepoFile | None:
    """find_best_sibling (common/download.cpp:534): the GGUF whose name contains ``keyword`` in
    the deepest directory shared with the model, then an exact tag, then the closest bits."""
    tag_u = tag.upper()
    if tag_u:
        m = re.search(r"\d+", tag_u)
        model_bits = int(m.group(0)) if m else 0
    else:
        model_bits = quant_bits(model)
    model_dir = model.split("/")[:-1]
    best: RepoFile | None = None
    best_depth, best_diff, best_exact = 0, 0, False
    for f in files:
        if not f.path.endswith(".gguf") or keyword not in f.path:
            continue
        sib_dir = f.path.split("/")[:-1]
        depth = 0
        while depth < min(len(model_dir), len(sib_dir)) and model_dir[depth] == sib_dir[depth]:
            depth += 1
        if depth != len(sib_dir):  # std::mismatch must reach the end of the sibling's directory
            continue
        diff = abs(quant_bits(f.path) - model_bits)
        exact = bool(tag_u) and f"-{tag_u}." in f.path.upper()
        if (best is None or depth > best_depth or (depth == best_depth and exact and not best_exact)
                or (depth == best_depth and exact == best_exact and diff < best_diff)):
            best, best_depth, best_diff, best_exact = f, depth, diff, exact
    return best


def quants(files: Sequence[RepoFile]) -> list[tuple[str, list[RepoFile]]]:
    """The model files of a repo grouped by QUANT tag (splits as one), in listing order."""
    out: dict[str, list[RepoFile]] = {}
    for f in files:
        if not is_model_file(f.path):
            continue
        si = split_info(f.path)
        if si is None or (si.count > 1 and si.index != 1):
            continue
        key = si.tag or f.path
        if key in out:
            key = f.path  # two files with one tag (e.g. in two folders): list both by path
        out[key] = split_parts(files, f)
    return list(out.items())
