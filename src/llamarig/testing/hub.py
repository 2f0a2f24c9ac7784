"""A local model hub for tests and benchmarks: serves GGUF files from disk over HTTP the way the
Hugging Face Hub and ModelScope do, on a loopback port, so ``llamarig.hub`` is tested through
``huggingface_hub`` (``HF_ENDPOINT`` pointed here) without the internet.

Endpoints (the ones huggingface_hub, modelscope_hub and llama-server's ``-hf`` call):
  GET  /api/models/OWNER/REPO[/revision/REV]          model_info with ``siblings`` (size, lfs)
  GET  /api/models/OWNER/REPO/refs, /tree/REV          branches and the file tree (llama-server)
  GET  /api/v1/models/OWNER/REPO/repo/files            ModelScope's file listing
  HEAD|GET /OWNER/REPO/resolve/REV/PATH                a file, with Range (206, Content-Range)
  HEAD|GET /models/OWNER/REPO/resolve/REV/PATH         the same, ModelScope's spelling
  HEAD|GET /files/PATH                                 a plain URL

Errors carry the ``X-Error-Code`` header the Hub sends (RepoNotFound, GatedRepo, EntryNotFound),
which huggingface_hub turns into its exception classes. Faults a real hub does not make on demand
are switches: ``no_range`` (answer 200 with the whole file), ``truncate`` (send fewer bytes than
the range asks for), ``html`` (answer every file with an HTML page), ``bytes_per_s`` and
``latency_s`` (a slow, distant link).
The ETag of a file is a hash of its name, size and first 64 KiB (not the sha256 of its content,
which for the sparse 15 GB test files would take a minute to compute).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Repo:
    files: dict[str, Path]  # path in the repo -> file on disk
    gated: bool = False


@dataclass
class HubLog:
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # method, path, range
    bytes_sent: int = 0


class LocalHub:
    """A threaded HTTP server on 127.0.0.1; ``url`` is its endpoint. Use as a context manager."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.plain: dict[str, Path] = {}
        self.log = HubLog()
        self.no_range = False
        self.truncate = False
        self.html = False
        self.bytes_per_s: float | None = None
        self.latency_s = 0.0  # added before every answer (a round trip to a distant hub)
        self.token = "hf_test_token"
        self._etags: dict[Path, str] = {}
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:
                pass

            def do_HEAD(self) -> None:  # noqa: N802
                hub._serve(self, head=True)

            def do_GET(self) -> None:  # noqa: N802
                hub._serve(self, head=False)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up
                    super().handle_error(request, client_address)  # type: ignore[arg-type]

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add_repo(self, repo: str, files: dict[str, Path], gated: bool = False) -> None:
        self.repos[repo] = Repo(dict(files), gated)

    def __enter__(self) -> LocalHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    # ------------------------------------------------------------------ handlers

    def etag(self, p: Path) -> str:
        if p not in self._etags:
            h = hashlib.sha256(f"{p.name}\n{p.stat().st_size}\n".encode())
            with open(p, "rb") as f:
                h.update(f.read(65536))
            self._etags[p] = h.hexdigest()
        return self._etags[p]

    def _json(self, h: BaseHTTPRequestHandler, status: int, body: object, head: bool,
              headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        if not head:
            h.wfile.write(data)

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str, head: bool) -> None:
        self._json(h, status, {"error": code}, head, {"X-Error-Code": code, "X-Error-Message": code})

    def _repo(self, h: BaseHTTPRequestHandler, name: str, head: bool) -> Repo | None:
        repo = self.repos.get(name)
        if repo is None:
            self._error(h, 404, "RepoNotFound", head)
            return None
        if repo.gated and h.headers.get("Authorization") != f"Bearer {self.token}":
            self._error(h, 401, "GatedRepo", head)
            return None
        return repo

    def _serve(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        if self.latency_s:
            time.sleep(self.latency_s)
        path = unquote(urlparse(h.path).path)
        self.log.requests.append((h.command, path, h.headers.get("Range", "")))
        m = re.match(r"^/api/models/([^/]+/[^/]+)/(refs|tree/[^/]+)$", path)
        if m:  # what llama-server's -hf asks (common/hf-cache.cpp get_repo_commit, get_repo_files)
            repo = self._repo(h, m.group(1), head)
            if repo is not None:
                if m.group(2) == "refs":
                    self._json(h, 200, {"branches": [{"name": "main", "ref": "refs/heads/main",
                                                      "targetCommit": COMMIT}], "tags": [], "converts": []}, head)
                else:
                    self._json(h, 200, [{"type": "file", "path": k, "size": p.stat().st_size,
                                         "oid": self.etag(p)[:40],
                                         "lfs": {"oid": self.etag(p), "size": p.stat().st_size, "pointerSize": 134}}
                                        for k, p in repo.files.items()], head)
            return
        m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?$", path)
        if m:
            repo = self._repo(h, m.group(1), head)
            if repo is not None:
                sib = [{"rfilename": k, "size": p.stat().st_size, "blobId": self.etag(p)[:40],
                        "lfs": {"size": p.stat().st_size, "sha256": self.etag(p), "pointerSize": 134}}
                       for k, p in repo.files.items()]
                self._json(h, 200, {"id": m.group(1), "modelId": m.group(1), "sha": COMMIT,
                                    "private": False, "siblings": sib}, head)
            return
        m = re.match(r"^/api/v1/models/([^/]+/[^/]+)/repo/files$", path)
        if m:
            repo = self._repo(h, m.group(1), head)
            if repo is not None:
                files = [{"Path": k, "Name": k.rsplit("/", 1)[-1], "Size": p.stat().st_size,
                          "Sha256": self.etag(p), "Type": "blob"} for k, p in repo.files.items()]
                self._json(h, 200, {"Code": 200, "Success": True, "Data": {"Files": files}}, head)
            return
        m = re.match(r"^(?:/models)?/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if m:
            repo = self._repo(h, m.group(1), head)
            if repo is None:
                return
            f = repo.files.get(m.group(3))
            if f is None:
                self._error(h, 404, "EntryNotFound", head)
                return
            self._file(h, f, head, {"X-Repo-Commit": COMMIT, "X-Linked-Etag": f'"{self.etag(f)}"',
                                    "X-Linked-Size": str(f.stat().st_size)})
            return
        m = re.match(r"^/files/(.+)$", path)
        if m and m.group(1) in self.plain:
            self._file(h, self.plain[m.group(1)], head, {})
            return
        self._error(h, 404, "EntryNotFound", head)

    def _file(self, h: BaseHTTPRequestHandler, f: Path, head: bool, extra: dict[str, str]) -> None:
        size = f.stat().st_size
        if self.html:
            body = b"<html><body>Please log in</body></html>"
            h.send_response(200)
            h.send_header("Content-Type", "text/html")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            if not head:
                h.wfile.write(body)
            return
        rng = h.headers.get("Range")
        m = re.match(r"^bytes=(\d+)-(\d*)$", rng or "")
        start, end = 0, size - 1
        status = 200
        if m and not self.no_range:
            start = int(m.group(1))
            end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
            status = 206
        h.send_response(status)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Accept-Ranges", "bytes" if not self.no_range else "none")
        h.send_header("ETag", f'"{self.etag(f)}"')
        for k, v in extra.items():
            h.send_header(k, v)
        n = end - start + 1
        if status == 206:
            h.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        h.send_header("Content-Length", str(n))
        h.end_headers()
        if head:
            return
        if self.truncate:
            n = max(0, n // 2)
        try:
            with open(f, "rb") as fh:
                fh.seek(start)
                left = n
                while left > 0:
                    chunk = fh.read(min(left, 1 << 16))
                    if not chunk:
                        break
                    h.wfile.write(chunk)
                    self.log.bytes_sent += len(chunk)
                    left -= len(chunk)
                    if self.bytes_per_s:
                        time.sleep(len(chunk) / self.bytes_per_s)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading (a 200 to a Range request)
        if self.truncate:
            h.close_connection = True


def main(argv: list[str] | None = None) -> None:
    """``python -m llamarig.testing.hub OWNER/REPO FILE.gguf...``: serve those files as one repo
    until killed; prints the endpoint (for HF_ENDPOINT / MODELSCOPE_ENDPOINT) on the first line."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        raise SystemExit("usage: python -m llamarig.testing.hub OWNER/REPO FILE.gguf...")
    hub = LocalHub()
    hub.add_repo(args[0], {Path(a).name: Path(a) for a in args[1:]})
    with hub:
        print(hub.url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            hub._thread.join()


if __name__ == "__main__":
    main()
