"""What crosses the network per token in an RPC deployment, and what it costs on a given link.

llama-server runs one graph per ubatch; ggml-backend's scheduler cuts it into splits, one per
run of nodes on the same device (ggml/src/ggml-backend.cpp:1215-1745), and before each split
copies that split's inputs to its device (ggml-backend.cpp:1815-1950). A device behind an
rpc-server receives each copy as an ``RPC_CMD_SET_TENSOR`` and runs its split on
``RPC_CMD_GRAPH_COMPUTE`` (the whole serialised graph) or, when llama.cpp reuses the graph
(src/llama-context.cpp:1414: same shapes, e.g. every decode step until the KV window grows by
256 cells), ``RPC_CMD_GRAPH_RECOMPUTE`` (4 bytes) (ggml/src/ggml-rpc/ggml-rpc.cpp:1033-1053). The
RPC backend has no device-to-device copy (``cpy_tensor_async`` is NULL, ggml-rpc.cpp:1069-1086,
and ``cpy_tensor`` works only inside one server, 751-772), so an activation leaving one
rpc-server for another is read back to llama-server (``RPC_CMD_GET_TENSOR``, a round trip) and
sent on: it crosses the network twice. The logits of the output layer come back the same way.

What each split receives, at build 11434 (ggml-backend's split inputs, ``GGML_SCHED_DEBUG=1``,
and src/llama-graph.cpp):

- the device of the first layer: the token path's three embedding inputs, n_embd x 4 B per token
  each (the token rows, the embedding input and the mixed-batch input: ``ggml_build_forward_select``
  keeps all three, llama-graph.cpp:2459-2493), the mixed batch's slot ids (8 B per token), and for
  gemma the row scale (4 B per token, 2517-2526);
- every other device: the activation of the previous one (``l_out``), n_embd x 4 B per token;
- a device with attention layers: the positions (4 B per token, 16 B with M-RoPE), and per KV
  cache (one, or two with sliding-window layers) the K and V cell indices (8 B per token each) and
  the KQ mask: n_kv x tokens x 2 B with flash attention, 4 B without (llama-graph.cpp:29-46);
- a device with recurrent layers: ``rs_s_copy``, 4 B per sequence (llama-graph.cpp:3630-3645);
- the output device: the output row ids, 4 B per output; its logits (n_vocab x 4 B per output) go
  back to llama-server.

Every message costs its header: 1 B command + 8 B size; a SET_TENSOR carries the serialised
tensor (296 B, ``rpc_tensor``, ggml-rpc.cpp:37-57) + 1 B cache flag + 8 B offset before the data;
a GET_TENSOR request is 296 + 16 B and its answer 8 B + the data. tests/launch/test_rpc_network.py
counts the bytes through a proxy: every decode step equals this model to the byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from llamarig.gguf.spec import ModelSpec
from llamarig.i18n import _
from llamarig.plan import memory as M
from llamarig.plan.config import ServerConfig
from llamarig.plan.result import Plan
from llamarig.plan.rpc import UNKNOWN_RPC_SHARE
from llamarig.units import fmt_bytes

#: sizeof(rpc_tensor) (ggml-rpc.cpp:37-57, packed; GGML_MAX_SRC 10, GGML_MAX_NAME 64)
RPC_TENSOR = 296
#: every command: 1 B command + 8 B payload size (send_rpc_cmd, ggml-rpc.cpp:307-320)
CMD = 9
#: SET_TENSOR header: the tensor, its cache flag and offset (serialize_set_tensor, 719-730)
SET_OVERHEAD = CMD + RPC_TENSOR + 1 + 8
#: GET_TENSOR: request (tensor, offset, size), answer's size field (get_tensor, 732-740; 2060-2072)
GET_REQUEST = CMD + RPC_TENSOR + 16
ANSWER = 8
#: GRAPH_RECOMPUTE: the device id (ggml-rpc.cpp:1039-1042)
RECOMPUTE = CMD + 4
#: COPY_TENSOR inside one server: two tensors; answer 1 B (751-772)
COPY_REQUEST = CMD + 2 * RPC_TENSOR
#: tensors a serialised graph carries per layer it holds, as measured on the llama rig (95 nodes,
#: 136 tensors for 3 layers): an estimate, used only for GRAPH_COMPUTE's size
TENSORS_PER_LAYER = 45
#: architectures whose positions are M-RoPE / iM-RoPE: 4 per token (llama-hparams.cpp:285-288)
MROPE_ARCHS = frozenset({"qwen2vl", "qwen25vl", "qwen3vl", "qwen3vlmoe", "qwen35", "qwen35moe", "glm4v"})
#: token embeddings scaled per row (gemma: tok_scale, llama-graph.cpp:2517-2526)
SCALED_EMBD_ARCHS = frozenset({"gemma", "gemma2", "gemma3", "gemma3n", "gemma4"})


@dataclass(frozen=True)
class Link:
    """A network link: its payload rate (bytes/s after Ethernet, IP and TCP headers) and round
    trip time. ``method``: how the figures were obtained."""

    name: str
    rate: float
    rtt_s: float
    method: str = "given"


#: TCP payload per Ethernet frame at MTU 1500: 1448 of 1538 bytes on the wire (preamble, header,
#: FCS, gap; IPv4 and TCP with timestamps)
ETHERNET_PAYLOAD = 1448 / 1538
#: typical switched-LAN round trips, to be replaced by what ``ping`` shows on yours
LINKS = (
    Link("1GbE", 1e9 / 8 * ETHERNET_PAYLOAD, 0.25e-3),
    Link("2.5GbE", 2.5e9 / 8 * ETHERNET_PAYLOAD, 0.2e-3),
    Link("10GbE", 10e9 / 8 * ETHERNET_PAYLOAD, 0.1e-3),
)


@dataclass(frozen=True)
class StageTraffic:
    """One rpc-server device's share of a step: bytes up (llama-server to it) and down, the
    round trips llama-server waits for, and what the bytes are."""

    device: str
    endpoint: str
    up: int
    down: int
    round_trips: int
    parts: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Step:
    """One graph run: a decode step (one token per sequence) or a prefill ubatch."""

    what: str
    n_tokens: int
    n_kv: int
    stages: tuple[StageTraffic, ...]
    #: GRAPH_COMPUTE's serialised graph, when the graph changed (estimated), all devices
    graph_bytes: int = 0

    @property
    def up(self) -> int:
        return sum(s.up for s in self.stages)

    @property
    def down(self) -> int:
        return sum(s.down for s in self.stages)

    @property
    def round_trips(self) -> int:
        return sum(s.round_trips for s in self.stages)

    def seconds(self, link: Link, graph: bool = False) -> float:
        """Time on the wire: every byte at the link's rate (up and down share nothing on full
        duplex, but the step waits for both: their sum is the bound when they alternate, as here)
        plus one round trip per read llama-server waits for."""
        b = self.up + self.down + (self.graph_bytes if graph else 0)
        return b / link.rate + self.round_trips * link.rtt_s


@dataclass(frozen=True)
class LinkCost:
    link: Link
    decode_ms: float  # added per decode step
    prefill_ms: float  # added per prefill ubatch
    decode_tok_s: float | None = None  # with the speed model's compute, when known


@dataclass(frozen=True)
class NetworkReport:
    """The network model of an RPC deployment (docs/plan.md, "RPC deployments")."""

    decode: Step
    prefill: Step
    depth: int
    costs: tuple[LinkCost, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, object]:
        def step(s: Step) -> dict[str, object]:
            return {"n_tokens": s.n_tokens, "n_kv": s.n_kv, "up_bytes": s.up, "down_bytes": s.down,
                    "round_trips": s.round_trips, "graph_bytes": s.graph_bytes,
                    "stages": [{"device": x.device, "endpoint": x.endpoint, "up": x.up, "down": x.down,
                                "round_trips": x.round_trips, "parts": dict(x.parts)} for x in s.stages]}
        return {"depth": self.depth, "decode": step(self.decode), "prefill": step(self.prefill),
                "links": [{"link": c.link.name, "rate_bytes_s": c.link.rate, "rtt_ms": c.link.rtt_s * 1e3,
                           "method": c.link.method, "decode_ms_per_token": round(c.decode_ms, 4),
                           "prefill_ms_per_ubatch": round(c.prefill_ms, 3), "decode_tok_s": c.decode_tok_s}
                          for c in self.costs],
                "notes": list(self.notes)}


@dataclass(frozen=True)
class _Device:
    name: str
    endpoint: str  # "" for a local device
    layers: tuple[int, ...]
    output: bool


def _endpoint(name: str) -> str:
    """``RPC0[10.0.0.2:50052]`` -> ``10.0.0.2:50052``; "" for a local device."""
    return name[name.index("[") + 1:-1] if name.startswith("RPC") and "[" in name else ""


def _devices(spec: ModelSpec, cfg: ServerConfig, plan: Plan) -> list[_Device]:
    names = [d.name for d in plan.devices]
    free = [d.capacity or UNKNOWN_RPC_SHARE for d in plan.devices]
    pl = M.place_layers(spec, cfg, names, free)
    return [_Device(n, _endpoint(n), tuple(il for il, dv in enumerate(pl.layer_dev) if dv == i), pl.output_dev == i)
            for i, n in enumerate(names)]


def network_model(spec: ModelSpec, cfg: ServerConfig, plan: Plan, depth: int | None = None,
                  links: Sequence[Link] = LINKS, decode_tok_s: float | None = None) -> NetworkReport | None:
    """The bytes and round trips of a decode step and of a prefill ubatch at ``depth`` tokens
    of context (default: half the slot), and their time on each link; None when no rpc-server
    device holds a layer or the output. ``cfg``: the settings llama-server runs (after --fit)."""
    devs = _devices(spec, cfg, plan)
    if not any(d.endpoint and (d.layers or d.output) for d in devs):
        return None
    d = plan.n_ctx_slot // 2 if depth is None else max(0, depth)
    n_seq = 1  # one request decoding: one token per step
    dec = _step(spec, plan, devs, "decode", n_seq, d, n_outputs=n_seq)
    ub = plan.n_ubatch
    # a prompt's ubatches before its last return no logits (n_outputs 0); the last one does
    pre = _step(spec, plan, devs, "prefill", ub, d, n_outputs=0)
    costs = tuple(LinkCost(lk, dec.seconds(lk) * 1e3, pre.seconds(lk, graph=True) * 1e3,
                           None if not decode_tok_s else 1 / (1 / decode_tok_s + dec.seconds(lk)))
                  for lk in links)
    notes = [_("decode: the graph is reused (GRAPH_RECOMPUTE) until the KV window grows by 256 cells; then the "
               "whole graph, about {kib} KiB, is sent again (src/llama-context.cpp:1414)").format(
        kib=dec.graph_bytes // 1024)]
    if any(x.output and x.endpoint for x in devs):
        notes.append(_("the output layer is on an rpc-server: every token's logits ({kib} KiB) come back over the "
                       "network; a local GPU (or -ngl below all) keeps them here").format(
            kib=spec.n_vocab * 4 * n_seq // 1024 if spec.n_vocab else 0))
    if plan.checkpoint_bytes and any(x.endpoint and x.layers for x in devs):
        notes.append(_("context checkpoints (hybrid and sliding-window models): each one llama-server takes while "
                       "a prompt is processed reads the recurrent state / window of the layers on the rpc-servers "
                       "back, up to {size} per checkpoint").format(size=fmt_bytes(plan.checkpoint_bytes)))
    if cfg.cache_ram_mib != 0:
        notes.append(_("--cache-ram (8192 MiB by default) keeps each replaced prompt in host RAM: when a request "
                       "replaces a slot, its KV cells come back from every rpc-server once (--cache-ram 0 "
                       "avoids it)"))
    return NetworkReport(dec, pre, d, costs, tuple(notes))


def step_traffic(spec: ModelSpec, cfg: ServerConfig, plan: Plan, n_tokens: int, depth: int,
                 n_outputs: int = 1, what: str = "step") -> Step:
    """The traffic of one graph run of ``n_tokens`` at ``depth`` (a decode step: 1 token; a
    prefill ubatch: up to n_ubatch)."""
    return _step(spec, plan, _devices(spec, cfg, plan), what, n_tokens, depth, n_outputs)


def _n_kv(plan: Plan, depth: int, n_tokens: int) -> int:
    """The KV window a step attends over: used cells padded to 256, at most the cache
    (src/llama-kv-cache.cpp get_n_kv)."""
    return min(plan.n_ctx_seq, max(256, M.pad(depth + n_tokens, 256)))


def _step(spec: ModelSpec, plan: Plan, devs: list[_Device], what: str, n: int, depth: int,
          n_outputs: int) -> Step:
    n_kv = _n_kv(plan, depth, n)
    stages: list[StageTraffic] = []
    graph = 0
    first_layer_dev = next((i for i, x in enumerate(devs) if 0 in x.layers), -1)
    active = [i for i, x in enumerate(devs) if x.layers or x.output]
    for k, i in enumerate(active):
        x = devs[i]
        if not x.endpoint:
            continue
        parts = _inputs(spec, plan, x, n, n_kv, n_outputs, first=i == first_layer_dev, boundary=k > 0 or i != first_layer_dev)
        up = sum(SET_OVERHEAD + b for _, b in parts) + RECOMPUTE
        graph += CMD + 12 + (8 + RPC_TENSOR) * TENSORS_PER_LAYER * max(1, len(x.layers))
        nxt = devs[active[k + 1]] if k + 1 < len(active) else None
        down, trips = 0, 1
        if x.output and n_outputs:
            down = ANSWER + (spec.n_vocab or 0) * 4 * n_outputs
            up += GET_REQUEST
            parts = (*parts, ("logits back", (spec.n_vocab or 0) * 4 * n_outputs))
        elif x.output:
            trips = 0  # nothing to read back: the next ubatch follows
        elif nxt is not None and nxt.endpoint == x.endpoint:
            up += COPY_REQUEST  # the next device is on the same server: copied there
            down = ANSWER + 1
        else:
            down = ANSWER + (spec.n_embd or 0) * 4 * n
            up += GET_REQUEST
            parts = (*parts, ("activation back", (spec.n_embd or 0) * 4 * n))
        stages.append(StageTraffic(x.name, x.endpoint, up, down, trips, tuple(parts)))
    return Step(what, n, n_kv, tuple(stages), graph)


def _inputs(spec: ModelSpec, plan: Plan, x: _Device, n: int, n_kv: int, n_outputs: int, first: bool,
            boundary: bool) -> tuple[tuple[str, int], ...]:
    """The split inputs one device receives for a step of ``n`` tokens (module docstring)."""
    e = (spec.n_embd or 0) * 4 * n
    out: list[tuple[str, int]] = []
    if first:
        out += [("token embeddings", e), ("embedding input", e), ("mixed-batch embeddings", e),
                ("mixed-batch slots", 8 * n)]
        if spec.architecture in SCALED_EMBD_ARCHS:
            out.append(("embedding row scale", 4 * n))
    elif boundary:
        out.append(("activation", e))
    kinds = {spec.layers[il].kind for il in x.layers if il < len(spec.layers)}
    if kinds & {"recurrent"}:
        out.append(("recurrent state copy ids", 4 * max(1, plan.n_parallel)))
    if kinds & {"attention", "swa"}:
        out.append(("positions", 4 * n * (4 if spec.architecture in MROPE_ARCHS else 1)))
        mask = 2 if plan.flash_attn else 4
        for kind in sorted(kinds & {"attention", "swa"}):
            cells = n_kv if kind == "attention" else min(n_kv, _swa_cells(spec, plan, n))
            out += [(f"{kind} K cell ids", 8 * n), (f"{kind} V cell ids", 8 * n), (f"{kind} KQ mask", cells * n * mask)]
    if x.output and n_outputs:
        out.append(("output ids", 4 * n_outputs))
    return tuple(out)


def _swa_cells(spec: ModelSpec, plan: Plan, n: int) -> int:
    """A sliding-window cache's size, which bounds its KV window (memory.resolve_context)."""
    return M.pad(min(plan.n_ctx_seq, (spec.swa_window or 0) * plan.n_parallel + plan.n_ubatch), 256)
