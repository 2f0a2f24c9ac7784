"""The HTTP side of ``llamarig bench``: an aiohttp client that streams Server-Sent Events and
timestamps them with ``time.perf_counter`` as they arrive.

Token counts come from the server (``timings`` / ``usage``), never from chunk counts: a chunk
is not a token (speculative bursts, held-back UTF-8, stop-string buffering; see
tools/server/server-context.cpp ``send_partial_response`` in the vendored llama.cpp tree).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from llamarig.bench.records import Json, note_text
from llamarig.errors import ServerError
from llamarig.extras import needed
from llamarig.i18n import N_, _

with needed("bench"):
    import aiohttp

#: large read buffer: aiohttp's 64 KiB default throttles long SSE lines (vllm#39963)
READ_BUFSIZE = 4 * 1024 * 1024


@dataclass
class RequestSample:
    """One request as the client saw it, plus what the server reported about it."""

    seq: int
    scenario: str
    label: str = ""
    warmup: bool = False
    endpoint: str = "/completion"
    id_slot: int | None = None
    t_start: float = 0.0  # seconds since run start, when the request was sent
    t_first_chunk_s: float | None = None  # send -> first SSE data chunk of any kind
    ttft_s: float | None = None  # send -> first chunk carrying a generated token
    t_last_s: float | None = None  # send -> last chunk carrying a generated token
    t_end_s: float | None = None  # send -> end of stream
    n_chunks: int = 0
    n_token_chunks: int = 0
    status: int | None = None
    error: str = ""
    timings: dict[str, float] = field(default_factory=dict)  # the server's timings: numbers only
    usage: dict[str, Json] = field(default_factory=dict)
    tokens_cached: int | None = None
    tokens_evaluated: int | None = None
    slot_used: int | None = None
    expected_prompt_tokens: int | None = None
    valid: bool = True
    reject_reason: str = ""
    contaminated: bool | None = None  # None: unknown (no /slots)
    extra: dict[str, str] = field(default_factory=dict)
    #: (send -> chunk arrival in s, tokens generated so far): timings.predicted_n of each chunk when
    #: the request asked for timings_per_token, else the count of token-bearing chunks
    token_times: list[tuple[float, int]] = field(default_factory=list)
    tokens_from_timings: bool = False

    # -------------------------------------------------------------- derived values
    @property
    def ok(self) -> bool:
        return not self.error and self.status == 200

    @property
    def predicted_n(self) -> int | None:
        v = self.timings.get("predicted_n")
        if v is not None:
            return int(v)
        u = self.usage.get("completion_tokens")
        return int(u) if isinstance(u, (int, float)) else None

    @property
    def server_decode_tok_s(self) -> float | None:
        """(predicted_n - 1) / predicted_ms, recomputed from the raw fields (the first token
        comes from the prompt batch; same formula as server_slot_stats::n_gen_tps in build 11434,
        but older builds divided n by t, so we never trust predicted_per_second)."""
        n = self.timings.get("predicted_n")
        ms = self.timings.get("predicted_ms")
        if n is None or ms is None or n < 2 or ms <= 0:
            return None
        return (float(n) - 1.0) / (float(ms) / 1000.0)

    @property
    def client_decode_tok_s(self) -> float | None:
        """(tokens - 1) / (last token chunk - first token chunk), tokens from the server."""
        n = self.predicted_n
        if n is None or n < 2 or self.ttft_s is None or self.t_last_s is None:
            return None
        dt = self.t_last_s - self.ttft_s
        if dt <= 0:
            return None
        return (n - 1) / dt

    @property
    def prefill_tok_s(self) -> float | None:
        n = self.timings.get("prompt_n")
        ms = self.timings.get("prompt_ms")
        if n is None or ms is None or ms <= 0:
            return None
        return float(n) / (float(ms) / 1000.0)

    @property
    def depth(self) -> int | None:
        """Context depth at decode start: cache_n + prompt_n."""
        c, p = self.timings.get("cache_n"), self.timings.get("prompt_n")
        if c is None or p is None:
            return None
        return int(c) + int(p)

    def to_json(self) -> dict[str, Any]:
        def r(x: float | None, k: int = 6) -> float | None:
            return None if x is None else round(x, k)

        return {
            "seq": self.seq,
            "scenario": self.scenario,
            "label": self.label,
            "warmup": self.warmup,
            "endpoint": self.endpoint,
            "id_slot": self.id_slot,
            "t_start_s": r(self.t_start),
            "t_first_chunk_s": r(self.t_first_chunk_s),
            "ttft_s": r(self.ttft_s),
            "t_last_token_s": r(self.t_last_s),
            "t_end_s": r(self.t_end_s),
            "n_chunks": self.n_chunks,
            "n_token_chunks": self.n_token_chunks,
            "status": self.status,
            "error": self.error,
            "timings": self.timings,
            "usage": self.usage,
            "tokens_cached": self.tokens_cached,
            "tokens_evaluated": self.tokens_evaluated,
            "slot_used": self.slot_used,
            "expected_prompt_tokens": self.expected_prompt_tokens,
            "valid": self.valid,
            "reject_reason": self.reject_reason,
            "contaminated": self.contaminated,
            "server_decode_tok_s": r(self.server_decode_tok_s, 4),
            "client_decode_tok_s": r(self.client_decode_tok_s, 4),
            "prefill_tok_s": r(self.prefill_tok_s, 4),
            "depth": self.depth,
            "extra": self.extra,
        }


@dataclass
class HTTPResult:
    status: int
    body: Any
    headers: dict[str, str]


class BenchClient:
    """Async client for one base URL. Use as ``async with BenchClient(url) as c``."""

    def __init__(self, url: str, *, timeout_s: float = 600.0, api_key: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._session: aiohttp.ClientSession | None = None
        self.t0 = time.perf_counter()

    async def __aenter__(self) -> BenchClient:
        self._session = aiohttp.ClientSession(
            read_bufsize=READ_BUFSIZE,
            timeout=aiohttp.ClientTimeout(total=self.timeout_s, sock_connect=10),
            connector=aiohttp.TCPConnector(limit=0, force_close=True),  # llama-server (cpp-httplib) closes idle keep-alives
            headers=self.headers,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "BenchClient used outside 'async with'"
        return self._session

    async def get(self, path: str, *, timeout: float = 10.0) -> HTTPResult:
        return await self._retry(self._get, path, timeout)

    async def post(self, path: str, payload: dict[str, Any], *, timeout: float = 60.0) -> HTTPResult:
        return await self._retry(self._post, path, timeout, payload)

    @staticmethod
    async def _retry(fn: Callable[..., Awaitable[HTTPResult]], *args: Any) -> HTTPResult:
        """One retry for small control requests on a dropped connection."""
        try:
            return await fn(*args)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            await asyncio.sleep(0.05)
            return await fn(*args)

    async def _get(self, path: str, timeout: float) -> HTTPResult:
        async with self.session.get(
            self.url + path, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as r:
            text = await r.text(errors="replace")
            try:
                body: Any = json.loads(text)
            except ValueError:
                body = text
            return HTTPResult(r.status, body, dict(r.headers))

    async def _post(self, path: str, timeout: float, payload: dict[str, Any]) -> HTTPResult:
        async with self.session.post(
            self.url + path, json=payload, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as r:
            text = await r.text(errors="replace")
            try:
                body: Any = json.loads(text)
            except ValueError:
                body = text
            return HTTPResult(r.status, body, dict(r.headers))

    async def tokenize(self, text: str, *, add_special: bool = True) -> list[int]:
        """Token ids via llama-server's /tokenize (tools/server/server-context.cpp: ``content``,
        ``add_special`` default false; /completion tokenizes with special tokens added)."""
        res = await self.post("/tokenize", {"content": text, "add_special": add_special})
        if res.status != 200 or not isinstance(res.body, dict) or "tokens" not in res.body:
            raise ServerError(_("{url}/tokenize answered HTTP {status}: {body}").format(url=self.url, status=res.status, body=str(res.body)[:200]))
        return [int(t) if isinstance(t, int) else int(t["id"]) for t in res.body["tokens"]]

    async def stream(self, path: str, payload: dict[str, Any], sample: RequestSample) -> RequestSample:
        """POST ``payload`` with ``stream: true`` and fill ``sample`` from the SSE stream.
        Never raises for HTTP/network errors: they are recorded in ``sample.error``."""
        payload = dict(payload, stream=True)
        sample.endpoint = path
        t_send = time.perf_counter()
        sample.t_start = t_send - self.t0
        chat = "chat/completions" in path or path.endswith("/v1/completions")
        try:
            async with self.session.post(self.url + path, json=payload) as resp:
                sample.status = resp.status
                if resp.status != 200:
                    body = (await resp.read())[:400].decode(errors="replace")
                    sample.error = f"HTTP {resp.status}: {_error_message(body)}"
                    sample.t_end_s = time.perf_counter() - t_send
                    return sample
                buf = b""
                async for chunk in resp.content.iter_any():
                    now = time.perf_counter() - t_send
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        self._handle_line(line.strip(), now, sample, chat)
                if buf.strip():
                    self._handle_line(buf.strip(), time.perf_counter() - t_send, sample, chat)
        except asyncio.TimeoutError:
            sample.error = note_text(N_("timeout after {seconds} s"), seconds=f"{self.timeout_s:.0f}")
        except aiohttp.ClientError as e:
            sample.error = note_text(N_("connection error: {error}"), error=f"{type(e).__name__}: {e}")
        sample.t_end_s = time.perf_counter() - t_send
        if not sample.error and not sample.timings and not sample.usage:
            sample.error = note_text(N_("stream ended without timings or usage (server stopped mid-request?)"))
        return sample

    @staticmethod
    def _handle_line(line: bytes, now: float, s: RequestSample, chat: bool) -> None:
        obj = _event(line, s)
        if obj is None:
            return
        s.n_chunks += 1
        if s.t_first_chunk_s is None:
            s.t_first_chunk_s = now
        if not isinstance(obj, dict):
            return
        if "error" in obj:
            s.error = note_text(N_("server error event: {message}"), message=_error_message(json.dumps(obj["error"])))
            return
        _apply_chunk(obj, s, now, chat)


def _event(line: bytes, s: RequestSample) -> Any:
    """The JSON of one SSE ``data:`` line (None for comments, separators, ``[DONE]``, other
    fields and unreadable data); an ``error:`` line sets the sample's error."""
    if not line or line.startswith(b":"):
        return None  # blank separator or SSE comment (": ping")
    if line.startswith(b"error:"):
        s.error = note_text(N_("server error event: {message}"), message=_error_message(line[6:].decode(errors="replace")))
        return None
    if not line.startswith(b"data:"):
        return None
    data = line[5:].strip()
    if data == b"[DONE]":
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def _has_token(obj: dict[str, Any], chat: bool) -> bool:
    if not chat:
        return bool(obj.get("content")) or bool(obj.get("tokens"))
    return any((ch.get("delta") or {}).get("content") or (ch.get("delta") or {}).get("reasoning_content") or ch.get("text")
               for ch in obj.get("choices") or [] if isinstance(ch, dict))


def _apply_chunk(obj: dict[str, Any], s: RequestSample, now: float, chat: bool) -> None:
    """What one chunk tells: a token arrived (first and last token times), the server's timings
    and usage, the slot, the cache counts, and the tokens so far (``token_times``)."""
    has_token = _has_token(obj, chat)
    if has_token:
        s.n_token_chunks += 1
        if s.ttft_s is None:
            s.ttft_s = now
        s.t_last_s = now
    timings = obj.get("timings")
    if isinstance(timings, dict):
        s.timings = {k: v for k, v in timings.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        pn = timings.get("predicted_n")
        if isinstance(pn, int) and has_token:
            s.tokens_from_timings = True
            s.token_times.append((now, pn))
    if has_token and not s.tokens_from_timings:
        s.token_times.append((now, s.n_token_chunks))
    if isinstance(obj.get("usage"), dict):
        s.usage = obj["usage"]
    if obj.get("stop"):
        if "id_slot" in obj:
            s.slot_used = obj.get("id_slot")
        s.tokens_cached = obj.get("tokens_cached")
        s.tokens_evaluated = obj.get("tokens_evaluated")


def _error_message(body: str) -> str:
    try:
        obj = json.loads(body)
    except ValueError:
        return body.strip()[:200]
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message") or err)[:200]
        return str(err)[:200]
    return str(obj)[:200]
