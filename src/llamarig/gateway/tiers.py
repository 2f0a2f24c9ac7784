"""Pure request handling: validate a body, choose its tier, and rewrite what goes upstream.

Tier rules (first match wins): explicit tier header > the API key's tier > model alias >
images (vision tier) > tools / agent header / agent user-agent (agent tier) > content rules
(``routing.rules``, any tier) > an agent's system prompt (``routing.system_patterns``, English and
Chinese) > default tier. Cron requests (a header whose value starts with a prefix) keep their tier
but are locked to a small budget (the 307K-context MTP field report: "CRON恒锁1K/2K").

llama-server facts used here (tools/server in the vendored tree):
- ``n_predict`` has the aliases ``max_tokens`` and ``max_completion_tokens``; if ``n_predict`` is
  present it wins (server-schema.cpp field n_predict; server-common.cpp "if n_predict is
  present, we overwrite the value specified earlier by max_tokens"). So we delete all three and
  write one.
- ``chat_template_kwargs.enable_thinking`` must be a boolean (server-common.cpp, "invalid type
  for enable_thinking"); ``reasoning_budget_tokens`` -1 means the server default.
- ``t_max_predict_ms`` stops generation after that much generation time, at a newline
  (server-context.cpp, "stopped by time limit").
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeGuard

from llamarig.gateway.config import GatewayConfig, KeyConfig, TierConfig
from llamarig.gateway.errors import (
    RequestError as RequestError,  # re-exported (it was defined here)
)
from llamarig.gateway.pool import Share
from llamarig.i18n import _

#: endpoint kinds
CHAT = "chat"  # /v1/chat/completions
OAI_COMPLETION = "completion"  # /v1/completions
NATIVE = "native"  # llama-server /completion

#: tokens charged per image by the local estimate (the backend count is exact)
ESTIMATE_IMAGE_TOKENS = 1024


@dataclass(frozen=True)
class Decision:
    """The tier chosen for one request and the limits applied to it."""

    tier: str
    reason: str
    cron: bool
    priority: int
    max_tokens: int  # written upstream and charged to the pool
    requested_max_tokens: int | None
    widened: bool  # resolve_auto_c2_max_tokens fired
    timeout_s: float | None
    reasoning_budget: int | None
    thinking: bool | None
    shares: tuple[Share, ...] = ()  # its groups (tier:NAME, cron) and their caps
    backends: frozenset[str] | None = None  # where it may go (its tier's and cron's routes); None: any
    on_busy: str = "queue"  # "reject": 429 at once when no backend can take it now
    yields: bool = False  # admitted only while better priorities are idle (its tier's or cron's ``yields``)
    yield_after_s: float = 0.0  # ... and have been for this long
    pin_ttl_s: float | None = None  # its tier's: its session keeps a slot (llamarig.gateway.slots)
    queue_timeout_s: float | None = None  # its tier's or cron's; None: admission.queue_timeout_s


# ------------------------------------------------------------------------------ validation


def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def validate_body(body: Any, kind: str) -> dict[str, Any]:
    """Check the fields the gateway reads or rewrites; RequestError(400) naming the field."""
    if not isinstance(body, dict):
        raise RequestError(400, _("request body must be a JSON object"))
    if kind == CHAT:
        _check_messages(body.get("messages"))
    else:
        p = body.get("prompt")
        if p is None or not isinstance(p, (str, list)):
            raise RequestError(400, _("'{field}' must be a string or an array").format(field="prompt"), param="prompt")
    for f in ("max_tokens", "max_completion_tokens", "n_predict"):
        _check_limit(f, body.get(f))
    _check_types(body)
    return body


def _check_messages(msgs: Any) -> None:
    if not isinstance(msgs, list) or not msgs:
        raise RequestError(400, _("'{field}' must be a non-empty array").format(field="messages"), param="messages")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(400, _("'{field}' must be an object with a string 'role'").format(field=f"messages[{i}]"),
                               param=f"messages[{i}]")
        c = m.get("content")
        if c is not None and not isinstance(c, (str, list)):
            raise RequestError(400, _("'{field}' must be a string or an array").format(field=f"messages[{i}].content"),
                               param=f"messages[{i}].content")
        _check_content(m, i)


def _check_limit(f: str, v: Any) -> None:
    if v is None:
        return
    if not _is_int(v):
        raise RequestError(400, _("'{field}' must be an integer").format(field=f), param=f)
    # llama-server: n_predict -1 = unlimited (the tier's limit applies), 0 = evaluate the
    # prompt only (warms the prompt cache); OpenAI's fields need at least 1
    if v < 1 and not (f == "n_predict" and v in (-1, 0)):
        want = _("-1 (unlimited), 0 (prompt only) or a value >= 1") if f == "n_predict" else _("a value >= 1")
        raise RequestError(400, _("Invalid '{field}': integer below minimum value. Expected {want}, but got {value} "
                                  "instead.").format(field=f, want=want, value=v),
                           param=f, code="integer_below_min_value")


#: fields the gateway reads, and the JSON type each must have when present (and not null)
_TYPES: tuple[tuple[str, tuple[type, ...], str], ...] = (
    ("stream", (bool,), "a boolean"), ("model", (str,), "a string"), ("tools", (list,), "an array"),
    ("temperature", (int, float), "a number"), ("top_p", (int, float), "a number"),
    ("chat_template_kwargs", (dict,), "an object"),
)


def _check_types(body: Mapping[str, Any]) -> None:
    for f, types_, what in _TYPES:
        v = body.get(f)
        if v is None or (isinstance(v, types_) and not (isinstance(v, bool) and bool not in types_)):
            continue
        msg = {"a boolean": _("'{field}' must be a boolean"), "a string": _("'{field}' must be a string"),
               "an array": _("'{field}' must be an array"), "a number": _("'{field}' must be a number"),
               "an object": _("'{field}' must be an object")}[what]
        raise RequestError(400, msg.format(field=f), param=f)


#: roles whose messages must carry content (OpenAI: "content: Required" for these)
CONTENT_ROLES = frozenset({"system", "developer", "user", "tool"})


def _check_content(m: Mapping[str, Any], i: int) -> None:
    """OpenAI's rule: system/developer/user/tool messages need content (a string, or a non-empty
    array for the roles that take parts); an assistant message may leave it null or out only when
    it carries ``tool_calls`` (or the legacy ``function_call``). Other roles are left to the backend."""
    role, c = m["role"], m.get("content")
    if role in CONTENT_ROLES:
        if c is None:
            raise RequestError(400, _("Missing required parameter: '{field}'.").format(field=f"messages[{i}].content"),
                               param=f"messages[{i}].content", code="missing_required_parameter")
        if isinstance(c, list) and not c:
            raise RequestError(400, _("Invalid '{field}': empty array. Expected an array with minimum length 1, "
                                      "but got an empty array instead.").format(field=f"messages[{i}].content"),
                               param=f"messages[{i}].content", code="empty_array")
    elif role == "assistant" and c is None and not m.get("tool_calls") and not m.get("function_call"):
        raise RequestError(400, _("Missing required parameter: '{field}' (an assistant message needs content "
                                  "unless it has tool_calls).").format(field=f"messages[{i}].content"),
                           param=f"messages[{i}].content", code="missing_required_parameter")


# ------------------------------------------------------------------------------ reading


def requested_max_tokens(body: Mapping[str, Any]) -> int | None:
    """What the client asked for; ``n_predict`` wins as in llama-server. <0 or absent: None."""
    for f in ("n_predict", "max_completion_tokens", "max_tokens"):
        v = body.get(f)
        if _is_int(v):
            return v if v >= 0 else None
    return None


def has_images(body: Mapping[str, Any]) -> bool:
    """Image parts in chat content (OpenAI ``image_url`` / ``input_image``) or native multimodal data."""
    if body.get("multimodal_data"):
        return True
    p = body.get("prompt")
    if isinstance(p, dict) and p.get("multimodal_data"):
        return True
    for m in body.get("messages") or ():
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, list):
            for part in c:
                if isinstance(part, dict) and part.get("type") in ("image_url", "input_image", "image"):
                    return True
    return False


def count_images(body: Mapping[str, Any]) -> int:
    n = 0
    for m in body.get("messages") or ():
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, list):
            n += sum(1 for part in c if isinstance(part, dict) and part.get("type") in ("image_url", "input_image", "image"))
    return n


def _content_text(c: Any) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "".join(p.get("text", "") for p in c if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def system_text(body: Mapping[str, Any]) -> str:
    return "\n".join(_content_text(m.get("content")) for m in body.get("messages") or ()
                     if isinstance(m, dict) and m.get("role") in ("system", "developer"))


@lru_cache(maxsize=64)
def _pattern(p: str) -> re.Pattern[str]:
    return re.compile(p)


# ------------------------------------------------------------------------------ tier choice


def last_user_text(body: Mapping[str, Any]) -> str:
    """The text of the last user message (chat), or the prompt (completions)."""
    msgs = body.get("messages")
    if isinstance(msgs, list):
        for m in reversed(msgs):
            if isinstance(m, dict) and m.get("role") == "user":
                return _content_text(m.get("content"))
        return ""
    return prompt_text(body)


def choose_tier(body: Mapping[str, Any], headers: Mapping[str, str], cfg: GatewayConfig,
                key: KeyConfig | None = None) -> tuple[str, str]:
    """(tier name, reason). ``headers``: case-insensitive (aiohttp) or lower-case keys.
    RequestError on an unknown tier header. First match wins: the header, the key's tier, a
    model alias, images, an agent signal (tools, an agent header or user-agent), a content rule
    (``routing.rules``), an agent's system prompt (``routing.system_patterns``), the default."""
    return (_explicit(body, headers, cfg, key) or _agent_signal(body, headers, cfg) or _by_rule(body, cfg)
            or _agent_prompt(body, cfg) or (cfg.routing.default_tier, "default"))


def _explicit(body: Mapping[str, Any], headers: Mapping[str, str], cfg: GatewayConfig,
              key: KeyConfig | None) -> tuple[str, str] | None:
    r = cfg.routing
    h = headers.get(r.tier_header)
    if h:
        if h not in cfg.tiers:
            raise RequestError(400, _("unknown tier {tier} in header {header}; tiers: {tiers}").format(
                tier=repr(h), header=r.tier_header, tiers=", ".join(cfg.tiers)),
                               param=r.tier_header, code="unknown_tier")
        return h, "header"
    if key is not None and key.tier:
        return key.tier, "api_key"
    model = body.get("model")
    if isinstance(model, str) and model in r.model_aliases:
        return r.model_aliases[model], "model_alias"
    if r.vision_tier and has_images(body):
        return r.vision_tier, "images"
    return None


def _agent_signal(body: Mapping[str, Any], headers: Mapping[str, str], cfg: GatewayConfig) -> tuple[str, str] | None:
    """Tools in the request, an agent header or an agent's user-agent: the agent tier."""
    r = cfg.routing
    if not r.agent_tier:
        return None
    if r.tools_mean_agent and body.get("tools"):
        return r.agent_tier, "tools"
    if any(ah in headers for ah in r.agent_headers):
        return r.agent_tier, "agent_header"
    ua = headers.get("user-agent", "").lower()
    if ua and any(p in ua for p in r.agent_user_agents):
        return r.agent_tier, "user_agent"
    return None


def _by_rule(body: Mapping[str, Any], cfg: GatewayConfig) -> tuple[str, str] | None:
    """The first content rule that matches: ``rule:NAME`` (or ``rule:INDEX``) as the reason."""
    rules = cfg.routing.rules
    if not rules:
        return None
    system = user = None
    for i, rule in enumerate(rules):
        if rule.system is not None:
            system = system_text(body) if system is None else system
            hit = bool(system) and _pattern(rule.system).search(system) is not None
        else:
            user = last_user_text(body) if user is None else user
            hit = bool(user) and _pattern(rule.user or "").search(user) is not None
        if hit:
            return rule.tier, f"rule:{rule.name or i}"
    return None


def _agent_prompt(body: Mapping[str, Any], cfg: GatewayConfig) -> tuple[str, str] | None:
    """A system prompt that says it is a coding agent (English or Chinese): the agent tier."""
    r = cfg.routing
    if r.agent_tier is None or not r.system_patterns:
        return None
    sys_text = system_text(body)
    if sys_text and any(_pattern(p).search(sys_text) for p in r.system_patterns):
        return r.agent_tier, "system_prompt"
    return None


def is_cron(headers: Mapping[str, str], cfg: GatewayConfig, key: KeyConfig | None = None) -> bool:
    """A cron job: its key says so, or the cron header's value starts with the prefix (either
    case: ``CRON-digest`` matches ``cron``)."""
    if key is not None and key.cron:
        return True
    v = headers.get(cfg.cron.header.lower())
    return bool(v and v.lower().startswith(cfg.cron.prefix.lower()))


def resolve_auto_c2_max_tokens(requested: int | None, tier: TierConfig, cron: bool) -> int | None:
    """The 307K-context MTP field report's conditional widening: only for a tier with ``long_output_max_tokens`` (C2 by
    default), never for cron, only when the client explicitly asked for more than the tier's
    limit; capped at ``long_output_max_tokens``. None: no widening."""
    if cron or tier.long_output_max_tokens is None:
        return None
    if requested is None or requested <= tier.max_tokens:
        return None
    return min(requested, tier.long_output_max_tokens)


def resolve_max_tokens(requested: int | None, limit: int) -> int:
    """A missing max_tokens is charged as the tier's limit (never the whole window); larger
    requests are clamped (the 307K-context MTP field report resolve_max_tokens)."""
    return limit if requested is None else min(requested, limit)


def decide(body: Mapping[str, Any], headers: Mapping[str, str], cfg: GatewayConfig,
           key: KeyConfig | None = None) -> Decision:
    name, reason = choose_tier(body, headers, cfg, key)
    tier = cfg.tiers[name]
    cron = is_cron(headers, cfg, key)
    req = requested_max_tokens(body)
    widened_to = resolve_auto_c2_max_tokens(req, tier, cron)
    timeout = tier.timeout_s
    if widened_to is not None:
        max_tokens = widened_to
        timeout = tier.long_output_timeout_s or timeout
    elif cron:
        lock = cfg.cron.max_tokens_thinking if tier.thinking else cfg.cron.max_tokens
        max_tokens = resolve_max_tokens(req, lock)
        timeout = cfg.cron.timeout_s or timeout
    else:
        max_tokens = resolve_max_tokens(req, tier.max_tokens)
    budget = tier.reasoning_budget if tier.thinking else None
    if budget is not None and budget >= 0 and budget >= max_tokens:
        budget = max_tokens // 2  # keep room for the answer: thinking counts toward n_predict
    return Decision(tier=name, reason=reason, cron=cron, priority=_priority(tier, cron, key, cfg), max_tokens=max_tokens,
                    requested_max_tokens=req, widened=widened_to is not None, timeout_s=timeout,
                    reasoning_budget=budget, thinking=tier.thinking, **_limits(tier, cron, cfg))


def _priority(tier: TierConfig, cron: bool, key: KeyConfig | None, cfg: GatewayConfig) -> int:
    if cron:
        return cfg.cron.priority
    if key is not None and key.priority is not None:
        return key.priority
    return tier.priority


def _limits(tier: TierConfig, cron: bool, cfg: GatewayConfig) -> dict[str, Any]:
    """What the request may hold (its tier's cap and, for a cron job, cron's), where it may go
    (both routes), and whether it queues (either one rejecting when busy rejects)."""
    shares = [Share(f"tier:{tier.name}", tier.max_pool_share, tier.max_slots)]
    routes = [set(tier.backends)] if tier.backends else []
    on_busy = tier.on_busy
    if cron:
        c = cfg.cron
        shares.append(Share("cron", c.max_pool_share, c.max_slots))
        routes += [set(c.backends)] if c.backends else []
        on_busy = "reject" if "reject" in (on_busy, c.on_busy) else "queue"
    allowed = frozenset(set.intersection(*routes)) if routes else None
    yields = tier.yields or (cron and cfg.cron.yields)
    after = max(tier.yield_after_s if tier.yields else 0.0, cfg.cron.yield_after_s if cron and cfg.cron.yields else 0.0)
    qt = cfg.cron.queue_timeout_s if cron and cfg.cron.queue_timeout_s is not None else tier.queue_timeout_s
    return {"shares": tuple(shares), "backends": allowed, "on_busy": on_busy, "yields": yields,
            "yield_after_s": after, "queue_timeout_s": qt, "pin_ttl_s": tier.pin_ttl_s}


def rewrite(body: Mapping[str, Any], d: Decision, cfg: GatewayConfig, kind: str) -> dict[str, Any]:
    """The body actually sent upstream (a new dict; ``body`` is not modified)."""
    tier = cfg.tiers[d.tier]
    out = dict(body)
    for f in ("n_predict", "max_tokens", "max_completion_tokens"):
        out.pop(f, None)
    out["n_predict" if kind == NATIVE else "max_tokens"] = d.max_tokens
    if d.thinking is not None and kind == CHAT:
        ctk = dict(out.get("chat_template_kwargs") or {})
        ctk["enable_thinking"] = d.thinking
        out["chat_template_kwargs"] = ctk
    if d.reasoning_budget is not None:
        out["reasoning_budget_tokens"] = d.reasoning_budget
    if tier.reasoning_effort and kind == CHAT and d.thinking:
        out["reasoning_effort"] = tier.reasoning_effort
    if d.timeout_s:
        out["t_max_predict_ms"] = max(1, round(d.timeout_s * 1000))  # 0 would mean "no limit"
    for k, v in tier.sampling.items():
        out[k] = v
    model = out.get("model")
    if isinstance(model, str) and model in cfg.routing.model_aliases:
        out.pop("model")  # a tier alias means nothing to llama-server
    return out


# ------------------------------------------------------------------------------ tokens


def prompt_text(body: Mapping[str, Any]) -> str:
    if "messages" in body:
        return "\n".join(_content_text(m.get("content")) for m in body.get("messages") or () if isinstance(m, dict))
    p = body.get("prompt")
    if isinstance(p, str):
        return p
    if isinstance(p, list):
        return "\n".join(x for x in p if isinstance(x, str))
    return ""


def estimate_prompt_tokens(body: Mapping[str, Any], bytes_per_token: float) -> int:
    """Fast local estimate: ceil(UTF-8 bytes / bytes_per_token) + 8 per message (template
    overhead) + 1024 per image. With the default 2.0 bytes/token it over-counts English text
    (~4 bytes/token in BPE vocabularies) and roughly matches Chinese (3 bytes/char, ~1.5
    chars/token); docs/gateway.md gives the error."""
    p = body.get("prompt")
    if isinstance(p, list) and p and all(_is_int(x) for x in p):
        return len(p)  # already token ids
    n = math.ceil(len(prompt_text(body).encode("utf-8")) / bytes_per_token)
    n += 8 * len(body.get("messages") or ()) + ESTIMATE_IMAGE_TOKENS * count_images(body)
    return max(n, 1)


def affinity_key(body: Mapping[str, Any], n_messages: int) -> str | None:
    """Hash of the first ``n_messages`` messages (or the first 512 prompt characters): requests of
    one conversation share it, so they can return to the backend whose prompt cache has them."""
    if n_messages <= 0:
        return None
    msgs = body.get("messages")
    if isinstance(msgs, list) and msgs:
        head = [(m.get("role"), _content_text(m.get("content"))) for m in msgs[:n_messages] if isinstance(m, dict)]
        raw = json.dumps(head, ensure_ascii=False)
    else:
        p = prompt_text(body)
        if not p:
            return None
        raw = p[:512]
    return hashlib.blake2b(raw.encode("utf-8"), digest_size=8).hexdigest()
