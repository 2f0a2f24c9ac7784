"""From a reference to a ModelSpec: list the repo (huggingface_hub / modelscope_hub), choose the
files as llama-server's ``-hf`` does (hub.select), read each part's header (hub.fetch)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

from llamarig.errors import NetworkError, RemoteError, one_line
from llamarig.extras import needed
from llamarig.gguf.reader import GGUFHeader
from llamarig.gguf.spec import ModelSpec, RemoteRead, spec_from_headers
from llamarig.hub import fetch
from llamarig.hub.ref import ModelRef, parse_ref
from llamarig.hub.select import RepoFile, best_model, best_sibling, quants, split_info, split_parts
from llamarig.i18n import _

with needed("hub"):
    import httpx2
    from huggingface_hub import HfApi, constants, hf_hub_url
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.utils import _headers


@dataclass(frozen=True)
class Listing:
    """A repo's files at one commit."""

    hub: str
    endpoint: str
    repo: str
    commit: str
    files: tuple[RepoFile, ...]
    from_cache: bool = False


def offline() -> bool:
    """huggingface_hub's offline switch (HF_HUB_OFFLINE, read when asked, not at import)."""
    v = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return v.upper() in ("1", "ON", "YES", "TRUE")


def hf_endpoint() -> str:
    """The Hugging Face endpoint: ``$HF_ENDPOINT`` (a mirror such as https://hf-mirror.com) or
    huggingface_hub's default."""
    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def ms_endpoint() -> str:
    """The ModelScope endpoint: ``$MODELSCOPE_ENDPOINT`` (or the older ``$MODELSCOPE_DOMAIN``),
    else https://www.modelscope.cn (modelscope_hub's default)."""
    ep = os.environ.get("MODELSCOPE_ENDPOINT") or os.environ.get("MODELSCOPE_DOMAIN") or "www.modelscope.cn"
    return (ep if ep.startswith(("http://", "https://")) else "https://" + ep).rstrip("/")


def _hf_list(ref: ModelRef, stats: fetch.FetchStats) -> Listing:
    ep = hf_endpoint()
    stats.requests += 1
    try:
        info = HfApi(endpoint=ep).model_info(ref.repo, revision=ref.revision or None, files_metadata=True)
    except GatedRepoError:
        raise RemoteError(_("{ref}: a gated repo; accept its terms on the model page and set HF_TOKEN "
                            "(or `hf auth login`)").format(ref=ref.text)) from None
    except RevisionNotFoundError:
        raise RemoteError(_("{ref}: no revision '{rev}' in {repo}").format(
            ref=ref.text, rev=ref.revision, repo=ref.repo)) from None
    except RepositoryNotFoundError:
        raise RemoteError(_("{ref}: no such repo on {endpoint} (or it is private: set HF_TOKEN)").format(
            ref=ref.text, endpoint=ep)) from None
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else "?"
        raise NetworkError(_("{ref}: {endpoint} answered HTTP {status}").format(
            ref=ref.text, endpoint=ep, status=status)) from None
    except (OSError, httpx2.TransportError) as e:  # no route, refused, timeout; OfflineModeIsEnabled
        raise fetch.unreachable(ep, e) from None
    files = tuple(RepoFile(s.rfilename, s.size if s.lfs is None else s.lfs.size,
                           s.lfs.sha256 if s.lfs is not None else (s.blob_id or ""))
                  for s in info.siblings or ())
    return Listing("hf", ep, ref.repo, info.sha or "", files)


def _ms_list(ref: ModelRef, stats: fetch.FetchStats) -> Listing:
    with needed("modelscope"):
        from modelscope_hub import HubApi  # lazy: an optional client, only for ms: references
    ep = ms_endpoint()
    stats.requests += 1
    try:
        api: Any = HubApi(endpoint=ep)
        files = api.list_repo_files(ref.repo, "model", revision=ref.revision or "master", recursive=True)
    except Exception as e:  # modelscope_hub's error tree is its own; name the class in one line
        name = type(e).__name__
        if "NotFound" in name or "NotExist" in name:
            raise RemoteError(_("{ref}: no such repo on {endpoint}").format(ref=ref.text, endpoint=ep)) from None
        raise NetworkError(_("{ref}: {endpoint}: {error}").format(
            ref=ref.text, endpoint=ep, error=one_line(f"{name}: {e}", 160))) from None
    out = tuple(RepoFile(f.path, getattr(f, "size", None), getattr(f, "sha256", "") or "")
                for f in files if getattr(f, "type", "blob") != "tree")
    return Listing("ms", ep, ref.repo, ref.revision or "master", out)


_memo: dict[tuple[str, str, str, str], Listing] = {}


def listing(ref: ModelRef, stats: fetch.FetchStats | None = None) -> Listing:
    """The repo's files: from the hub (and kept for offline use), or from the cache when offline
    or unreachable."""
    st = stats if stats is not None else fetch.FetchStats()
    ep = hf_endpoint() if ref.hub == "hf" else ms_endpoint()
    key = (ref.hub, ep, ref.repo, ref.revision)
    if key in _memo:
        return _memo[key]
    name = "listing|" + "|".join(key)
    if not offline():
        t0 = time.perf_counter()
        try:
            got = _hf_list(ref, st) if ref.hub == "hf" else _ms_list(ref, st)
        except NetworkError:
            got = None
            cached = fetch.index_get(name)
            if cached is None:
                raise
        finally:
            st.seconds += time.perf_counter() - t0
        if got is not None:
            fetch.index_put(name, {"commit": got.commit, "files": [[f.path, f.size, f.etag] for f in got.files]})
            _memo[key] = got
            return got
    cached = fetch.index_get(name)
    if cached is None:
        raise NetworkError(_("{ref}: offline (HF_HUB_OFFLINE) and this repo was never listed here").format(ref=ref.text))
    got = Listing(ref.hub, ep, ref.repo, cached["commit"],
                  tuple(RepoFile(p, s, e) for p, s, e in cached["files"]), from_cache=True)
    _memo[key] = got
    return got


def file_url(lst: Listing, path: str) -> str:
    """Where a repo file's bytes are: huggingface_hub's ``hf_hub_url`` at the listed commit, or
    ModelScope's resolve URL."""
    if lst.hub == "hf":
        return hf_hub_url(lst.repo, path, revision=lst.commit or None, endpoint=lst.endpoint)
    return f"{lst.endpoint}/models/{lst.repo}/resolve/{quote(lst.commit, safe='')}/{quote(path)}"


def auth_headers(hub: str) -> dict[str, str]:
    """The Authorization header huggingface_hub would send (HF_TOKEN, the saved login)."""
    if hub != "hf":
        token = os.environ.get("MODELSCOPE_API_TOKEN")
        return {"Authorization": f"Bearer {token}"} if token else {}
    h = _headers.build_hf_headers()
    return {"Authorization": h["authorization"]} if "authorization" in h else {}


def choose(ref: ModelRef, lst: Listing) -> list[RepoFile]:
    """The model's files (every part of a split) that ``ref`` names in ``lst``."""
    if ref.file:
        primary = next((f for f in lst.files if f.path == ref.file), None)
        if primary is None:
            raise RemoteError(_("{ref}: no file {file} in {repo}; it has: {files}").format(
                ref=ref.text, file=ref.file, repo=ref.repo, files=_gguf_names(lst)))
    else:
        primary = best_model(lst.files, ref.quant)
        if primary is None:
            if ref.quant:
                raise RemoteError(_("{ref}: no {quant} file in {repo}; quants there: {quants}").format(
                    ref=ref.text, quant=ref.quant, repo=ref.repo,
                    quants=", ".join(q for q, _f in quants(lst.files)) or "-"))
            raise RemoteError(_("{ref}: no GGUF model file in {repo}").format(ref=ref.text, repo=ref.repo))
    parts = split_parts(lst.files, primary)
    si = split_info(primary.path)
    if si is not None and si.count != len(parts):
        raise RemoteError(_("{ref}: {file} is part of {count} files but the repo has {n}").format(
            ref=ref.text, file=primary.path, count=si.count, n=len(parts)))
    return parts


def _gguf_names(lst: Listing) -> str:
    names = [f.path for f in lst.files if f.path.endswith(".gguf")]
    return ", ".join(names[:12]) + (" …" if len(names) > 12 else "") if names else "-"


def _display(ref: ModelRef, lst: Listing, f: RepoFile) -> str:
    return f"{ref.hub}:{lst.repo}/{f.path}"


def read_parts(ref: ModelRef, lst: Listing, parts: list[RepoFile], stats: fetch.FetchStats) -> list[GGUFHeader]:
    headers = auth_headers(ref.hub)
    return [fetch.read_header(file_url(lst, f.path), _display(ref, lst, f), headers=headers,
                              size=f.size, etag=f.etag, stats=stats, offline=offline() or lst.from_cache)
            for f in parts]


def _url_parts(url: str) -> list[str]:
    """common_download_get_all_parts (common/download.cpp): every part URL of a split URL."""
    base, _q, query = url.partition("?")
    si = split_info(base)
    if si is None or si.count <= 1:
        return [url]
    stem = base[: -len(f"-{si.index:05d}-of-{si.count:05d}.gguf")]
    return [f"{stem}-{i:05d}-of-{si.count:05d}.gguf" + (f"?{query}" if query else "")
            for i in range(1, si.count + 1)]


def _read_url(ref: ModelRef, stats: fetch.FetchStats) -> list[GGUFHeader]:
    out = []
    for url in _url_parts(ref.url):
        name = "url|" + url
        size: int | None
        if offline():
            rec = fetch.index_get(name)
            if rec is None:
                raise NetworkError(_("{where}: not in the header cache, and offline mode is on "
                                     "(HF_HUB_OFFLINE)").format(where=url))
            size, etag = rec["size"], rec["etag"]
        else:
            size, etag = fetch.head(url, url, stats=stats)
            if size is not None and etag:
                fetch.index_put(name, {"size": size, "etag": etag})
        out.append(fetch.read_header(url, url, size=size, etag=etag, stats=stats, offline=offline()))
    return out


def load_remote(text: str, stats: fetch.FetchStats | None = None) -> ModelSpec:
    """The ModelSpec of a remote reference, from its header(s) alone."""
    ref = parse_ref(text)
    st = stats if stats is not None else fetch.FetchStats()
    if ref.hub == "url":
        headers = _read_url(ref, st)
        commit = ""
    else:
        lst = listing(ref, st)
        headers = read_parts(ref, lst, choose(ref, lst), st)
        commit = lst.commit
    spec = spec_from_headers(headers, ref.text)
    remote = RemoteRead(ref.text, ref.hub, commit, st.bytes, st.requests, round(st.seconds, 3), st.cached, st.fetched,
                        st.file_bytes, tuple(st.sources))
    return replace(spec, remote=remote)


def repo_mmproj(text: str, model_path: str | None = None,
                stats: fetch.FetchStats | None = None) -> ModelSpec | None:
    """The repo's vision projector for this model reference, chosen as llama-server's ``-hf``
    chooses it (find_best_mmproj, common/download.cpp:597), or None."""
    ref = parse_ref(text)
    if ref.hub == "url":
        return None
    lst = listing(ref, stats)
    primary = model_path or choose(ref, lst)[0].path
    mm = best_sibling(lst.files, primary, "mmproj")
    if mm is None:
        return None
    st = stats if stats is not None else fetch.FetchStats()
    return spec_from_headers(read_parts(ref, lst, [mm], st), _display(ref, lst, mm))


def describe(remote: RemoteRead) -> str:
    """One line for a person: what reading a remote header cost."""
    share = remote.bytes_fetched / remote.file_bytes * 100 if remote.file_bytes else 0.0
    if remote.headers_fetched == 0:
        return _("{ref}: header from the cache ({files} file(s)), {bytes} bytes fetched, {requests} request(s), "
                 "{seconds:.2f} s").format(ref=remote.reference, files=remote.headers_cached,
                                           bytes=remote.bytes_fetched, requests=remote.requests,
                                           seconds=remote.seconds)
    return _("{ref}: read the header of {files} file(s) over HTTP: {bytes} bytes ({share:.3f} % of {size} bytes) "
             "in {requests} request(s), {seconds:.2f} s; cached for the next time").format(
        ref=remote.reference, files=remote.headers_fetched + remote.headers_cached,
        bytes=remote.bytes_fetched, share=share, size=remote.file_bytes,
        requests=remote.requests, seconds=remote.seconds)


def repo_quants(text: str, stats: fetch.FetchStats | None = None) -> dict[str, Any]:
    """``llamarig models hf:OWNER/REPO``: the repo's model files by QUANT tag (splits as one), each
    with its exact size as the hub lists it, and its projectors; nothing but the listing is read."""
    ref = parse_ref(text)
    if ref.hub == "url":
        raise RemoteError(_("{ref}: a URL names one file; list a repo with hf:OWNER/REPO or ms:OWNER/REPO").format(ref=text))
    lst = listing(ref, stats)
    out = []
    for tag, parts in quants(lst.files):
        sizes = [f.size for f in parts]
        out.append({"quant": tag, "files": [f.path for f in parts],
                    "bytes": None if any(x is None for x in sizes) else sum(x or 0 for x in sizes),
                    "reference": f"{ref.hub}:{lst.repo}:{tag}" if not tag.endswith(".gguf") else f"{ref.hub}:{lst.repo}/{parts[0].path}"})
    mm = [{"file": f.path, "bytes": f.size} for f in lst.files if f.path.endswith(".gguf") and "mmproj" in f.path]
    return {"repo": lst.repo, "hub": ref.hub, "endpoint": lst.endpoint, "commit": lst.commit,
            "from_cache": lst.from_cache, "method": "exact (the hub's file listing)", "quants": out, "mmproj": mm}
