"""A non-streamed request sent upstream as a stream, its answer put back together for the client.

Why: llama-server stops a streamed request when its client goes away (the next chunk's write
fails and the reader's tasks are cancelled), but a non-streamed one only while no other task
produces results: the HTTP thread waits for its result in steps of ``HTTP_POLLING_SECONDS`` and
checks the connection only when a step times out, and every result of any other task restarts
the step (tools/server/server-queue.cpp:450-470 ``recv_with_timeout``, 548-557
``server_response_reader::next``; tools/server/server-context.cpp:40). On a busy server a
non-streamed request whose client left runs to its end. Sent as a stream, closing the upstream
connection stops it, so a client that leaves, a preempted cron job, or a shutdown frees the slot.

What is rebuilt is what llama-server answers to the same request without ``stream`` (observed on
build 11434; the fields of ``tools/server/server-task.cpp`` ``to_json_oaicompat_chat`` and
``to_json_oaicompat``): ``choices[0]`` with the joined ``content`` (and ``reasoning_content``,
``tool_calls`` joined per index), ``finish_reason``, and ``created``, ``model``,
``system_fingerprint``, ``object``, ``usage``, ``id``, ``timings`` from the chunks. Requests the
rebuild does not cover (``n`` > 1, log-probabilities) are sent as they are (:func:`applies`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from llamarig.gateway.tiers import CHAT, OAI_COMPLETION

#: fields whose answer the rebuild does not reproduce: such requests go upstream unchanged
_NOT_COVERED = ("logprobs", "top_logprobs", "n_probs", "post_sampling_probs")


def applies(body: dict[str, Any], kind: str) -> bool:
    """True when a non-streamed ``body`` of ``kind`` can go upstream as a stream and come back whole."""
    if body.get("stream") or kind not in (CHAT, OAI_COMPLETION):
        return False
    n = body.get("n")
    return (n is None or n == 1) and not any(body.get(f) for f in _NOT_COVERED)


def as_stream(up: dict[str, Any], kind: str) -> None:
    """Turn the upstream body into a streamed request whose last chunk carries ``usage``."""
    up["stream"] = True
    if kind == CHAT:
        up["stream_options"] = {"include_usage": True}


@dataclass
class Aggregator:
    """SSE bytes in (any split), the whole answer out (:meth:`result`)."""

    kind: str
    size: int = 0  # bytes fed
    done: bool = False  # ``data: [DONE]`` arrived
    first_token: bool = False  # a chunk carried generated text (the first token's time)
    error: dict[str, Any] | None = None  # an error event's object
    _buf: bytes = b""
    _head: dict[str, Any] = field(default_factory=dict)
    _content: list[str] = field(default_factory=list)
    _reasoning: list[str] = field(default_factory=list)
    _tools: dict[int, dict[str, Any]] = field(default_factory=dict)
    _finish: str | None = None
    _tail: dict[str, Any] = field(default_factory=dict)

    def feed(self, data: bytes) -> bool:
        """Take more bytes; True when this step brought the first generated text."""
        self.size += len(data)
        self._buf += data
        had = self.first_token
        while b"\n\n" in self._buf:
            event, self._buf = self._buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b"data: "):
                    self._event(line[6:].strip())
        return self.first_token and not had

    def _event(self, raw: bytes) -> None:
        if raw == b"[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(raw)
        except ValueError:
            return
        if not isinstance(obj, dict):
            return
        if "error" in obj:
            self.error = obj["error"] if isinstance(obj["error"], dict) else {"message": str(obj["error"])}
            return
        for k in ("created", "model", "system_fingerprint", "id"):
            if k in obj:
                self._head.setdefault(k, obj[k])
        for k in ("usage", "timings"):
            if k in obj:
                self._tail[k] = obj[k]
        for ch in obj.get("choices") or ():
            self._choice(ch)

    def _choice(self, ch: dict[str, Any]) -> None:
        if ch.get("finish_reason") is not None:
            self._finish = ch["finish_reason"]
        if self.kind == OAI_COMPLETION:
            text = ch.get("text")
            if text:
                self._content.append(text)
                self.first_token = True
            return
        d = ch.get("delta") or {}
        for key, out in (("content", self._content), ("reasoning_content", self._reasoning)):
            v = d.get(key)
            if isinstance(v, str) and v:
                out.append(v)
                self.first_token = True
        for tc in d.get("tool_calls") or ():
            self.first_token = True
            self._tool(tc)

    def _tool(self, tc: dict[str, Any]) -> None:
        t = self._tools.setdefault(int(tc.get("index", 0)), {"type": "function", "function": {"name": "", "arguments": ""}})
        fn = tc.get("function") or {}
        for k in ("name", "arguments"):
            if isinstance(fn.get(k), str):
                t["function"][k] += fn[k]
        if tc.get("id"):
            t["id"] = tc["id"]

    def result(self) -> tuple[int, dict[str, Any]]:
        """(HTTP status, the answer llama-server gives without ``stream``)."""
        if self.error is not None:
            code = self.error.get("code")
            return (code if isinstance(code, int) and 400 <= code < 600 else 500), {"error": self.error}
        h, text = self._head, "".join(self._content)
        choice: dict[str, Any]
        if self.kind == OAI_COMPLETION:
            choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": self._finish}
            obj = "text_completion"
        else:
            # common/chat.cpp common_chat_msg::to_json_oaicompat: content "" when empty, then
            # reasoning_content, then tool_calls as {type, function {name, arguments}, id}
            msg: dict[str, Any] = {"role": "assistant", "content": text}
            if self._reasoning:
                msg["reasoning_content"] = "".join(self._reasoning)
            if self._tools:
                msg["tool_calls"] = [self._tools[i] for i in sorted(self._tools)]
            choice = {"finish_reason": self._finish, "index": 0, "message": msg}
            obj = "chat.completion"
        out: dict[str, Any] = {"choices": [choice], "created": h.get("created"), "model": h.get("model"),
                               "system_fingerprint": h.get("system_fingerprint"), "object": obj}
        if "usage" in self._tail:
            out["usage"] = self._tail["usage"]
        out["id"] = h.get("id")
        if "timings" in self._tail:
            out["timings"] = self._tail["timings"]
        return 200, out
