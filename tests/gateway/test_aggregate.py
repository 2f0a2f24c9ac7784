"""The rebuilt answer of a non-streamed request sent upstream as a stream (tool calls and
reasoning, which the synthetic model's random weights do not produce: chunks as llama-server
streams them, tools/server/server-task.cpp)."""

from __future__ import annotations

import json

from llamarig.gateway.aggregate import Aggregator, applies
from llamarig.gateway.tiers import CHAT, NATIVE


def _sse(*objs: object) -> bytes:
    return b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs) + b"data: [DONE]\n\n"


def test_tool_calls_and_reasoning_are_joined_as_the_whole_answer_has_them() -> None:
    head = {"created": 1, "id": "c1", "model": "m", "system_fingerprint": "b", "object": "chat.completion.chunk"}
    data = _sse(
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {"reasoning_content": "think"}, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "t1", "type": "function",
                                                                     "function": {"name": "f", "arguments": "{\"a\""}}]}}]},
        {**head, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {**head, "choices": [], "usage": {"completion_tokens": 5}, "timings": {"predicted_n": 5}},
    )
    agg = Aggregator(CHAT)
    firsts = [agg.feed(data[i:i + 7]) for i in range(0, len(data), 7)]  # any split
    assert firsts.count(True) == 1 and agg.done
    status, out = agg.result()
    assert status == 200 and list(out) == ["choices", "created", "model", "system_fingerprint", "object", "usage",
                                           "id", "timings"]
    msg = out["choices"][0]["message"]
    assert msg == {"role": "assistant", "content": "", "reasoning_content": "think",
                   "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}, "id": "t1"}]}
    assert out["choices"][0]["finish_reason"] == "tool_calls"


def test_an_error_event_is_the_answer_and_what_is_not_rebuilt_goes_as_it_is() -> None:
    agg = Aggregator(CHAT)
    agg.feed(b'data: {"error": {"code": 500, "message": "Context size has been exceeded", "type": "server_error"}}\n\n')
    assert agg.result() == (500, {"error": {"code": 500, "message": "Context size has been exceeded",
                                            "type": "server_error"}})
    assert applies({"messages": []}, CHAT) and not applies({"messages": [], "logprobs": True}, CHAT)
    assert not applies({"messages": [], "n": 2}, CHAT) and not applies({"prompt": "x"}, NATIVE)
    assert not applies({"messages": [], "stream": True}, CHAT)
