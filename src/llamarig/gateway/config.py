"""Gateway configuration: a TOML or YAML file (or nothing: ``--backend URL``), validated into
frozen dataclasses with one-line errors that name the file and the key.

The built-in tiers are the 307K-context MTP field report's (tests/fixtures/seeds/004_*.txt, section 三): B daily,
C1 analysis, C2 code+agent, D deep analysis; A formatting and V vision are named there without
numbers, so their numbers here are llamarig's defaults (documented in docs/gateway.md).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, TypeVar, overload
from urllib.parse import urlsplit, urlunsplit

from llamarig.errors import InputError
from llamarig.i18n import _

# ------------------------------------------------------------------------------ dataclasses


@dataclass(frozen=True)
class TierConfig:
    """What a tier does to the request sent upstream."""

    name: str
    max_tokens: int
    thinking: bool | None = None  # None: leave the client's choice alone
    reasoning_budget: int | None = None  # reasoning_budget_tokens (server-common.cpp)
    reasoning_effort: str | None = None
    timeout_s: float | None = None  # -> t_max_predict_ms and the upstream read timeout
    priority: int = 0  # lower is served first
    sampling: Mapping[str, Any] = field(default_factory=dict)  # forced sampling fields
    # resolve_auto_c2_max_tokens: widen up to this when the client asks for more (the 307K-context MTP field report)
    long_output_max_tokens: int | None = None
    long_output_timeout_s: float | None = None


@dataclass(frozen=True)
class BackendConfig:
    url: str
    name: str
    pool_tokens: int | None = None  # None: from /props
    slots: int | None = None  # None: /props total_slots
    slot_ctx: int | None = None  # None: /props default_generation_settings.n_ctx
    unified: bool = True  # -kvu: one pool shared by the slots (see admission.pool_from_props)
    api_key: str | None = None  # sent upstream as Bearer
    weight: float = 1.0


@dataclass(frozen=True)
class KeyConfig:
    key: str
    name: str
    tier: str | None = None
    priority: int | None = None
    max_concurrent: int = 0  # 0: unlimited (in flight + queued)


@dataclass(frozen=True)
class RoutingConfig:
    default_tier: str = "B"
    tier_header: str = "x-llamarig-tier"
    vision_tier: str | None = "V"
    agent_tier: str | None = "C2"
    tools_mean_agent: bool = True
    agent_headers: tuple[str, ...] = ("x-llamarig-agent",)
    agent_user_agents: tuple[str, ...] = ("pi-ai", "claude-cli", "aider", "opencode", "codex", "cline", "roo")
    system_patterns: tuple[str, ...] = (r"(?i)\b(coding agent|software engineer|you are (an? )?(interactive )?(cli|coding) (tool|assistant))\b",)
    model_aliases: Mapping[str, str] = field(default_factory=dict)  # model name -> tier
    affinity_messages: int = 2


@dataclass(frozen=True)
class CronConfig:
    """The 307K-context MTP field report: "CRON恒锁1K/2K", recognised by a header prefix."""

    header: str = "x-llamarig-source"
    prefix: str = "cron"
    max_tokens: int = 1024
    max_tokens_thinking: int = 2048
    priority: int = 10
    timeout_s: float | None = None


@dataclass(frozen=True)
class AdmissionConfig:
    prompt_tokens: str = "backend"  # "backend" (exact, one local round trip) or "estimate"
    estimate_bytes_per_token: float = 2.0
    safety: float = 1.0  # fraction of the pool that may be reserved
    queue_size: int = 256
    queue_timeout_s: float = 30.0
    keepalive_s: float = 5.0  # SSE comment interval while a streaming request waits; 0: never
    retry_after_s: float = 2.0  # floor of Retry-After


@dataclass(frozen=True)
class HealthConfig:
    interval_s: float = 5.0
    timeout_s: float = 3.0
    eject_after: int = 2  # consecutive failures
    recover_after: int = 1  # consecutive successes
    metrics_cache_s: float = 2.0


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = 16 * 1024 * 1024
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 600.0  # silence allowed between upstream bytes
    request_log: str | None = None
    log_content: bool = False
    public_metrics: bool = True
    accept_any_model: bool = False


@dataclass(frozen=True)
class LedgerConfig:
    """Where admission's ledger lives: this process (``url`` None), or a Valkey/Redis server
    that several replicas share (llamarig.gateway.shared_ledger)."""

    url: str | None = None  # redis://HOST:PORT/DB (rediss:// for TLS)
    lease_s: float = 10.0  # a dead replica's reservations expire this long after its last heartbeat
    timeout_s: float = 1.0  # per store round trip; past it a claim is refused (503)
    replica: str | None = None  # this replica's name in the store (default HOST-PID)


@dataclass(frozen=True)
class GatewayConfig:
    server: ServerConfig
    backends: tuple[BackendConfig, ...]
    tiers: Mapping[str, TierConfig]
    routing: RoutingConfig
    cron: CronConfig
    admission: AdmissionConfig
    health: HealthConfig
    keys: tuple[KeyConfig, ...] = ()
    source: str | None = None  # path it was read from
    ledger: LedgerConfig = LedgerConfig()


#: the 307K-context MTP field report's TIER table (B/C1/C2/D) plus A and V (llamarig defaults).
DEFAULT_TIERS: dict[str, TierConfig] = {
    "B": TierConfig("B", max_tokens=4096, thinking=False),
    "C1": TierConfig("C1", max_tokens=6144, thinking=True, reasoning_budget=2048, reasoning_effort="medium"),
    "C2": TierConfig(
        "C2", max_tokens=6144, thinking=True, reasoning_budget=4096,
        long_output_max_tokens=32768, long_output_timeout_s=1800.0,
    ),
    "D": TierConfig("D", max_tokens=6144, thinking=True, reasoning_budget=2048, reasoning_effort="medium"),
    "A": TierConfig("A", max_tokens=2048, thinking=False),
    "V": TierConfig("V", max_tokens=4096, thinking=False),
}


# ------------------------------------------------------------------------------ validation


class _V:
    """Validation helpers that raise InputError naming ``where``."""

    def __init__(self, source: str) -> None:
        self.source = source

    def err(self, where: str, msg: str) -> InputError:
        return InputError(f"{self.source}: " + where + ": " + msg)  # + keeps Messages (llamarig.i18n)

    def table(self, v: Any, where: str) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise self.err(where, _("expected a table/mapping, got {tn}").format(tn=_tn(v)))
        return v

    def known(self, d: dict[str, Any], allowed: set[str], where: str) -> None:
        for k in d:
            if k not in allowed:
                hint = _closest(str(k), allowed)
                raise self.err(f"{where}.{k}" if where else str(k),
                               _("unknown key{hint}; allowed: {allowed}").format(
                                   hint=_(" (did you mean '{name}'?)").format(name=hint) if hint else "",
                                   allowed=", ".join(sorted(allowed))))

    # none_ok=True is the only way to get None back: the overloads tell mypy so
    @overload
    def int_(self, v: Any, where: str, lo: int = 0, none_ok: Literal[False] = False) -> int: ...
    @overload
    def int_(self, v: Any, where: str, lo: int = 0, *, none_ok: bool) -> int | None: ...

    def int_(self, v: Any, where: str, lo: int = 0, none_ok: bool = False) -> int | None:
        if v is None and none_ok:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.err(where, _("expected an integer, got {tn} {value!r}").format(tn=_tn(v), value=v))
        if v < lo:
            raise self.err(where, _("must be >= {lo}, got {value}").format(lo=lo, value=v))
        return v

    @overload
    def num(self, v: Any, where: str, lo: float = 0.0, none_ok: Literal[False] = False) -> float: ...
    @overload
    def num(self, v: Any, where: str, lo: float = 0.0, *, none_ok: bool) -> float | None: ...

    def num(self, v: Any, where: str, lo: float = 0.0, none_ok: bool = False) -> float | None:
        if v is None and none_ok:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.err(where, _("expected a number, got {tn} {value!r}").format(tn=_tn(v), value=v))
        if v < lo:
            raise self.err(where, _("must be >= {lo}, got {value}").format(lo=lo, value=v))
        return float(v)

    @overload
    def bool_(self, v: Any, where: str, none_ok: Literal[False] = False) -> bool: ...
    @overload
    def bool_(self, v: Any, where: str, none_ok: bool) -> bool | None: ...

    def bool_(self, v: Any, where: str, none_ok: bool = False) -> bool | None:
        if v is None and none_ok:
            return None
        if not isinstance(v, bool):
            raise self.err(where, _("expected true or false, got {tn} {value!r}").format(tn=_tn(v), value=v))
        return v

    @overload
    def str_(self, v: Any, where: str, none_ok: Literal[False] = False) -> str: ...
    @overload
    def str_(self, v: Any, where: str, none_ok: bool) -> str | None: ...

    def str_(self, v: Any, where: str, none_ok: bool = False) -> str | None:
        if v is None and none_ok:
            return None
        if not isinstance(v, str) or not v:
            raise self.err(where, _("expected a non-empty string, got {tn} {value!r}").format(tn=_tn(v), value=v))
        return v

    def strs(self, v: Any, where: str) -> tuple[str, ...]:
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.err(where, _("expected a list of strings, got {tn}").format(tn=_tn(v)))
        return tuple(v)


def _tn(v: Any) -> str:
    return {dict: "table", list: "list", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "nothing"}.get(type(v), type(v).__name__)


def _closest(name: str, options: set[str]) -> str | None:
    m = difflib.get_close_matches(name, sorted(options), n=1, cutoff=0.6)
    return m[0] if m else None


_Section = TypeVar("_Section")


def _simple_section(v: _V, raw: Any, where: str, cls: type[_Section], spec: dict[str, str]) -> _Section:
    """Build a flat dataclass from ``raw`` with per-field kinds in ``spec``."""
    if raw is None:
        return cls()
    d = v.table(raw, where)
    v.known(d, set(spec), where)
    kw: dict[str, Any] = {}
    for k, kind in spec.items():
        if k not in d:
            continue
        w = f"{where}.{k}"
        val = d[k]
        if kind == "int":
            kw[k] = v.int_(val, w)
        elif kind == "int1":
            kw[k] = v.int_(val, w, lo=1)
        elif kind == "num":
            kw[k] = v.num(val, w)
        elif kind == "num?":
            kw[k] = v.num(val, w, none_ok=True)
        elif kind == "bool":
            kw[k] = v.bool_(val, w)
        elif kind == "str":
            kw[k] = v.str_(val, w)
        elif kind == "str?":
            kw[k] = v.str_(val, w, none_ok=True)
        elif kind == "strs":
            kw[k] = v.strs(val, w)
        else:  # pragma: no cover - programming error
            raise AssertionError(kind)
    return cls(**kw)


_SERVER = {"host": "str", "port": "int", "max_body_bytes": "int1", "connect_timeout_s": "num",
           "read_timeout_s": "num", "request_log": "str?", "log_content": "bool",
           "public_metrics": "bool", "accept_any_model": "bool"}
_CRON = {"header": "str", "prefix": "str", "max_tokens": "int1", "max_tokens_thinking": "int1",
         "priority": "int", "timeout_s": "num?"}
_ADMISSION = {"prompt_tokens": "str", "estimate_bytes_per_token": "num", "safety": "num",
              "queue_size": "int", "queue_timeout_s": "num", "keepalive_s": "num",
              "retry_after_s": "num"}
_HEALTH = {"interval_s": "num", "timeout_s": "num", "eject_after": "int1", "recover_after": "int1",
           "metrics_cache_s": "num"}
_TIER_KEYS = {"max_tokens", "thinking", "reasoning_budget", "reasoning_effort", "timeout_s",
              "priority", "sampling", "long_output_max_tokens", "long_output_timeout_s"}
_BACKEND_KEYS = {"url", "name", "pool_tokens", "slots", "slot_ctx", "unified", "api_key", "api_key_env", "weight"}
_KEY_KEYS = {"key", "key_env", "name", "tier", "priority", "max_concurrent"}
_ROUTING_KEYS = {"default_tier", "tier_header", "vision_tier", "agent_tier", "tools_mean_agent",
                 "agent_headers", "agent_user_agents", "system_patterns", "model_aliases",
                 "affinity_messages"}
_LEDGER = {"url": "str?", "lease_s": "num", "timeout_s": "num", "replica": "str?"}
_TOP = {"server", "backends", "tiers", "inherit_default_tiers", "routing", "cron", "admission", "health", "keys",
        "ledger"}
_LEDGER_URL = re.compile(r"^rediss?://[^/\s]+(/\d+)?/?$")
_URL = re.compile(r"^https?://[^/\s]+(/[^\s]*)?$")


def _tier(v: _V, name: str, raw: Any, base: TierConfig | None) -> TierConfig:
    where = f"tiers.{name}"
    d = v.table(raw, where)
    v.known(d, _TIER_KEYS, where)
    if base is None and "max_tokens" not in d:
        raise v.err(where, _("a new tier needs max_tokens"))
    t = base or TierConfig(name, max_tokens=1)
    kw: dict[str, Any] = {}
    if "max_tokens" in d:
        kw["max_tokens"] = v.int_(d["max_tokens"], f"{where}.max_tokens", lo=1)
    if "thinking" in d:
        kw["thinking"] = v.bool_(d["thinking"], f"{where}.thinking", none_ok=True)
    if "reasoning_budget" in d:
        kw["reasoning_budget"] = v.int_(d["reasoning_budget"], f"{where}.reasoning_budget", lo=-1, none_ok=True)
    if "reasoning_effort" in d:
        kw["reasoning_effort"] = v.str_(d["reasoning_effort"], f"{where}.reasoning_effort", none_ok=True)
    if "timeout_s" in d:
        kw["timeout_s"] = v.num(d["timeout_s"], f"{where}.timeout_s", none_ok=True)
    if "priority" in d:
        kw["priority"] = v.int_(d["priority"], f"{where}.priority")
    if "sampling" in d:
        s = v.table(d["sampling"], f"{where}.sampling")
        for sk, sv in s.items():
            if not isinstance(sv, (int, float, str, bool, list)):
                raise v.err(f"{where}.sampling.{sk}", _("expected a number, string, boolean or list, got {tn}").format(tn=_tn(sv)))
        kw["sampling"] = dict(s)
    if "long_output_max_tokens" in d:
        kw["long_output_max_tokens"] = v.int_(d["long_output_max_tokens"], f"{where}.long_output_max_tokens", lo=1, none_ok=True)
    if "long_output_timeout_s" in d:
        kw["long_output_timeout_s"] = v.num(d["long_output_timeout_s"], f"{where}.long_output_timeout_s", none_ok=True)
    return replace(t, **kw)


def build_config(data: Mapping[str, Any] | None, source: str = "<config>") -> GatewayConfig:
    """Validate a parsed TOML/YAML document into a GatewayConfig (raises InputError)."""
    v = _V(source)
    d = v.table(dict(data or {}), "top level") if data is not None else {}
    v.known(d, _TOP, "")
    server = _simple_section(v, d.get("server"), "server", ServerConfig, _SERVER)
    if server.port > 65535:
        raise v.err("server.port", _("must be <= 65535, got {port}").format(port=server.port))
    cron = _simple_section(v, d.get("cron"), "cron", CronConfig, _CRON)
    admission = _simple_section(v, d.get("admission"), "admission", AdmissionConfig, _ADMISSION)
    if admission.prompt_tokens not in ("backend", "estimate"):
        raise v.err("admission.prompt_tokens", _("expected 'backend' or 'estimate', got {prompt_tokens!r}").format(prompt_tokens=admission.prompt_tokens))
    if not 0 < admission.safety <= 1:
        raise v.err("admission.safety", _("must be in (0, 1], got {safety}").format(safety=admission.safety))
    if admission.estimate_bytes_per_token <= 0:
        raise v.err("admission.estimate_bytes_per_token", _("must be > 0"))
    health = _simple_section(v, d.get("health"), "health", HealthConfig, _HEALTH)
    ledger = _simple_section(v, d.get("ledger"), "ledger", LedgerConfig, _LEDGER)
    if ledger.url is not None:
        _check_ledger_url(v, ledger.url, "ledger.url")
    if ledger.lease_s <= 0 or ledger.timeout_s <= 0:
        raise v.err("ledger", _("lease_s and timeout_s must be > 0"))

    # tiers
    inherit = v.bool_(d.get("inherit_default_tiers", True), "inherit_default_tiers")
    tiers: dict[str, TierConfig] = dict(DEFAULT_TIERS) if inherit else {}
    if "tiers" in d:
        for name, raw in v.table(d["tiers"], "tiers").items():
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", str(name)):
                raise v.err(f"tiers.{name}", _("a tier name is letters, digits, '_', '-' or '.'"))
            tiers[str(name)] = _tier(v, str(name), raw, tiers.get(str(name)))
    if not tiers:
        raise v.err("tiers", _("no tiers defined (set inherit_default_tiers = true or add [tiers.NAME])"))
    for t in tiers.values():
        if t.reasoning_budget is not None and t.reasoning_budget >= t.max_tokens:
            raise v.err(f"tiers.{t.name}.reasoning_budget",
                        _("{reasoning_budget} must be below max_tokens {max_tokens} (thinking tokens are generated "
                          "tokens and count against n_predict)").format(reasoning_budget=t.reasoning_budget, max_tokens=t.max_tokens))
        if t.long_output_max_tokens is not None and t.long_output_max_tokens < t.max_tokens:
            raise v.err(f"tiers.{t.name}.long_output_max_tokens",
                        _("{long_output_max_tokens} is below the tier's max_tokens {max_tokens}").format(long_output_max_tokens=t.long_output_max_tokens, max_tokens=t.max_tokens))

    @overload
    def tier_ref(name: Any, where: str, none_ok: Literal[False]) -> str: ...
    @overload
    def tier_ref(name: Any, where: str, none_ok: bool = True) -> str | None: ...

    def tier_ref(name: Any, where: str, none_ok: bool = True) -> str | None:
        if name is None and none_ok:
            return None
        s = v.str_(name, where)
        if s not in tiers:
            hint = _closest(s, set(tiers))
            raise v.err(where, _("unknown tier {tier!r}{hint}; tiers: {tiers}").format(
                tier=s, hint=_(" (did you mean '{name}'?)").format(name=hint) if hint else "", tiers=", ".join(tiers)))
        return s

    # routing
    rraw = v.table(d.get("routing", {}), "routing")
    v.known(rraw, _ROUTING_KEYS, "routing")
    rdef = RoutingConfig()
    rkw: dict[str, Any] = {}
    rkw["default_tier"] = tier_ref(rraw.get("default_tier", rdef.default_tier), "routing.default_tier", none_ok=False)
    for attr in ("vision_tier", "agent_tier"):
        rkw[attr] = tier_ref(rraw.get(attr, getattr(rdef, attr) if getattr(rdef, attr) in tiers else None),
                             f"routing.{attr}")
    if "tier_header" in rraw:
        rkw["tier_header"] = v.str_(rraw["tier_header"], "routing.tier_header").lower()
    if "tools_mean_agent" in rraw:
        rkw["tools_mean_agent"] = v.bool_(rraw["tools_mean_agent"], "routing.tools_mean_agent")
    if "agent_headers" in rraw:
        rkw["agent_headers"] = tuple(h.lower() for h in v.strs(rraw["agent_headers"], "routing.agent_headers"))
    if "agent_user_agents" in rraw:
        rkw["agent_user_agents"] = tuple(h.lower() for h in v.strs(rraw["agent_user_agents"], "routing.agent_user_agents"))
    if "system_patterns" in rraw:
        rkw["system_patterns"] = v.strs(rraw["system_patterns"], "routing.system_patterns")
    for i, pat in enumerate(rkw.get("system_patterns", rdef.system_patterns)):
        try:
            re.compile(pat)
        except re.error as e:
            raise v.err(f"routing.system_patterns[{i}]", _("bad regular expression {pat!r}: {error}").format(pat=pat, error=e)) from None
    if "affinity_messages" in rraw:
        rkw["affinity_messages"] = v.int_(rraw["affinity_messages"], "routing.affinity_messages")
    aliases: dict[str, str] = {}
    for alias, tname in v.table(rraw.get("model_aliases", {}), "routing.model_aliases").items():
        aliases[str(alias)] = tier_ref(tname, f"routing.model_aliases.{alias}", none_ok=False)
    rkw["model_aliases"] = aliases
    routing = RoutingConfig(**rkw)

    # backends
    braw = d.get("backends", [])
    if not isinstance(braw, list):
        raise v.err("backends", _("expected a list ([[backends]] in TOML), got {tn}").format(tn=_tn(braw)))
    backends: list[BackendConfig] = []
    names: set[str] = set()
    for i, braw_i in enumerate(braw):
        w = f"backends[{i}]"
        b = v.table(braw_i, w)
        v.known(b, _BACKEND_KEYS, w)
        if "url" not in b:
            raise v.err(w, _("missing url"))
        url = _check_url(v, b["url"], f"{w}.url")
        name = v.str_(b.get("name", f"b{i}"), f"{w}.name")
        if name in names:
            raise v.err(f"{w}.name", _("duplicate backend name {name!r}").format(name=name))
        names.add(name)
        key = v.str_(b.get("api_key"), f"{w}.api_key", none_ok=True)
        if "api_key_env" in b:
            env = v.str_(b["api_key_env"], f"{w}.api_key_env")
            key = os.environ.get(env)
            if not key:
                raise v.err(f"{w}.api_key_env", _("environment variable {env} is not set").format(env=env))
        backends.append(BackendConfig(
            url=url, name=name,
            pool_tokens=v.int_(b.get("pool_tokens"), f"{w}.pool_tokens", lo=1, none_ok=True),
            slots=v.int_(b.get("slots"), f"{w}.slots", lo=1, none_ok=True),
            slot_ctx=v.int_(b.get("slot_ctx"), f"{w}.slot_ctx", lo=1, none_ok=True),
            unified=v.bool_(b.get("unified", True), f"{w}.unified"),
            api_key=key,
            weight=v.num(b.get("weight", 1.0), f"{w}.weight"),
        ))

    # keys
    kraw = d.get("keys", [])
    if not isinstance(kraw, list):
        raise v.err("keys", _("expected a list ([[keys]] in TOML), got {tn}").format(tn=_tn(kraw)))
    keys: list[KeyConfig] = []
    for i, kraw_i in enumerate(kraw):
        w = f"keys[{i}]"
        kd = v.table(kraw_i, w)
        v.known(kd, _KEY_KEYS, w)
        raw_secret: object = kd.get("key")
        if "key_env" in kd:
            env = v.str_(kd["key_env"], f"{w}.key_env")
            raw_secret = os.environ.get(env)
            if not raw_secret:
                raise v.err(f"{w}.key_env", _("environment variable {env} is not set").format(env=env))
        secret = v.str_(raw_secret, f"{w}.key")
        if len(secret) < 8:
            raise v.err(f"{w}.key", _("an API key must be at least 8 characters"))
        keys.append(KeyConfig(
            key=secret,
            name=v.str_(kd.get("name", f"key{i}"), f"{w}.name"),
            tier=tier_ref(kd.get("tier"), f"{w}.tier"),
            priority=v.int_(kd.get("priority"), f"{w}.priority", none_ok=True),
            max_concurrent=v.int_(kd.get("max_concurrent", 0), f"{w}.max_concurrent"),
        ))
    return GatewayConfig(server=server, backends=tuple(backends), tiers=tiers, routing=routing,
                         cron=cron, admission=admission, health=health, keys=tuple(keys),
                         source=source, ledger=ledger)


def _check_ledger_url(v: _V, url: str, where: str) -> str:
    try:
        ok = _LEDGER_URL.match(url) is not None
        urlsplit(url).port  # noqa: B018 - raises for a port that is not a number in 0-65535
    except ValueError:
        ok = False
    if not ok:
        raise v.err(where, _("expected redis://HOST:PORT/DB (Valkey or Redis), got {url!r}").format(url=url))
    return url


def _check_url(v: _V, raw: Any, where: str) -> str:
    url = v.str_(raw, where)
    if not _URL.match(url):
        raise v.err(where, _("expected http://host:port, got {url!r}").format(url=url))
    return url.rstrip("/")


def parse_text(text: str, source: str) -> dict[str, Any]:
    """Parse TOML (``.toml``) or YAML (anything else) text; InputError on syntax errors."""
    if source.endswith(".toml"):
        try:
            import tomllib  # type: ignore[import-not-found]  # lazy: only for .toml; 3.10 needs tomli
        except ModuleNotFoundError:  # Python 3.10
            try:
                import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]  # lazy: optional, Python 3.10
            except ModuleNotFoundError:
                raise InputError(_("{source}: TOML needs Python >= 3.11 or the 'tomli' package; use YAML").format(source=source)) from None
        try:
            data: dict[str, Any] = tomllib.loads(text)
            return data
        except tomllib.TOMLDecodeError as e:
            raise InputError(_("{source}: not valid TOML: {error}").format(source=source, error=e)) from None
    import yaml  # lazy: yaml (60 ms), only for YAML configs

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        msg = " ".join(str(e).split())
        raise InputError(_("{source}: not valid YAML: {msg}").format(source=source, msg=msg)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(_("{source}: top level must be a mapping, got {tn}").format(source=source, tn=_tn(data)))
    return data


def load_config(path: str | os.PathLike[str]) -> GatewayConfig:
    """Read and validate a config file. Raises InputError with the file and key on any problem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(_("{path}: config file not found").format(path=p)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(_("{path}: cannot read config: {error}").format(path=p, error=e)) from None
    return build_config(parse_text(text, str(p)), str(p))


def with_overrides(cfg: GatewayConfig, *, backends: list[str] | None = None, host: str | None = None,
                   port: int | None = None, ledger: str | None = None, replica: str | None = None) -> GatewayConfig:
    """Apply command-line overrides (``--backend``, ``--host``, ``--port``, ``--ledger``, ``--replica``)."""
    v = _V("command line")
    if ledger is not None:
        cfg = replace(cfg, ledger=replace(cfg.ledger, url=_check_ledger_url(v, ledger, "--ledger")))
    if replica is not None:
        cfg = replace(cfg, ledger=replace(cfg.ledger, replica=replica))
    server = cfg.server
    if host is not None:
        server = replace(server, host=host)
    if port is not None:
        server = replace(server, port=port)
    bes = cfg.backends
    if backends:
        bes = tuple(BackendConfig(url=_check_url(v, u, "--backend"), name=f"b{i}") for i, u in enumerate(backends))
    if not bes:
        raise InputError(_("no backend: pass --backend http://HOST:PORT or add [[backends]] to the config"))
    return replace(cfg, server=server, backends=bes)


def redact_url(url: str) -> str:
    """``url`` with its password, if any, as ``***`` (redis://:secret@host:6379/0)."""
    u = urlsplit(url)
    if u.password is None:
        return url
    host = (u.hostname or "") + (f":{u.port}" if u.port else "")
    return urlunsplit((u.scheme, f"{u.username or ''}:***@{host}", u.path, u.query, u.fragment))


def dataclass_dict(obj: Any) -> Any:
    """A JSON-able view of a config dataclass (keys masked)."""
    if hasattr(obj, "__dataclass_fields__"):
        out = {}
        for f in fields(obj):
            val = getattr(obj, f.name)
            if f.name in ("key", "api_key") and val:
                val = "***"
            elif isinstance(obj, LedgerConfig) and f.name == "url" and val:
                val = redact_url(val)
            out[f.name] = dataclass_dict(val)
        return out
    if isinstance(obj, Mapping):
        return {k: dataclass_dict(x) for k, x in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [dataclass_dict(x) for x in obj]
    return obj
