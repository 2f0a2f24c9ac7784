"""Gateway configuration: a TOML or YAML file (or nothing: ``--backend URL``), validated into
frozen dataclasses with one-line errors that name the file and the key.

The dataclasses are the schema: a section's keys are its fields, a key's type is the field's
annotation, bounds and spellings are the field's ``metadata`` (:func:`_f`), and a rule that ties
fields together is the class's ``__post_init__`` (raising :class:`Invalid` with the key it is
about). :func:`build_config` walks them generically (:func:`_load`); only the cross-section
references (a tier or backend named elsewhere) are checked after (:func:`check_references`).

The built-in tiers are the 307K-context MTP field report's (tests/fixtures/seeds/004_*.txt,
section 三): B daily, C1 analysis, C2 code+agent, D deep analysis; A formatting and V vision are
named there without numbers, so their numbers here are llamarig's defaults (docs/gateway.md).
"""

from __future__ import annotations

import difflib
import os
import re
import types
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints
from urllib.parse import urlsplit, urlunsplit

from llamarig.errors import InputError
from llamarig.i18n import _

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_D = TypeVar("_D", bound="DataclassInstance")

#: what a tier (or cron) does when no backend can take a request now: wait in the queue, or
#: get 429 at once
OnBusy = Literal["queue", "reject"]

_URL = re.compile(r"^https?://[^/\s]+(/[^\s]*)?$")
_LEDGER_URL = re.compile(r"^rediss?://[^/\s]+(/\d+)?/?$")
_TIER_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class Invalid(ValueError):
    """A section's own rule failed: ``key`` (relative to the section, "" for the section) and
    the sentence; the loader prefixes the file and the section's place."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


def _f(default: Any = MISSING, *, lo: float | None = None, hi: float | None = None, lower: bool = False,
       env: bool = False, url: bool = False, factory: Any = MISSING) -> Any:
    """A field with what the loader checks: ``lo``/``hi`` bounds, ``lower``-cased strings,
    ``env`` (the value may come from an environment variable named by ``<key>_env``), ``url``."""
    meta = {"lo": lo, "hi": hi, "lower": lower, "env": env, "url": url}
    if factory is not MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _regex(key: str, patterns: tuple[str, ...] | str | None) -> None:
    for i, pat in enumerate((patterns,) if isinstance(patterns, str) else patterns or ()):
        try:
            re.compile(pat)
        except re.error as e:
            where = key if isinstance(patterns, str) else f"{key}[{i}]"
            raise Invalid(where, _("bad regular expression {pat!r}: {error}").format(pat=pat, error=e)) from None


# ------------------------------------------------------------------------------ the schema


#: one forced sampling field's value as TOML gives it: a scalar, or a list (``stop`` strings,
#: ``logit_bias`` pairs) of scalars or of lists of scalars
SamplingScalar = bool | int | float | str
SamplingValue = SamplingScalar | list[SamplingScalar | list[SamplingScalar]]


@dataclass(frozen=True)
class TierConfig:
    """What a tier does to the request sent upstream, and what it may take of a backend."""

    name: str = field(metadata={"internal": True})  # its key under [tiers]
    max_tokens: int = _f(lo=1)
    thinking: bool | None = None  # None: leave the client's choice alone
    reasoning_budget: int | None = _f(None, lo=-1)  # reasoning_budget_tokens (server-common.cpp)
    reasoning_effort: str | None = None
    timeout_s: float | None = None  # -> t_max_predict_ms and the upstream read timeout
    priority: int = 0  # lower is served first
    sampling: Mapping[str, SamplingValue] = _f(factory=dict)  # forced sampling fields
    # resolve_auto_c2_max_tokens: widen up to this when the client asks for more (the 307K-context MTP field report)
    long_output_max_tokens: int | None = _f(None, lo=1)
    long_output_timeout_s: float | None = None
    #: the most of a backend's KV pool (a fraction) and of its slots this tier's requests hold at once
    max_pool_share: float | None = _f(None, lo=0.0, hi=1.0)
    max_slots: int | None = _f(None, lo=0)  # 0: the tier is held (its requests wait, then 429)
    #: the backends (names) this tier's requests go to; empty: any
    backends: tuple[str, ...] = ()
    on_busy: OnBusy = "queue"
    #: admitted only while no request of a better priority (a lower number) is in flight on the
    #: backend or waits in the queue: it gives way to interactive work (docs/gateway.md, "Cron that yields")
    yields: bool = False
    #: with ``yields``: also wait until better priorities have been idle this long (an agent's
    #: tool call between two turns), so a yielding job does not start only to be preempted
    yield_after_s: float = _f(0.0, lo=0.0)
    queue_timeout_s: float | None = _f(None, lo=0.0)  # None: admission.queue_timeout_s
    #: each session (conversation) of this tier keeps its slot this long after its last request:
    #: other traffic is sent to other slots (``id_slot``), so its prompt cache stays (llamarig.gateway.slots)
    pin_ttl_s: float | None = _f(None, lo=1.0)

    def __post_init__(self) -> None:
        if self.reasoning_budget is not None and self.reasoning_budget >= self.max_tokens:
            raise Invalid("reasoning_budget", _(
                "{reasoning_budget} must be below max_tokens {max_tokens} (thinking tokens are generated "
                "tokens and count against n_predict)").format(reasoning_budget=self.reasoning_budget,
                                                              max_tokens=self.max_tokens))
        if self.long_output_max_tokens is not None and self.long_output_max_tokens < self.max_tokens:
            raise Invalid("long_output_max_tokens", _("{long_output_max_tokens} is below the tier's max_tokens "
                                                      "{max_tokens}").format(
                long_output_max_tokens=self.long_output_max_tokens, max_tokens=self.max_tokens))
        _share(self.max_pool_share)
        for k, val in self.sampling.items():
            if not isinstance(val, (int, float, str, bool, list)):
                raise Invalid(f"sampling.{k}", _("expected a number, string, boolean or list, got {tn}").format(
                    tn=_tn(val)))


def _share(share: float | None) -> None:
    if share is not None and share <= 0:
        raise Invalid("max_pool_share", _("must be in (0, 1], got {value}").format(value=share))


@dataclass(frozen=True)
class BackendConfig:
    url: str = _f(url=True)
    name: str = ""  # "" in the file: b0, b1, ... by position
    pool_tokens: int | None = _f(None, lo=1)  # None: what the server has (llamarig.gateway.pool)
    slots: int | None = _f(None, lo=1)  # None: /props total_slots
    slot_ctx: int | None = _f(None, lo=1)  # None: /props default_generation_settings.n_ctx
    unified: bool = True  # -kvu: one pool shared by the slots (llamarig.gateway.pool)
    api_key: str | None = _f(None, env=True)  # sent upstream as Bearer
    weight: float = 1.0
    #: llama-server's log file: the pool (n_ctx, kv_unified) as the server printed it at start
    log: str | None = None


@dataclass(frozen=True)
class KeyConfig:
    key: str = _f(env=True)
    name: str = ""  # "" in the file: key0, key1, ... by position
    tier: str | None = None
    priority: int | None = None
    max_concurrent: int = _f(0, lo=0)  # 0: unlimited (in flight + queued)
    cron: bool = False  # every request with this key is a cron job (as with the cron header)
    admin: bool = False  # may hold and release tiers (POST /gateway/hold, /gateway/release)

    def __post_init__(self) -> None:
        if len(self.key) < 8:
            raise Invalid("key", _("an API key must be at least 8 characters"))


@dataclass(frozen=True)
class RuleConfig:
    """A content rule: requests whose system prompt (``system``: the system and developer
    messages) or last user message (``user``) matches go to ``tier``."""

    tier: str
    system: str | None = None
    user: str | None = None
    name: str | None = None  # in the request log: tier_reason "rule:NAME" (default: the rule's index)

    def __post_init__(self) -> None:
        if (self.system is None) == (self.user is None):
            raise Invalid("", _("a rule needs exactly one of 'system' and 'user'"))
        _regex("system", self.system)
        _regex("user", self.user)


#: the agent tier's system-prompt patterns, English and Chinese (what coding agents and
#: Chinese chat front ends put in their system prompt: "你是一个编程助手", "你是资深软件工程师")
DEFAULT_SYSTEM_PATTERNS: tuple[str, ...] = (
    r"(?i)\b(coding agent|software engineer|you are (an? )?(interactive )?(cli|coding) (tool|assistant))\b",
    r"(编程|代码|编码|软件开发|开发)(助手|智能体|代理|agent)|软件工程师|程序员助手",
)


@dataclass(frozen=True)
class RoutingConfig:
    default_tier: str = "B"
    tier_header: str = _f("x-llamarig-tier", lower=True)
    vision_tier: str | None = "V"
    agent_tier: str | None = "C2"
    tools_mean_agent: bool = True
    agent_headers: tuple[str, ...] = _f(("x-llamarig-agent",), lower=True)
    agent_user_agents: tuple[str, ...] = _f(("pi-ai", "claude-cli", "aider", "opencode", "codex", "cline", "roo"),
                                            lower=True)
    system_patterns: tuple[str, ...] = DEFAULT_SYSTEM_PATTERNS
    model_aliases: Mapping[str, str] = _f(factory=dict)  # model name -> tier
    affinity_messages: int = _f(2, lo=0)
    rules: tuple[RuleConfig, ...] = ()  # content rules, first match wins

    def __post_init__(self) -> None:
        _regex("system_patterns", self.system_patterns)


@dataclass(frozen=True)
class CronConfig:
    """The 307K-context MTP field report: "CRON恒锁1K/2K", recognised by a header prefix; and
    what cron requests (over every tier) may hold of a backend at once."""

    header: str = _f("x-llamarig-source", lower=True)
    prefix: str = "cron"
    max_tokens: int = _f(1024, lo=1)
    max_tokens_thinking: int = _f(2048, lo=1)
    priority: int = 10
    timeout_s: float | None = None
    max_pool_share: float | None = _f(None, lo=0.0, hi=1.0)
    max_slots: int | None = _f(None, lo=0)  # 0: cron is held
    backends: tuple[str, ...] = ()
    on_busy: OnBusy = "queue"
    yields: bool = False  # as a tier's: cron runs only while better priorities are idle
    yield_after_s: float = _f(0.0, lo=0.0)
    queue_timeout_s: float | None = _f(None, lo=0.0)  # None: the tier's, else admission.queue_timeout_s

    def __post_init__(self) -> None:
        _share(self.max_pool_share)


@dataclass(frozen=True)
class AdmissionConfig:
    prompt_tokens: Literal["backend", "estimate"] = "backend"  # backend: exact, one local round trip
    estimate_bytes_per_token: float = 2.0
    safety: float = _f(1.0, hi=1.0)  # fraction of the pool that may be reserved
    queue_size: int = _f(256, lo=0)
    queue_timeout_s: float = 30.0
    keepalive_s: float = 5.0  # SSE comment interval while a streaming request waits; 0: never
    retry_after_s: float = 1.0  # floor of Retry-After

    def __post_init__(self) -> None:
        if not 0 < self.safety <= 1:
            raise Invalid("safety", _("must be in (0, 1], got {safety}").format(safety=self.safety))
        if self.estimate_bytes_per_token <= 0:
            raise Invalid("estimate_bytes_per_token", _("must be > 0"))


@dataclass(frozen=True)
class HealthConfig:
    interval_s: float = 5.0
    timeout_s: float = 3.0
    eject_after: int = _f(2, lo=1)  # consecutive failures
    recover_after: int = _f(1, lo=1)  # consecutive successes
    metrics_cache_s: float = 2.0
    #: while a backend has requests in flight, read its /slots this often (progress, slots; 0: never)
    slots_interval_s: float = 1.0


@dataclass(frozen=True)
class GatewayServerConfig:
    """The ``[server]`` section: where the gateway listens and what it accepts and logs."""

    host: str = "127.0.0.1"
    port: int = _f(8000, lo=0, hi=65535)
    max_body_bytes: int = _f(16 * 1024 * 1024, lo=1)
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 600.0  # silence allowed between upstream bytes
    request_log: str | None = None
    log_content: bool = False
    public_metrics: bool = True
    accept_any_model: bool = False
    #: non-streamed chat and completions requests go upstream as streams and come back whole, so
    #: closing the upstream stops them (llamarig.gateway.aggregate; docs/gateway.md, "Client gone")
    stream_upstream: bool = True


@dataclass(frozen=True)
class LedgerConfig:
    """Where admission's ledger lives: this process (``url`` None), or a Valkey/Redis server
    that several replicas share (llamarig.gateway.shared_ledger)."""

    url: str | None = None  # redis://HOST:PORT/DB (rediss:// for TLS)
    lease_s: float = 10.0  # a dead replica's reservations expire this long after its last heartbeat
    timeout_s: float = 1.0  # per store round trip; past it a claim is refused (503)
    replica: str | None = None  # this replica's name in the store (default HOST-PID)

    def __post_init__(self) -> None:
        if self.url is not None:
            _check_ledger_url(self.url)
        if self.lease_s <= 0 or self.timeout_s <= 0:
            raise Invalid("", _("lease_s and timeout_s must be > 0"))


@dataclass(frozen=True)
class UiConfig:
    """The ``[ui]`` section: the live page at ``/ui/`` (llamarig.gateway.ui; docs/gateway.md
    "The live page"). Another machine reads it only with ``admin_key``; the ``alert_*``
    thresholds are shown on the page and as ``llamarig_alert`` gauges of ``/metrics``."""

    enabled: bool = True
    admin_key: str | None = _f(None, env=True)
    interval_s: float = _f(2.0, lo=0.2, hi=3600)
    watch: bool = False  # poll from start-up (alerts in /metrics with no page open); else from the first visit
    alert_power_w: float | None = None
    alert_temp_c: float = _f(85.0, lo=1)
    alert_pool_pct: float = _f(90.0, lo=1, hi=100)
    alert_queue: int = _f(8, lo=1)

    def __post_init__(self) -> None:
        if self.admin_key is not None and len(self.admin_key) < 8:
            raise Invalid("admin_key", _("the admin key must be at least 8 characters"))


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


@dataclass(frozen=True)
class GatewayConfig:
    server: GatewayServerConfig = GatewayServerConfig()
    backends: tuple[BackendConfig, ...] = ()
    tiers: Mapping[str, TierConfig] = _f(factory=lambda: dict(DEFAULT_TIERS))
    routing: RoutingConfig = RoutingConfig()
    cron: CronConfig = CronConfig()
    admission: AdmissionConfig = AdmissionConfig()
    health: HealthConfig = HealthConfig()
    keys: tuple[KeyConfig, ...] = ()
    ledger: LedgerConfig = LedgerConfig()
    ui: UiConfig = UiConfig()
    inherit_default_tiers: bool = True  # start from B/C1/C2/D/A/V; false: only the file's tiers
    source: str | None = field(default=None, metadata={"internal": True})  # path it was read from


# ------------------------------------------------------------------------------ the loader


def _tn(v: Any) -> str:
    return {dict: "table", list: "list", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "nothing"}.get(type(v), type(v).__name__)


def _closest(name: str, options: set[str]) -> str | None:
    m = difflib.get_close_matches(name, sorted(options), n=1, cutoff=0.6)
    return m[0] if m else None


def _did_you_mean(name: str, options: set[str]) -> str:
    hint = _closest(name, options)
    return _(" (did you mean '{name}'?)").format(name=hint) if hint else ""


class _Loader:
    """Reads a parsed document into the dataclasses; every error is an InputError naming
    ``source`` and the key."""

    def __init__(self, source: str) -> None:
        self.source = source

    def err(self, where: str, msg: str) -> InputError:
        return InputError(f"{self.source}: " + where + ": " + msg)  # + keeps Messages (llamarig.i18n)

    def table(self, v: Any, where: str) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise self.err(where, _("expected a table/mapping, got {tn}").format(tn=_tn(v)))
        return v

    def known(self, d: Mapping[str, Any], allowed: set[str], where: str) -> None:
        for k in d:
            if k not in allowed:
                raise self.err(f"{where}.{k}" if where else str(k), _("unknown key{hint}; allowed: {allowed}").format(
                    hint=_did_you_mean(str(k), allowed), allowed=", ".join(sorted(allowed))))

    # -- scalars
    def int_(self, v: Any, where: str, lo: float | None, hi: float | None) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.err(where, _("expected an integer, got {tn} {value!r}").format(tn=_tn(v), value=v))
        self._bounds(v, where, lo, hi)
        return v

    def num(self, v: Any, where: str, lo: float | None, hi: float | None) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.err(where, _("expected a number, got {tn} {value!r}").format(tn=_tn(v), value=v))
        self._bounds(v, where, lo, hi)
        return float(v)

    def _bounds(self, v: float, where: str, lo: float | None, hi: float | None) -> None:
        if v < (0 if lo is None else lo):
            raise self.err(where, _("must be >= {lo}, got {value}").format(lo=0 if lo is None else lo, value=v))
        if hi is not None and v > hi:
            raise self.err(where, _("must be <= {hi}, got {value}").format(hi=hi, value=v))

    def bool_(self, v: Any, where: str) -> bool:
        if not isinstance(v, bool):
            raise self.err(where, _("expected true or false, got {tn} {value!r}").format(tn=_tn(v), value=v))
        return v

    def str_(self, v: Any, where: str) -> str:
        if not isinstance(v, str) or not v:
            raise self.err(where, _("expected a non-empty string, got {tn} {value!r}").format(tn=_tn(v), value=v))
        return v

    def strs(self, v: Any, where: str) -> tuple[str, ...]:
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.err(where, _("expected a list of strings, got {tn}").format(tn=_tn(v)))
        return tuple(v)

    def choice(self, v: Any, where: str, choices: tuple[str, ...]) -> str:
        if v not in choices:
            raise self.err(where, _("expected {choices}, got {value!r}").format(
                choices=" or ".join(repr(c) for c in choices), value=v))
        return str(v)

    # -- by annotation
    def value(self, tp: Any, v: Any, where: str, meta: Mapping[str, Any]) -> Any:
        """``v`` as the annotation ``tp`` says (Optional, scalars, Literal, tuples, mappings,
        dataclasses)."""
        origin, args = get_origin(tp), get_args(tp)
        if origin in (Union, types.UnionType) and type(None) in args:
            if v is None:
                return None
            return self.value(next(a for a in args if a is not type(None)), v, where, meta)
        if origin is Literal:
            return self.choice(v, where, args)
        if origin is tuple:
            return self.sequence(args[0], v, where, meta)
        if origin is Mapping:
            return self.mapping(args[1], v, where)
        if hasattr(tp, "__dataclass_fields__"):
            return self.section(tp, v, where)
        return self.scalar(tp, v, where, meta)

    def scalar(self, tp: Any, v: Any, where: str, meta: Mapping[str, Any]) -> Any:
        if tp is bool:
            return self.bool_(v, where)
        if tp is int:
            return self.int_(v, where, meta.get("lo"), meta.get("hi"))
        if tp is float:
            return self.num(v, where, meta.get("lo"), meta.get("hi"))
        s = self.str_(v, where)
        if meta.get("url"):
            s = _check_url(self, s, where)
        return s.lower() if meta.get("lower") else s

    def sequence(self, item: Any, v: Any, where: str, meta: Mapping[str, Any]) -> tuple[Any, ...]:
        if item is str:
            out = self.strs(v, where)
            return tuple(s.lower() for s in out) if meta.get("lower") else out
        if not isinstance(v, list):
            raise self.err(where, _("expected a list ([[{name}]] in TOML), got {tn}").format(name=where, tn=_tn(v)))
        return tuple(self.section(item, x, f"{where}[{i}]") for i, x in enumerate(v))

    def mapping(self, item: Any, v: Any, where: str) -> dict[str, Any]:
        d = self.table(v, where)
        if item is str:
            return {str(k): self.str_(x, f"{where}.{k}") for k, x in d.items()}
        return dict(d)  # Any: checked by the section's own rule (sampling)

    def section(self, cls: type[_D], raw: Any, where: str, base: _D | None = None) -> _D:
        """One dataclass from its table; ``base``: the values its missing keys keep."""
        d = self.table({} if raw is None else raw, where)
        hints = get_type_hints(cls)
        flds = [f for f in fields(cls) if not f.metadata.get("internal")]
        allowed = {f.name for f in flds} | {f"{f.name}_env" for f in flds if f.metadata.get("env")}
        self.known(d, allowed, where)
        kw: dict[str, Any] = {}
        for f in flds:
            got = self._field_value(f, d, where)
            if got is not MISSING:
                kw[f.name] = self.value(hints[f.name], got, f"{where}.{f.name}", f.metadata)
        try:
            return replace(base, **kw) if base is not None else cls(**kw)
        except Invalid as e:
            raise self.err(f"{where}.{e.key}" if e.key else where, e.message) from None
        except TypeError:  # a required key is missing
            missing = next(f.name for f in flds if f.default is MISSING and f.default_factory is MISSING
                           and f.name not in kw)
            raise self.err(where, _("missing {key}").format(key=missing)) from None

    def _field_value(self, f: Field[Any], d: Mapping[str, Any], where: str) -> Any:
        if f.metadata.get("env") and f"{f.name}_env" in d:
            env = self.str_(d[f"{f.name}_env"], f"{where}.{f.name}_env")
            val = os.environ.get(env)
            if not val:
                raise self.err(f"{where}.{f.name}_env", _("environment variable {env} is not set").format(env=env))
            return val
        return d.get(f.name, MISSING)


def build_config(data: Mapping[str, Any] | None, source: str = "<config>") -> GatewayConfig:
    """Validate a parsed TOML/YAML document into a GatewayConfig (raises InputError)."""
    ld = _Loader(source)
    d = ld.table(dict(data or {}), "top level")
    tiers_raw = d.get("tiers")
    top = {k: v for k, v in d.items() if k != "tiers"}
    cfg = _top(ld, top)
    tiers = _tiers(ld, tiers_raw, cfg.inherit_default_tiers)
    raw_routing = d.get("routing")
    given: Mapping[str, Any] = raw_routing if isinstance(raw_routing, dict) else {}
    r = cfg.routing  # a default that names a tier the file dropped is off
    vision = r.vision_tier if "vision_tier" in given or r.vision_tier in tiers else None
    agent = r.agent_tier if "agent_tier" in given or r.agent_tier in tiers else None
    routing = replace(r, vision_tier=vision, agent_tier=agent)
    backends = tuple(replace(b, name=b.name or f"b{i}") for i, b in enumerate(cfg.backends))
    keys = tuple(replace(k, name=k.name or f"key{i}") for i, k in enumerate(cfg.keys))
    cfg = replace(cfg, tiers=tiers, routing=routing, backends=backends, keys=keys, source=source)
    check_references(cfg, ld)
    return cfg


def _top(ld: _Loader, top: Mapping[str, Any]) -> GatewayConfig:
    """Every section but ``tiers`` (merged onto the defaults by :func:`_tiers`)."""
    ld.known(top, {f.name for f in fields(GatewayConfig) if not f.metadata.get("internal")}, "")
    hints = get_type_hints(GatewayConfig)
    kw: dict[str, Any] = {}
    for f in fields(GatewayConfig):
        if f.name in top and f.name != "tiers":
            kw[f.name] = ld.value(hints[f.name], top[f.name], f.name, f.metadata)
    return GatewayConfig(**kw)


def _tiers(ld: _Loader, raw: Any, inherit: bool) -> dict[str, TierConfig]:
    tiers: dict[str, TierConfig] = dict(DEFAULT_TIERS) if inherit else {}
    for name, traw in (ld.table(raw, "tiers") if raw is not None else {}).items():
        where = f"tiers.{name}"
        if not _TIER_NAME.fullmatch(str(name)):
            raise ld.err(where, _("a tier name is letters, digits, '_', '-' or '.'"))
        base = tiers.get(str(name))
        if base is None and "max_tokens" not in ld.table(traw, where):
            raise ld.err(where, _("a new tier needs max_tokens"))
        tiers[str(name)] = ld.section(TierConfig, traw, where, base=base or TierConfig(str(name), max_tokens=1))
    if not tiers:
        raise ld.err("tiers", _("no tiers defined (set inherit_default_tiers = true or add [tiers.NAME])"))
    return tiers


def check_references(cfg: GatewayConfig, ld: _Loader | None = None) -> None:
    """Every tier and backend named in one section exists; backend names are unique."""
    ld = ld or _Loader(cfg.source or "<config>")
    names: set[str] = set()
    for i, b in enumerate(cfg.backends):
        if b.name in names:
            raise ld.err(f"backends[{i}].name", _("duplicate backend name {name!r}").format(name=b.name))
        names.add(b.name)
    tiers = set(cfg.tiers)
    r = cfg.routing
    refs: list[tuple[str, str | None]] = [("routing.default_tier", r.default_tier), ("routing.vision_tier", r.vision_tier),
                                          ("routing.agent_tier", r.agent_tier)]
    refs += [(f"routing.model_aliases.{a}", t) for a, t in r.model_aliases.items()]
    refs += [(f"routing.rules[{i}].tier", rule.tier) for i, rule in enumerate(r.rules)]
    refs += [(f"keys[{i}].tier", k.tier) for i, k in enumerate(cfg.keys)]
    for where, t in refs:
        if t is not None and t not in tiers:
            raise ld.err(where, _("unknown tier {tier!r}{hint}; tiers: {tiers}").format(
                tier=t, hint=_did_you_mean(t, tiers), tiers=", ".join(cfg.tiers)))
    if not cfg.backends:
        return  # routes are checked once the backends are known (with_overrides)
    routes = [(f"tiers.{t.name}.backends", t.backends) for t in cfg.tiers.values()] + [("cron.backends", cfg.cron.backends)]
    for where, bes in routes:
        for name in bes:
            if name not in names:
                raise ld.err(where, _("unknown backend {name!r}{hint}; backends: {names}").format(
                    name=name, hint=_did_you_mean(name, names), names=", ".join(sorted(names))))


def _check_ledger_url(url: str) -> str:
    try:
        ok = _LEDGER_URL.match(url) is not None
        urlsplit(url).port  # noqa: B018 - raises for a port that is not a number in 0-65535
    except ValueError:
        ok = False
    if not ok:
        raise Invalid("url", _("expected redis://HOST:PORT/DB (Valkey or Redis), got {url!r}").format(url=url))
    return url


def _check_url(ld: _Loader, url: str, where: str) -> str:
    if not _URL.match(url):
        raise ld.err(where, _("expected http://host:port, got {url!r}").format(url=url))
    return url.rstrip("/")


# ------------------------------------------------------------------------------ files, overrides


def parse_text(text: str, source: str) -> dict[str, Any]:
    """Parse TOML (``.toml``) or YAML (anything else) text; InputError on syntax errors."""
    if source.endswith(".toml"):
        return _parse_toml(text, source)
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


def _parse_toml(text: str, source: str) -> dict[str, Any]:
    try:
        import tomllib  # lazy: only for .toml; 3.10 needs tomli
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # lazy: optional, Python 3.10
        except ModuleNotFoundError:
            raise InputError(_("{source}: TOML needs Python >= 3.11 or the 'tomli' package; use YAML").format(
                source=source)) from None
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(_("{source}: not valid TOML: {error}").format(source=source, error=e)) from None
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
    ld = _Loader("command line")
    if ledger is not None:
        try:
            cfg = replace(cfg, ledger=replace(cfg.ledger, url=_check_ledger_url(ledger)))
        except Invalid as e:
            raise ld.err("--ledger", e.message) from None
    if replica is not None:
        cfg = replace(cfg, ledger=replace(cfg.ledger, replica=replica))
    server = cfg.server
    if host is not None:
        server = replace(server, host=host)
    if port is not None:
        server = replace(server, port=port)
    bes = cfg.backends
    if backends:
        bes = tuple(BackendConfig(url=_check_url(ld, u, "--backend"), name=f"b{i}") for i, u in enumerate(backends))
    if not bes:
        raise InputError(_("no backend: pass --backend http://HOST:PORT or add [[backends]] to the config"))
    out = replace(cfg, server=server, backends=bes)
    check_references(out, ld if backends else None)
    return out


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
            if f.name in ("key", "api_key", "admin_key") and val:
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
