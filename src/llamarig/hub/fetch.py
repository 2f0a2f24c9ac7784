"""Reading a GGUF header over HTTP: range requests that grow until the tensor table is complete,
and a local cache of headers keyed by the file's ETag (content hash), so a second read of the
same file fetches nothing.

The cache holds, per file, the header's bytes (up to the end of the tensor table) and a small
JSON record (size, ETag, where it came from). A header is written only after it parsed; a cached
header that no longer parses is ignored and read again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamarig.errors import GGUFError, NetworkError, RemoteError
from llamarig.extras import needed
from llamarig.gguf.reader import GGUFHeader, HeaderIncomplete, parse_header
from llamarig.i18n import _
from llamarig.paths import header_cache_dir

with needed("hub"):
    import httpx2
    from huggingface_hub import get_session

#: the first range asked for (bytes); each next one at least doubles what is held
FIRST_RANGE = 256 << 10
#: seconds to wait for a hub or server
TIMEOUT = 30.0
#: the header cache's bound (MiB of header bytes; ``$LLAMARIG_HEADER_CACHE_MB`` changes it): past
#: it the least recently used headers go, so a long-lived machine's cache cannot grow without end
#: (a 27B model's header is about 10 MB: this keeps about 50 of them)
CACHE_MAX_MIB = 512
ENV_CACHE_MAX = "LLAMARIG_HEADER_CACHE_MB"


@dataclass
class FetchStats:
    """What reading one or more headers cost."""

    bytes: int = 0  # bytes of file content received
    requests: int = 0  # HTTP requests made (listings, HEADs, ranges)
    seconds: float = 0.0
    cached: int = 0  # headers taken from the cache
    fetched: int = 0  # headers read over the network
    file_bytes: int = 0  # the size of the files whose headers were read
    sources: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"bytes_fetched": self.bytes, "requests": self.requests, "seconds": round(self.seconds, 3),
                "headers_cached": self.cached, "headers_fetched": self.fetched,
                "file_bytes": self.file_bytes, "files": list(self.sources)}


def _key(etag: str, size: int) -> str:
    return hashlib.sha256(f"{etag}\n{size}".encode()).hexdigest()


def cache_get(etag: str, size: int, where: str) -> GGUFHeader | None:
    """The cached header of the file with this ETag and size, or None."""
    if not etag:
        return None
    base = header_cache_dir() / _key(etag, size)
    try:
        data = base.with_suffix(".header").read_bytes()
        meta = json.loads(base.with_suffix(".json").read_text())
    except (OSError, ValueError):
        return None
    with contextlib.suppress(OSError):
        os.utime(base.with_suffix(".header"))  # last use: what eviction keeps
    if meta.get("size") != size or meta.get("etag") != etag:
        return None
    try:
        return parse_header(data, size, where)
    except (HeaderIncomplete, GGUFError):
        return None  # a damaged cache entry: read the file again


def cache_put(etag: str, size: int, header: GGUFHeader, data: bytes, source: str) -> None:
    if not etag:
        return
    d = header_cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        base = d / _key(etag, size)
        for suffix, content in ((".header", data[: header.header_bytes]),
                                (".json", json.dumps({"etag": etag, "size": size, "source": source,
                                                      "header_bytes": header.header_bytes}).encode())):
            tmp = base.with_suffix(suffix + f".{os.getpid()}.tmp")
            tmp.write_bytes(content)
            os.replace(tmp, base.with_suffix(suffix))
        evict(d, keep=base.with_suffix(".header"))
    except OSError:
        pass  # a read-only cache only costs the next plan a fetch


def cache_limit() -> int:
    """The header cache's bound in bytes (``$LLAMARIG_HEADER_CACHE_MB``, else CACHE_MAX_MIB)."""
    try:
        mib = float(os.environ.get(ENV_CACHE_MAX, CACHE_MAX_MIB))
    except ValueError:
        mib = CACHE_MAX_MIB
    return int(max(0.0, mib) * (1 << 20))


def evict(d: Path, keep: Path | None = None) -> list[Path]:
    """Drop the least recently used headers (and their records) until the cache's headers fit
    :func:`cache_limit`; ``keep`` (the header just written) stays whatever its size. One pass
    over the directory: linear in the number of entries. Returns the headers dropped."""
    entries = []
    for f in d.glob("*.header"):
        try:
            st = f.stat()
        except OSError:
            continue
        entries.append((st.st_mtime, st.st_size, f))
    total, limit = sum(e[1] for e in entries), cache_limit()
    dropped = []
    for _mtime, size, f in sorted(entries, key=lambda e: e[0]):
        if total <= limit:
            break
        if keep is not None and f == keep:
            continue
        for suffix in (".header", ".json"):
            with contextlib.suppress(OSError):
                f.with_suffix(suffix).unlink()
        total -= size
        dropped.append(f)
    return dropped


def index_get(name: str) -> Any:
    """A small JSON record kept beside the headers (repo listings, URL -> ETag), or None."""
    try:
        return json.loads((header_cache_dir() / "index" / f"{_key(name, 0)}.json").read_text())
    except (OSError, ValueError):
        return None


def index_put(name: str, value: Any) -> None:
    d = header_cache_dir() / "index"
    try:
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"{_key(name, 0)}.json"
        tmp = p.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(value))
        os.replace(tmp, p)
    except OSError:
        pass


def client() -> httpx2.Client:
    """huggingface_hub's HTTP session (proxies, user agent, its transport settings)."""
    return get_session()


def unreachable(where: str, e: BaseException) -> NetworkError:
    return NetworkError(_("{where}: cannot reach the server ({error}); with HF_HUB_OFFLINE=1 a header "
                          "read before is taken from the cache").format(where=where, error=type(e).__name__))


def _range(url: str, headers: dict[str, str], start: int, end: int, where: str,
           stats: FetchStats) -> tuple[bytes, int]:
    """Bytes [start, end) of ``url`` and the file's total size (Content-Range)."""
    h = {**headers, "Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"}
    stats.requests += 1
    try:
        with client().stream("GET", url, headers=h, follow_redirects=True, timeout=TIMEOUT) as r:
            if r.status_code == 200:
                head = b""
                for chunk in r.iter_bytes():
                    head += chunk
                    if len(head) >= 4:
                        break
                stats.bytes += len(head)
                if head[:4] != b"GGUF":
                    raise GGUFError(where, _("the server's answer is not a GGUF file"))
                raise NetworkError(_("{where}: the server sent the whole file instead of a byte range "
                                     "(HTTP 200 to a Range request); llamarig reads headers only, so it "
                                     "stopped").format(where=where))
            if r.status_code in (401, 403):
                raise RemoteError(_("{where}: access denied (HTTP {status}); a gated or private file "
                                    "needs HF_TOKEN").format(where=where, status=r.status_code))
            if r.status_code == 404:
                raise RemoteError(_("{where}: no such file (HTTP 404)").format(where=where))
            if r.status_code != 206:
                raise NetworkError(_("{where}: HTTP {status} to a range request").format(
                    where=where, status=r.status_code))
            cr = r.headers.get("Content-Range", "")
            try:
                total = int(cr.rsplit("/", 1)[1])
            except (IndexError, ValueError):
                raise NetworkError(_("{where}: the server's range answer has no usable Content-Range "
                                     "({value!r})").format(where=where, value=cr)) from None
            data = r.read()
    except httpx2.RemoteProtocolError:
        raise NetworkError(_("{where}: truncated answer: the server closed the connection before bytes "
                             "{start}-{end} were complete").format(where=where, start=start, end=end - 1)) from None
    except httpx2.TransportError as e:
        raise unreachable(where, e) from None
    stats.bytes += len(data)
    if len(data) != min(end, total) - start:
        raise RemoteError(_("{where}: truncated answer: asked for bytes {start}-{end} and got {n}").format(
            where=where, start=start, end=min(end, total) - 1, n=len(data)))
    return data, total


def read_header(url: str, where: str, *, headers: dict[str, str] | None = None, size: int | None = None,
                etag: str = "", stats: FetchStats | None = None, first: int | None = None,
                offline: bool = False) -> GGUFHeader:
    """The header of the GGUF at ``url``, from the cache when ``etag`` is known and cached, else
    by range requests; ``where`` names it in messages and in the header."""
    st = stats if stats is not None else FetchStats()
    t0 = time.perf_counter()
    try:
        if etag and size is not None:
            cached = cache_get(etag, size, where)
            if cached is not None:
                st.cached += 1
                st.file_bytes += size
                st.sources.append(where)
                return cached
        if offline:
            raise NetworkError(_("{where}: not in the header cache, and offline mode is on "
                                 "(HF_HUB_OFFLINE)").format(where=where))
        buf = bytearray()
        total = size
        want = first or FIRST_RANGE
        if total is not None:
            want = min(want, total)
        while True:
            data, total = _range(url, headers or {}, len(buf), max(want, len(buf) + 1), where, st)
            buf += data
            if size is not None and total != size:
                raise RemoteError(_("{where}: the server says the file has {total} bytes, the listing "
                                    "{size}").format(where=where, total=total, size=size))
            try:
                header = parse_header(bytes(buf), total, where)
                break
            except HeaderIncomplete as e:
                if len(buf) >= total:  # cannot happen: the reader asks only within the file
                    raise GGUFError(where, _("truncated header")) from None
                want = min(total, max(e.needed, 2 * len(buf)))
        st.fetched += 1
        st.file_bytes += total
        st.sources.append(where)
        cache_put(etag, total, header, bytes(buf), url)
        return header
    finally:
        st.seconds += time.perf_counter() - t0


def head(url: str, where: str, headers: dict[str, str] | None = None,
         stats: FetchStats | None = None) -> tuple[int | None, str]:
    """A plain URL's size and ETag (HEAD, redirects followed); ("" when the server gives none)."""
    if stats is not None:
        stats.requests += 1
    try:
        r = client().head(url, headers={**(headers or {}), "Accept-Encoding": "identity"},
                          follow_redirects=True, timeout=TIMEOUT)
    except httpx2.TransportError as e:
        raise unreachable(where, e) from None
    if r.status_code == 404:
        raise RemoteError(_("{where}: no such file (HTTP 404)").format(where=where))
    if r.status_code in (401, 403):
        raise RemoteError(_("{where}: access denied (HTTP {status}); a gated or private file "
                            "needs HF_TOKEN").format(where=where, status=r.status_code))
    if r.status_code >= 400:
        raise NetworkError(_("{where}: HTTP {status}").format(where=where, status=r.status_code))
    size = r.headers.get("Content-Length")
    etag = (r.headers.get("X-Linked-Etag") or r.headers.get("ETag") or "").removeprefix("W/").strip('"')
    return (int(size) if size and size.isdigit() else None), etag


def cache_dir() -> Path:
    return header_cache_dir()
