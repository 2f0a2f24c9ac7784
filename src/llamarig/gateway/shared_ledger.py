"""The admission ledger shared by several gateway replicas, in Valkey or Redis (``--ledger
redis://HOST:PORT/DB``).

One gateway guards its backends' KV pools with the in-process ledger
(llamarig.gateway.admission.Ledger). Several replicas in front of the same llama-servers must
admit against one ledger, or together they overbook the pool. This one keeps it in a Valkey/Redis
server, through the ``redis`` package's asyncio client (``pip install 'llamarig[ledger]'``).

What lives in the store (every key under ``PREFIX``):

- ``counts`` (hash): ``r:<backend>`` reserved tokens, ``n:<backend>`` requests in flight,
  ``k:<api key name>`` requests in flight per key, ``pr:``/``pn:<backend>`` the highest
  reserved/in-flight ever seen (checked by the tests against the pool);
- ``res`` (hash): one field per reservation, ``<member>:<id>`` -> JSON
  ``[backend, tokens, key, tier, priority, unix time]``;
- ``held:<member>`` (set): that replica's reservation fields; ``leases`` (sorted set): each
  live replica with the store-clock time (ms, ``TIME``) its lease ends unless its heartbeat
  renews it. A member is ``<replica name>/<random incarnation>``: a replica restarted under the
  same name gets a new one, so its dead predecessor's lease still expires;
- ``stats`` (hash): ``made``, ``released``, ``expired`` reservations (made = released + expired
  + those held now);
- ``queue`` (sorted set): every request waiting on some replica (``<member>:<seq>``, score its
  priority), ``queued:<member>`` (set) that replica's. A claim for a request that is not
  queued (``fresh``) is refused while one of the same or a better priority waits anywhere, as
  one gateway serves its own queue first; queued requests are then admitted first-fit by their
  own replica. The order among waiters on different replicas is each replica's own: a release
  goes to whichever replica claims first.

Every change is one Lua script (atomic in the server: "Redis guarantees the script's atomic
execution", https://redis.io/docs/latest/develop/interact/programmability/eval-intro/):
``claim`` checks slots, the slot context, the pool and the key's limit against the shared totals
and reserves in the same step, so replicas can never overbook between them; ``release`` removes
a reservation only if its record is still there (a reservation ends exactly once: released, or
expired with its replica's lease); every script first reaps the reservations of replicas whose
lease has expired, so a replica killed mid-stream frees its tokens at most one lease after its
last heartbeat.

The store out of reach: a claim fails with LedgerUnavailable, and admission answers 503
``ledger_unavailable`` with Retry-After (no fallback to a local ledger: that would overbook the
pool other replicas share, which is the thing this ledger exists to prevent). Requests already
admitted go on; their releases are retried until the store answers. If the outage outlasts the
lease, the store frees this replica's reservations when it returns, though their requests may
still be running: set the lease longer than the outages to ride out.

The scripts address keys they compute from ``PREFIX`` (not only ``KEYS``): one Valkey/Redis
server, not a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from llamarig.extras import needed
from llamarig.gateway.admission import LedgerUnavailable, Limits, Reservation, view_fits
from llamarig.gateway.config import redact_url
from llamarig.gateway.pool import Pool

with needed("ledger"):
    import redis.asyncio as aioredis
    from redis.exceptions import RedisError

log = logging.getLogger("llamarig.gateway")

PREFIX = "llamarig:ledger:"

_REAP = """
local P = ARGV[1]
local T = redis.call('TIME')
local NOW = tonumber(T[1]) * 1000 + math.floor(tonumber(T[2]) / 1000)
local function uncount(v)
  local C = P .. 'counts'
  redis.call('HINCRBY', C, 'r:' .. v[1], -tonumber(v[2]))
  redis.call('HINCRBY', C, 'n:' .. v[1], -1)
  if v[3] ~= '' then redis.call('HINCRBY', C, 'k:' .. v[3], -1) end
  for _, g in ipairs(v[7] or {}) do
    redis.call('HINCRBY', C, 'gr:' .. v[1] .. '|' .. g, -tonumber(v[2]))
    redis.call('HINCRBY', C, 'gn:' .. v[1] .. '|' .. g, -1)
  end
end
local function reap()
  local dead = redis.call('ZRANGEBYSCORE', P .. 'leases', '-inf', NOW)
  for _, rep in ipairs(dead) do
    local held = redis.call('SMEMBERS', P .. 'held:' .. rep)
    for _, f in ipairs(held) do
      local rec = redis.call('HGET', P .. 'res', f)
      if rec then
        uncount(cjson.decode(rec))
        redis.call('HDEL', P .. 'res', f)
        redis.call('HINCRBY', P .. 'stats', 'expired', 1)
      end
    end
    redis.call('DEL', P .. 'held:' .. rep)
    for _, q in ipairs(redis.call('SMEMBERS', P .. 'queued:' .. rep)) do redis.call('ZREM', P .. 'queue', q) end
    redis.call('DEL', P .. 'queued:' .. rep)
    redis.call('ZREM', P .. 'leases', rep)
  end
end
local function renew(me, lease_ms)
  redis.call('ZADD', P .. 'leases', NOW + lease_ms, me)
end
"""

#: ARGV: prefix, replica, lease ms, field, backend, tokens, pool, slots, slot_ctx, key, key_limit,
#: record (its 7th element: the groups), fresh (1: not queued here), priority, limits (JSON
#: [[group, max tokens or -1, max slots or -1], ...]: the capped groups' caps on this backend)
_CLAIM = _REAP + """
local me, lease_ms, f, b = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local tokens, pool, slots, slot_ctx = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local key, key_limit = ARGV[10], tonumber(ARGV[11])
local fresh, prio = tonumber(ARGV[13]), tonumber(ARGV[14])
local limits = cjson.decode(ARGV[15])
renew(me, lease_ms)
reap()
local C = P .. 'counts'
local r = tonumber(redis.call('HGET', C, 'r:' .. b) or '0')
local n = tonumber(redis.call('HGET', C, 'n:' .. b) or '0')
local ok = 0
if fresh == 1 and redis.call('ZCOUNT', P .. 'queue', '-inf', prio) > 0 then
  ok = 0  -- a request of the same or a better priority waits on some replica: queue behind it
elseif tokens <= slot_ctx and n < slots and r + tokens <= pool then
  ok = 1
  if key ~= '' and key_limit > 0 and tonumber(redis.call('HGET', C, 'k:' .. key) or '0') >= key_limit then
    ok = 0
  end
  for _, l in ipairs(limits) do
    local gr = tonumber(redis.call('HGET', C, 'gr:' .. b .. '|' .. l[1]) or '0')
    local gn = tonumber(redis.call('HGET', C, 'gn:' .. b .. '|' .. l[1]) or '0')
    if (l[3] >= 0 and gn >= l[3]) or (l[2] >= 0 and gr + tokens > l[2]) then ok = 0 end
  end
end
if ok == 1 then
  local rec = cjson.decode(ARGV[12])
  redis.call('HINCRBY', C, 'r:' .. b, tokens)
  redis.call('HINCRBY', C, 'n:' .. b, 1)
  if key ~= '' then redis.call('HINCRBY', C, 'k:' .. key, 1) end
  for _, g in ipairs(rec[7] or {}) do
    redis.call('HINCRBY', C, 'gr:' .. b .. '|' .. g, tokens)
    redis.call('HINCRBY', C, 'gn:' .. b .. '|' .. g, 1)
  end
  if r + tokens > tonumber(redis.call('HGET', C, 'pr:' .. b) or '0') then redis.call('HSET', C, 'pr:' .. b, r + tokens) end
  if n + 1 > tonumber(redis.call('HGET', C, 'pn:' .. b) or '0') then redis.call('HSET', C, 'pn:' .. b, n + 1) end
  redis.call('HSET', P .. 'res', f, ARGV[12])
  redis.call('SADD', P .. 'held:' .. me, f)
  redis.call('HINCRBY', P .. 'stats', 'made', 1)
end
return {ok, redis.call('HGETALL', C)}
"""

#: ARGV: prefix, replica, lease ms (0: do not renew), field...
_RELEASE = _REAP + """
local me, lease_ms = ARGV[2], tonumber(ARGV[3])
if lease_ms > 0 then renew(me, lease_ms) end
local C = P .. 'counts'
local done = 0
for i = 4, #ARGV do
  local f = ARGV[i]
  local rec = redis.call('HGET', P .. 'res', f)
  if rec then
    uncount(cjson.decode(rec))
    redis.call('HDEL', P .. 'res', f)
    redis.call('HINCRBY', P .. 'stats', 'released', 1)
    done = done + 1
  end
  redis.call('SREM', P .. 'held:' .. me, f)
end
reap()
return {done, redis.call('HGETALL', C)}
"""

#: ARGV: prefix, replica, then (op, member, priority) triples: op "+" waits, "-" stopped waiting
_QUEUE = """
local P, me = ARGV[1], ARGV[2]
for i = 3, #ARGV, 3 do
  local m = me .. ':' .. ARGV[i + 1]
  if ARGV[i] == '+' then
    redis.call('ZADD', P .. 'queue', tonumber(ARGV[i + 2]), m)
    redis.call('SADD', P .. 'queued:' .. me, m)
  else
    redis.call('ZREM', P .. 'queue', m)
    redis.call('SREM', P .. 'queued:' .. me, m)
  end
end
return redis.call('ZCARD', P .. 'queue')
"""

#: ARGV: prefix, replica, lease ms
_HEARTBEAT = _REAP + """
renew(ARGV[2], tonumber(ARGV[3]))
reap()
return redis.call('HGETALL', P .. 'counts')
"""

#: ARGV: prefix
_SNAPSHOT = _REAP + """
reap()
local alive = {}
local leases = redis.call('ZRANGE', P .. 'leases', 0, -1, 'WITHSCORES')
for i = 1, #leases, 2 do
  alive[#alive + 1] = leases[i]
  alive[#alive + 1] = tonumber(leases[i + 1]) - NOW
end
return {redis.call('HGETALL', P .. 'counts'), redis.call('HGETALL', P .. 'res'), alive,
        redis.call('HGETALL', P .. 'stats'), redis.call('ZRANGE', P .. 'queue', 0, -1, 'WITHSCORES')}
"""


def _pairs(flat: list[Any]) -> dict[str, Any]:
    return {_s(flat[i]): flat[i + 1] for i in range(0, len(flat) - 1, 2)}


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def default_replica() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class RedisLedger:
    """The admission ledger in Valkey/Redis, shared by every replica that names the same store.

    ``reserved``/``in_flight`` mirror the store's totals (all replicas) as of this replica's
    last script; the picker reads them, the claim script decides. ``active`` is this replica's.
    """

    def __init__(self, url: str, *, replica: str | None = None, lease_s: float = 10.0,
                 timeout_s: float = 1.0, prefix: str = PREFIX) -> None:
        self.url = url
        self.replica = replica or default_replica()
        #: this process's identity in the store: the name and a random incarnation, so a replica
        #: restarted under the same name does not renew its dead predecessor's lease (whose
        #: reservations must expire)
        self.member = f"{self.replica}/{uuid.uuid4().hex[:8]}"
        self.lease_s = lease_s
        self.timeout_s = timeout_s
        self.prefix = prefix
        self.reserved: dict[str, int] = {}
        self.in_flight: dict[str, int] = {}
        self.group_reserved: dict[tuple[str, str], int] = {}
        self.group_in_flight: dict[tuple[str, str], int] = {}
        self.active: dict[int, Reservation] = {}
        self.reachable = False
        self.last_error = ""
        self._r: Any = aioredis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._claim = self._r.register_script(_CLAIM)
        self._release = self._r.register_script(_RELEASE)
        self._heartbeat = self._r.register_script(_HEARTBEAT)
        self._snapshot_script = self._r.register_script(_SNAPSHOT)
        self._queue = self._r.register_script(_QUEUE)
        self._qops: list[tuple[str, int, int]] = []  # queue entries to add/remove in the store
        self._outbox: list[str] = []  # released here, not yet in the store
        self._wake = asyncio.Event()
        self._nudge = asyncio.Event()  # the view refused a request: requests may wait here
        self._tasks: list[asyncio.Task[None]] = []
        self._on_change: Callable[[], None] = lambda: None
        self._waiting: Callable[[], bool] = lambda: False
        self._snapshot: dict[str, Any] = {}
        self._closing = False

    # ------------------------------------------------------------------ the mirror
    @property
    def _lease_ms(self) -> int:
        return max(1, int(self.lease_s * 1000))

    def _field(self, r: Reservation) -> str:
        return f"{self.member}:{r.id}"

    def _mirror(self, flat: list[Any]) -> None:
        """Take the store's totals; a total that went down (another replica released) pumps."""
        counts = _pairs(flat)
        reserved: dict[str, int] = {}
        in_flight: dict[str, int] = {}
        g_res: dict[tuple[str, str], int] = {}
        g_n: dict[tuple[str, str], int] = {}
        for k, v in counts.items():
            kind, _sep, rest = k.partition(":")
            if kind in ("r", "n"):
                (reserved if kind == "r" else in_flight)[rest] = int(v)
            elif kind in ("gr", "gn"):
                b, _bar, g = rest.partition("|")
                (g_res if kind == "gr" else g_n)[(b, g)] = int(v)
        freed = any(reserved.get(b, 0) < n for b, n in self.reserved.items()) or \
            any(in_flight.get(b, 0) < n for b, n in self.in_flight.items())
        self.reserved, self.in_flight = reserved, in_flight
        self.group_reserved, self.group_in_flight = g_res, g_n
        self.reachable, self.last_error = True, ""
        if freed:
            self._on_change()

    def _unreachable(self, e: BaseException) -> None:
        if self.reachable or not self.last_error:
            log.warning("shared ledger %s unreachable: %s", redact_url(self.url), e)
        self.reachable = False
        self.last_error = f"{type(e).__name__}: {e}"

    # ------------------------------------------------------------------ ReservationLedger
    def fits(self, backend: str, pool: Pool, tokens: int, limits: Limits = ()) -> bool:
        ok = view_fits(self, backend, pool, tokens, limits)
        if not ok:
            self._nudge.set()
        return ok

    def claim(self, r: Reservation, pool: Pool | None, fresh: bool = False, limits: Limits = ()
              ) -> asyncio.Future[bool]:
        return asyncio.get_running_loop().create_task(self._do_claim(r, pool, fresh, limits))

    def queue_add(self, seq: int, priority: int) -> None:
        self._qops.append(("+", seq, priority))
        self._wake.set()

    def queue_remove(self, seq: int) -> None:
        self._qops.append(("-", seq, 0))
        self._wake.set()

    async def _do_claim(self, r: Reservation, pool: Pool | None, fresh: bool, limits: Limits) -> bool:
        if pool is None:
            raise LedgerUnavailable(f"no pool known for backend {r.backend}")
        f = self._field(r)
        rec = json.dumps([r.backend, r.tokens, r.key or "", r.tier, r.priority, round(time.time(), 3), list(r.groups)])
        caps = json.dumps([[g, -1 if c.tokens is None else c.tokens, -1 if c.slots is None else c.slots]
                           for g, c in limits])
        try:
            ok, flat = await self._claim(args=[
                self.prefix, self.member, self._lease_ms, f, r.backend, r.tokens, pool.pool_tokens,
                pool.slots, pool.slot_ctx, r.key or "", r.key_limit, rec, int(fresh), r.priority, caps])
        except (RedisError, OSError, asyncio.TimeoutError) as e:
            # the script may have run: release the field (a no-op if it did not) so no answer
            # lost on the way back leaves a reservation behind a live lease
            self._outbox.append(f)
            self._wake.set()
            self._unreachable(e)
            raise LedgerUnavailable(self.last_error) from None
        if int(ok):
            self.active[r.id] = r
        else:
            self._nudge.set()
        self._mirror(flat)
        return bool(int(ok))

    def release(self, r: Reservation) -> bool:
        if r.released or r.id not in self.active:
            return False
        r.released = True
        del self.active[r.id]
        # the mirror at once (the picker's view); the store when the sender gets to it
        self.reserved[r.backend] = max(0, self.reserved.get(r.backend, 0) - r.tokens)
        self.in_flight[r.backend] = max(0, self.in_flight.get(r.backend, 0) - 1)
        for g in r.groups:
            k = (r.backend, g)
            self.group_reserved[k] = max(0, self.group_reserved.get(k, 0) - r.tokens)
            self.group_in_flight[k] = max(0, self.group_in_flight.get(k, 0) - 1)
        self._outbox.append(self._field(r))
        self._wake.set()
        return True

    def total_reserved(self) -> int:
        return sum(self.reserved.values())

    def total_in_flight(self) -> int:
        return sum(self.in_flight.values())

    async def start(self, on_change: Callable[[], None], waiting: Callable[[], bool]) -> None:
        self._on_change, self._waiting = on_change, waiting
        with contextlib.suppress(RedisError, OSError, asyncio.TimeoutError):
            await self._beat()  # unreachable now: said in the status; requests get 503 meanwhile
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._sender()), loop.create_task(self._heartbeat_loop())]

    async def close(self) -> None:
        """Give back what this replica still holds, drop its lease, stop."""
        self._closing = True
        for r in list(self.active.values()):
            self.release(r)
        deadline = time.monotonic() + max(2.0, 2 * self.timeout_s)
        while (self._outbox or self._qops) and self.reachable and time.monotonic() < deadline:
            self._wake.set()
            await asyncio.sleep(0.01)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        with contextlib.suppress(RedisError, OSError, asyncio.TimeoutError):
            if not self._outbox:
                await self._r.zrem(self.prefix + "leases", self.member)
        with contextlib.suppress(RedisError, OSError, asyncio.TimeoutError):
            await self._r.aclose()

    async def refresh(self) -> None:
        """Read who holds what from the store (``/gateway/status``)."""
        try:
            counts, res, alive, stats, queue = await self._snapshot_script(args=[self.prefix])
        except (RedisError, OSError, asyncio.TimeoutError) as e:
            self._unreachable(e)
            return
        self._mirror(counts)
        ttl = _pairs(alive)
        def holder(member: str) -> dict[str, Any]:
            return {"replica": member.rsplit("/", 1)[0], "member": member, "lease_left_s": None, "requests": 0,
                    "reserved_tokens": 0, "by_backend": {}, "queued": 0}

        holders: dict[str, dict[str, Any]] = {}
        for member, ms in ttl.items():
            holders[member] = holder(member)
            holders[member]["lease_left_s"] = round(int(ms) / 1000, 3) if int(ms) >= 0 else None
        for m in _pairs(queue):
            member = m.rsplit(":", 1)[0]
            holders.setdefault(member, holder(member))["queued"] += 1
        for f, rec in _pairs(res).items():
            member = f.rsplit(":", 1)[0]
            backend, tokens = json.loads(rec)[:2]
            h = holders.setdefault(member, holder(member))
            h["requests"] += 1
            h["reserved_tokens"] += int(tokens)
            by = h["by_backend"].setdefault(backend, {"requests": 0, "reserved_tokens": 0})
            by["requests"] += 1
            by["reserved_tokens"] += int(tokens)
        c = _pairs(counts)
        self._snapshot = {
            "replicas": sorted(holders.values(), key=lambda h: (h["replica"], h["member"])),
            "stats": {k: int(v) for k, v in _pairs(stats).items()},
            "keys_in_flight": {k[2:]: int(v) for k, v in c.items() if k.startswith("k:") and int(v)},
            "queued": len(queue) // 2,
            "peak": {k[3:]: int(v) for k, v in c.items() if k.startswith("pr:")},
        }

    def describe(self) -> dict[str, Any]:
        return {"kind": "redis", "url": redact_url(self.url), "replica": self.replica, "member": self.member, "lease_s": self.lease_s,
                "reachable": self.reachable, "last_error": self.last_error or None,
                "pending_releases": len(self._outbox), "pending_queue_ops": len(self._qops), **self._snapshot}

    # ------------------------------------------------------------------ background
    async def _beat(self) -> None:
        self._mirror(await self._heartbeat(args=[self.prefix, self.member, self._lease_ms]))

    async def _heartbeat_loop(self) -> None:
        """Renew the lease (three times per lease) and read the totals; while requests wait
        here, read them every 50 ms, so a release on another replica admits them soon (the
        picker's view of the other replicas is only as fresh as the last script). Idle, it
        sleeps until the next renewal or until the view says no to a request (``_nudge``)."""
        while True:
            if not self._waiting():
                self._nudge.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._nudge.wait(), self.lease_s / 3)
            if self._waiting():
                await asyncio.sleep(0.05)
            try:
                await self._beat()
            except (RedisError, OSError, asyncio.TimeoutError) as e:
                self._unreachable(e)
            if self._waiting():
                self._on_change()  # waiters here may fit now, or no longer wait behind another replica's

    async def _sender(self) -> None:
        """Send releases to the store in batches, retrying until it answers."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._qops:
                qbatch = self._qops[:256]
                try:
                    await self._queue(args=[self.prefix, self.member, *(x for op in qbatch for x in op)])
                except (RedisError, OSError, asyncio.TimeoutError) as e:
                    self._unreachable(e)
                    await asyncio.sleep(0.2)
                    continue
                del self._qops[:len(qbatch)]
            while self._outbox:
                batch = self._outbox[:256]
                try:
                    done, flat = await self._release(
                        args=[self.prefix, self.member, 0 if self._closing else self._lease_ms, *batch])
                except (RedisError, OSError, asyncio.TimeoutError) as e:
                    self._unreachable(e)
                    await asyncio.sleep(0.2)
                    continue
                del self._outbox[:len(batch)]
                self._mirror(flat)
                self._on_change()
