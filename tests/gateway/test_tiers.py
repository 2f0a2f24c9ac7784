"""Pure tier selection and request rewriting (seed 004's rules)."""

from __future__ import annotations

import pytest

from llamarig.gateway.config import KeyConfig, build_config
from llamarig.gateway.tiers import (
    CHAT,
    NATIVE,
    OAI_COMPLETION,
    RequestError,
    affinity_key,
    decide,
    estimate_prompt_tokens,
    resolve_auto_c2_max_tokens,
    rewrite,
    validate_body,
)

CFG = build_config({"routing": {"model_aliases": {"deep": "D"}}})
MSG = [{"role": "user", "content": "hello"}]


def d(body: dict, headers: dict | None = None, key: KeyConfig | None = None):
    return decide(body, headers or {}, CFG, key)


def test_default_tier_b_clamps_and_charges_tier_limit() -> None:
    x = d({"messages": MSG})
    assert (x.tier, x.reason, x.max_tokens) == ("B", "default", 4096)  # missing: tier limit, not the window
    assert d({"messages": MSG, "max_tokens": 65536}).max_tokens == 4096  # web UI asks 65536
    assert d({"messages": MSG, "max_tokens": 100}).max_tokens == 100


def test_rule_order() -> None:
    img = [{"role": "user", "content": [{"type": "text", "text": "what"},
                                        {"type": "image_url", "image_url": {"url": "data:"}}]}]
    assert d({"messages": img}).tier == "V"
    assert d({"messages": MSG, "tools": [{"type": "function"}]}).reason == "tools"
    assert d({"messages": MSG}, {"x-llamarig-agent": "1"}).tier == "C2"
    assert d({"messages": MSG}, {"user-agent": "pi-ai/0.3"}).reason == "user_agent"
    sysm = [{"role": "system", "content": "You are a coding agent."}] + MSG
    assert d({"messages": sysm}).reason == "system_prompt"
    assert d({"messages": MSG, "model": "deep"}).tier == "D"
    key = KeyConfig(key="k" * 10, name="a", tier="C1")
    assert d({"messages": img}, key=key).tier == "C1"  # key beats content rules
    assert d({"messages": img}, {"x-llamarig-tier": "A"}, key=key).tier == "A"  # header beats all
    with pytest.raises(RequestError) as e:
        d({"messages": MSG}, {"x-llamarig-tier": "nope"})
    assert e.value.status == 400 and e.value.code == "unknown_tier"


def test_resolve_auto_c2_max_tokens_seed_004() -> None:
    c2, b = CFG.tiers["C2"], CFG.tiers["B"]
    assert resolve_auto_c2_max_tokens(32768, c2, cron=False) == 32768  # pi-ai default
    assert resolve_auto_c2_max_tokens(100000, c2, cron=False) == 32768  # capped
    assert resolve_auto_c2_max_tokens(6144, c2, cron=False) is None  # not more than the tier
    assert resolve_auto_c2_max_tokens(None, c2, cron=False) is None
    assert resolve_auto_c2_max_tokens(32768, c2, cron=True) is None  # cron never widens
    assert resolve_auto_c2_max_tokens(32768, b, cron=False) is None  # only C2
    x = d({"messages": MSG, "tools": [{}], "max_tokens": 32768})
    assert x.widened and x.max_tokens == 32768 and x.timeout_s == 1800.0
    y = d({"messages": MSG, "tools": [{}]})
    assert not y.widened and y.max_tokens == 6144


def test_cron_lock() -> None:
    h = {"x-llamarig-source": "cron-nightly"}
    x = d({"messages": MSG, "max_tokens": 32768, "tools": [{}]}, h)
    assert x.cron and x.tier == "C2" and x.max_tokens == 2048 and not x.widened  # thinking tier: 2K
    assert x.reasoning_budget == 1024  # budget kept below max_tokens
    assert d({"messages": MSG}, h).max_tokens == 1024  # non-thinking tier: 1K
    assert d({"messages": MSG}, h).priority == CFG.cron.priority
    assert not d({"messages": MSG}, {"x-llamarig-source": "interactive"}).cron


def test_rewrite_fields() -> None:
    body = {"messages": MSG, "max_completion_tokens": 99999, "n_predict": 50000, "tools": [{}],
            "chat_template_kwargs": {"foo": 1}}
    x = d(body)
    up = rewrite(body, x, CFG, CHAT)
    assert "n_predict" not in up and "max_completion_tokens" not in up
    assert up["max_tokens"] == 32768  # n_predict wins (llama-server rule), then widened
    assert up["chat_template_kwargs"] == {"foo": 1, "enable_thinking": True}
    assert up["reasoning_budget_tokens"] == 4096
    assert up["t_max_predict_ms"] == 1800000
    assert body["n_predict"] == 50000  # input untouched
    nb = {"prompt": "hi", "max_tokens": 10}
    upn = rewrite(nb, decide(nb, {}, CFG), CFG, NATIVE)
    assert upn["n_predict"] == 10 and "max_tokens" not in upn and "chat_template_kwargs" not in upn
    ub = rewrite({"messages": MSG}, d({"messages": MSG}), CFG, CHAT)
    assert ub["chat_template_kwargs"] == {"enable_thinking": False} and "reasoning_budget_tokens" not in ub
    ua = rewrite({"messages": MSG, "model": "deep"}, d({"messages": MSG, "model": "deep"}), CFG, CHAT)
    assert "model" not in ua and ua["reasoning_effort"] == "medium"


def test_sampling_override() -> None:
    cfg = build_config({"tiers": {"B": {"sampling": {"temperature": 0.1, "top_k": 5}}}})
    body = {"messages": MSG, "temperature": 1.5}
    up = rewrite(body, decide(body, {}, cfg), cfg, CHAT)
    assert up["temperature"] == 0.1 and up["top_k"] == 5


@pytest.mark.parametrize("body,kind,param", [
    ([], CHAT, None), ({"messages": []}, CHAT, "messages"), ({"messages": "hi"}, CHAT, "messages"),
    ({"messages": [{"content": "x"}]}, CHAT, "messages[0]"), ({"messages": MSG, "max_tokens": "5"}, CHAT, "max_tokens"),
    ({"messages": MSG, "max_tokens": True}, CHAT, "max_tokens"), ({"messages": MSG, "stream": "yes"}, CHAT, "stream"),
    ({"messages": MSG, "temperature": "hot"}, CHAT, "temperature"), ({"prompt": 5}, NATIVE, "prompt"),
    ({"messages": MSG, "model": 3}, CHAT, "model"),
    # OpenAI: user/system/developer/tool messages need content; an assistant one unless it has tool_calls
    ({"messages": [{"role": "user"}]}, CHAT, "messages[0].content"),
    ({"messages": [{"role": "system", "content": None}] + MSG}, CHAT, "messages[0].content"),
    ({"messages": [{"role": "user", "content": []}]}, CHAT, "messages[0].content"),
    ({"messages": MSG + [{"role": "assistant"}]}, CHAT, "messages[1].content"),
    ({"messages": MSG + [{"role": "tool", "tool_call_id": "1"}]}, CHAT, "messages[1].content"),
    # token limits below 1 (llama-server's n_predict -1 = unlimited and 0 = prompt only are the exceptions)
    ({"messages": MSG, "max_tokens": 0}, CHAT, "max_tokens"),
    ({"messages": MSG, "max_tokens": -1}, CHAT, "max_tokens"),
    ({"messages": MSG, "max_completion_tokens": 0}, CHAT, "max_completion_tokens"),
    ({"prompt": "x", "max_tokens": -3}, OAI_COMPLETION, "max_tokens"),
    ({"prompt": "x", "n_predict": -2}, NATIVE, "n_predict"),
])
def test_validation(body: object, kind: str, param: str | None) -> None:
    with pytest.raises(RequestError) as e:
        validate_body(body, kind)
    assert e.value.status == 400 and e.value.param == param
    assert e.value.body()["error"]["type"] == "invalid_request_error"


def test_validation_error_bodies_follow_openai() -> None:
    with pytest.raises(RequestError) as e:
        validate_body({"messages": [{"role": "user"}]}, CHAT)
    assert e.value.body()["error"] == {"message": "Missing required parameter: 'messages[0].content'.",
                                       "type": "invalid_request_error", "param": "messages[0].content",
                                       "code": "missing_required_parameter"}
    with pytest.raises(RequestError) as e:
        validate_body({"messages": MSG, "max_tokens": 0}, CHAT)
    err = e.value.body()["error"]
    assert (err["param"], err["code"]) == ("max_tokens", "integer_below_min_value")
    assert "'max_tokens'" in err["message"] and "got 0" in err["message"]


def test_validation_accepts() -> None:
    tool_call = {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ok = [
        ({"messages": MSG + [{"role": "assistant", "content": None, "tool_calls": [tool_call]},
                             {"role": "tool", "tool_call_id": "1", "content": "42"}]}, CHAT),
        ({"messages": MSG + [{"role": "assistant", "tool_calls": [tool_call]}]}, CHAT),
        ({"messages": [{"role": "user", "content": ""}]}, CHAT),  # empty text is content (OpenAI accepts it)
        ({"messages": MSG, "max_tokens": 1, "max_completion_tokens": None}, CHAT),
        ({"prompt": "x", "n_predict": -1}, NATIVE),
    ]
    for body, kind in ok:
        assert validate_body(body, kind) is body
    # n_predict -1 (unlimited in llama-server) is charged and sent as the tier's limit
    x = d({"prompt": "x", "n_predict": -1})
    assert (x.requested_max_tokens, x.max_tokens) == (None, 4096)
    assert rewrite({"prompt": "x", "n_predict": -1}, x, CFG, NATIVE)["n_predict"] == 4096


def test_estimate_and_affinity() -> None:
    assert estimate_prompt_tokens({"prompt": [1, 2, 3]}, 2.0) == 3
    assert estimate_prompt_tokens({"messages": [{"role": "user", "content": "abcd"}]}, 2.0) == 2 + 8
    zh = estimate_prompt_tokens({"prompt": "你好世界"}, 2.0)  # 12 bytes
    assert zh == 6
    a = affinity_key({"messages": MSG + [{"role": "assistant", "content": "x"}]}, 2)
    b = affinity_key({"messages": MSG + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "more"}]}, 2)
    assert a == b and a is not None
    assert affinity_key({"messages": [{"role": "user", "content": "other"}]}, 2) != a
    assert affinity_key({"messages": MSG}, 0) is None


def test_chinese_agent_prompts_land_in_c2() -> None:
    """Only English patterns used to match: `你是一个编程助手` landed in B (issue 34)."""
    for system in ("你是一个编程助手，帮用户改代码。", "你是资深软件工程师", "你是一个代码助手", "You are a coding agent."):
        x = d({"messages": [{"role": "system", "content": system}, *MSG]})
        assert (x.tier, x.reason) == ("C2", "system_prompt"), system
    assert d({"messages": [{"role": "system", "content": "你是一个乐于助人的助手"}, *MSG]}).tier == "B"


def test_content_rules_for_any_tier_with_their_reason() -> None:
    cfg = build_config({"routing": {"rules": [
        {"name": "format-zh", "user": r"^(请)?(帮我)?(格式化|排版|整理成表格)", "tier": "A"},
        {"name": "deep", "user": r"(?i)^(deep analysis|深度分析)", "tier": "D"},
        {"system": r"(?i)\banaly[sz]t\b|分析师", "tier": "C1"},
    ]}})
    def tier(body: dict, headers: dict | None = None) -> tuple[str, str]:
        x = decide(body, headers or {}, cfg)
        return x.tier, x.reason
    assert tier({"messages": [{"role": "user", "content": "请帮我格式化这段 JSON"}]}) == ("A", "rule:format-zh")
    assert tier({"messages": [{"role": "user", "content": "一些背景"}, {"role": "assistant", "content": "好"},
                              {"role": "user", "content": "深度分析一下这份财报"}]}) == ("D", "rule:deep")
    assert tier({"messages": [{"role": "system", "content": "你是一名金融分析师"}, *MSG]}) == ("C1", "rule:2")
    assert tier({"prompt": "Deep analysis of the logs"}) == ("D", "rule:deep")  # completions: the prompt
    # the tier header still wins; an unmatched request falls through to the agent rules and the default
    assert tier({"messages": [{"role": "user", "content": "格式化"}]}, {"x-llamarig-tier": "B"}) == ("B", "header")
    assert tier({"messages": MSG, "tools": [{"type": "function"}]}) == ("C2", "tools")
    assert tier({"messages": MSG}) == ("B", "default")


def test_caps_routes_and_on_busy_of_a_decision() -> None:
    cfg = build_config({"backends": [{"url": "http://a:1", "name": "a"}, {"url": "http://b:1", "name": "b"}],
                        "tiers": {"C2": {"max_slots": 3, "backends": ["a", "b"]}, "A": {"on_busy": "reject"}},
                        "cron": {"max_slots": 1, "max_pool_share": 0.25, "backends": ["b"]}})
    x = decide({"messages": MSG, "tools": [{"type": "function"}]}, {}, cfg)
    assert [(s.group, s.pool_share, s.slots) for s in x.shares] == [("tier:C2", None, 3)]
    assert x.backends == frozenset({"a", "b"}) and x.on_busy == "queue"
    cron = decide({"messages": MSG, "tools": [{"type": "function"}]}, {"x-llamarig-source": "cron-nightly"}, cfg)
    assert [(s.group, s.pool_share, s.slots) for s in cron.shares] == [("tier:C2", None, 3), ("cron", 0.25, 1)]
    assert cron.backends == frozenset({"b"}) and cron.priority == 10  # the routes meet
    assert decide({"messages": MSG}, {"x-llamarig-tier": "A"}, cfg).on_busy == "reject"
    assert decide({"messages": MSG}, {}, cfg).backends is None  # B: any backend


def test_cron_by_key_or_any_case_prefix_with_its_queue_timeout_and_yield() -> None:
    """Report 004's owner: ``CRON-digest`` got 4096 (the prefix was case-sensitive), and a key
    could not mark its requests as cron jobs."""
    cfg = build_config({"cron": {"yields": True, "queue_timeout_s": 600},
                        "tiers": {"C2": {"max_tokens": 6144, "queue_timeout_s": 5}}})
    for v in ("cron-digest", "CRON-digest", "Cron"):
        x = decide({"messages": MSG}, {"x-llamarig-source": v}, cfg)
        assert (x.cron, x.max_tokens, x.yields, x.queue_timeout_s) == (True, 1024, True, 600)
    key = KeyConfig(key="k" * 8, name="nightly", cron=True)
    assert decide({"messages": MSG}, {}, cfg, key).cron
    plain = decide({"messages": MSG}, {}, cfg)
    assert (plain.cron, plain.yields, plain.queue_timeout_s) == (False, False, None)
    agent = decide({"messages": MSG, "tools": [{"type": "function"}]}, {}, cfg)
    assert (agent.tier, agent.queue_timeout_s) == ("C2", 5)
