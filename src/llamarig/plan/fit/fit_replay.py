"""``--fit``: what llama-server changes before loading the model, replayed on the memory model.

A port of common_params_fit_impl (common/fit.cpp at build 11434). llama-server runs
common_fit_params (common/common.cpp:1235-1267) before loading the model; it measures by dry-run
loads, and every such "measurement" is a plan of the memory model here (``plan_fn``, the
planner's own). Only the device buffers count (model + context + compute, fit.cpp:80-97), the
draft model / MTP context is added to every measurement (fit.cpp:205-258), and the mmproj's
worst case is added to the --fit-target of its device instead
(tools/server/server-context.cpp:1174-1196).

The steps, each a function below: 1. nothing to do when every device keeps its target free
(fit.cpp:261-370); 2. a lower context when ``-c`` is unset (fit.cpp:373-457); the flags that stop
fit from moving layers (fit.cpp:459-486); 3. layers filled back to front by the method of false
position (fit.cpp:488-733); 4. for a MoE model whose dense tensors fit, dense-only layers turned
into full layers front to back, then part of one more layer (fit.cpp:735-928).
``llamarig.plan.fit.fit_log`` reads the real server's decisions back from its log.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from llamarig.diagnostics import Diagnostic, Severity, info, warning
from llamarig.i18n import _, join
from llamarig.plan.config import ServerConfig
from llamarig.plan.result import Plan, PlanInputs
from llamarig.units import MiB, fmt_bytes

#: (inputs of one trial, the user's settings, whether as fit's dry run measures it) -> the plan of
#: that trial
PlanFn = Callable[[PlanInputs, ServerConfig, bool], Plan]

_U32 = 1 << 32
_U32_MAX = _U32 - 1
#: common_layer_fraction_t (fit.cpp:17-24)
_ATTN, _UP, _GATE, _MOE = 1, 2, 3, 4
#: all MoE tensors (fit.cpp:617)
_MOE_ALL = r"blk\.\d+\.ffn_(up|down|gate_up|gate)_(ch|)exps"
#: llama_max_tensor_buft_overrides() (src/llama.cpp:90-92)
_MAX_OVERRIDES = 4096


def _overflow_pattern(il: int, lf: int) -> str:
    """get_overflow_pattern (fit.cpp:493-532): the tensors of layer ``il`` that overflow."""
    if lf == _ATTN:
        return rf"blk\.{il}\.ffn_(gate|up|gate_up|down).*"
    if lf == _UP:
        return rf"blk\.{il}\.ffn_(gate|gate_up|down).*"
    if lf == _GATE:
        return rf"blk\.{il}\.ffn_down.*"
    return rf"blk\.{il}\.ffn_(up|down|gate_up|gate)_(ch|)exps"


@dataclass
class _Ngl:
    """ngl_t (fit.cpp:534-545): layers of one device, n_part of them with their MoE tensors
    (or, for the first one, the overflow_type fraction) elsewhere."""

    n_layer: int = 0
    n_part: int = 0
    overflow: int = _MOE

    @property
    def n_full(self) -> int:
        return self.n_layer - self.n_part


def _copy(ngl: list[_Ngl]) -> list[_Ngl]:
    return [_Ngl(x.n_layer, x.n_part, x.overflow) for x in ngl]


def _tdiv(a: int, b: int) -> int:
    """C++ integer division (truncates toward zero)."""
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _u32(x: int) -> int:
    """int64 -> uint32_t as C++ converts it (modulo 2^32): a negative step becomes huge."""
    return x % _U32


def _step(delta: int, target: int, low: int, high: int) -> int:
    """One false-position step (fit.cpp:685-687, 787-789): between 1 and delta - 1."""
    return min(max(_u32(_tdiv(delta * (target - low), high - low)), 1), delta - 1)


@dataclass(frozen=True)
class FitResult:
    """What --fit decided, as values: the context it chose (None: unchanged), and when it
    placed layers, the layers per device (the output layer counted on the last), how many of
    them overflow (MoE tensors or a fraction elsewhere), and the -ngl and -ot it set."""

    n_ctx: int | None = None
    layers: tuple[int, ...] = ()
    overflowing: tuple[int, ...] = ()
    n_gpu_layers: int | None = None
    overrides: tuple[tuple[str, str], ...] = ()
    #: why fit placed no layers: a flag that stops it, or its reason for giving up ("")
    stopped: str = ""


#: the codes of what --fit's model says (``FitOutcome.diagnostics``, then ``Plan.diagnostics``)
FIT_CONTEXT_LOWERED = "fit-context-lowered"  # info: -c unset, the context lowered to fit
FIT_NO_MEMORY = "fit-no-memory"  # warning: not even the smallest context fits system memory
FIT_KEEPS_PLACEMENT = "fit-keeps-placement"  # info: a flag stops fit moving layers
FIT_GIVES_UP = "fit-gives-up"  # info: common_params_fit_exception
FIT_PLACEMENT = "fit-placement"  # info: where fit put the layers
FIT_MOVES_TO_CPU = "fit-moves-to-cpu"  # warning: layers or expert tensors left in host memory
FIT_UNDER_COUNTS = "fit-under-counts"  # warning: a device fit settled needs more in the final placement


@dataclass
class FitOutcome:
    """What --fit's model settles on: the plan and settings of its result, what it found (coded
    Diagnostics, in the order they are told), and the result in llama-server's terms."""

    plan: Plan
    cfg: ServerConfig
    diagnostics: list[Diagnostic] = field(default_factory=list)
    result: FitResult = field(default_factory=FitResult)

    def said(self, *severities: Severity) -> bool:
        """Whether fit has something of these severities to say (any, when none is named)."""
        return any(not severities or d.severity in severities for d in self.diagnostics)


def _margins(cfg: ServerConfig, n: int) -> list[int]:
    """--fit-target per device: one value is broadcast, a list sets the first devices and the
    rest keep 1024 MiB (common/arg.cpp:2898-2921)."""
    vals = list(cfg.fit_target_mib) or [1024]
    if len(vals) == 1:
        return [vals[0] * MiB] * max(1, n)
    return [(vals[i] if i < len(vals) else 1024) * MiB for i in range(max(1, n))]


class _FitAbort(Exception):
    """common_params_fit_exception: fit gives up and keeps what it changed so far."""


@dataclass
class _Trials:
    """What every step shares: the inputs, the devices' free memory and targets, and the
    dry-run "measurements" (plans, cached by the settings that change between trials)."""

    inp: PlanInputs
    plan_fn: PlanFn
    nd: int
    free: list[int]
    margins: list[int]
    hp_ngl: int
    names: list[str]
    cache: dict[object, Plan] = field(default_factory=dict)

    @staticmethod
    def make(inp: PlanInputs, plan0: Plan, plan_fn: PlanFn) -> _Trials | None:
        devs = plan0.devices
        if any(not d.capacity for d in devs):
            return None  # a device without a known size: fit.cpp would not use it (fit.cpp:113-124)
        if not devs and not inp.hardware.ram_bytes:
            return None
        nd = len(devs)
        margins = _margins(inp.cfg, nd)
        for i, d in enumerate(devs):
            margins[i] += d.get("mmproj")  # server-context.cpp:1174-1196
        if nd == 0:
            margins[0] += plan0.host.get("mmproj")
        free = [(d.capacity or 0) - d.get("other") for d in devs] if nd else [int(inp.hardware.ram_bytes or 0)]
        hp_ngl = inp.spec.n_layer_main + (inp.spec.nextn_layers if inp.cfg.mtp else 0)  # fit.cpp:141-144
        return _Trials(inp, plan_fn, nd, free, margins, hp_ngl, [d.name for d in devs])

    def plan(self, c: ServerConfig, dry_run: bool = False) -> Plan:
        """The plan of trial ``c``: as llama-server will allocate it, or (``dry_run``) as fit's dry
        run measures it (llamarig.plan.planner.fit_measurement)."""
        key = (c.n_ctx, c.n_gpu_layers, c.tensor_split, c.override_tensor, dry_run)
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = self.plan_fn(replace(self.inp, cfg=c), self.inp.cfg, dry_run)
        return hit

    def measure(self, c: ServerConfig) -> list[int]:
        """What fit's dry run of trial ``c`` finds used per device (common/fit.cpp:30-153)."""
        return self.used(self.plan(c, dry_run=True))

    def used(self, p: Plan) -> list[int]:
        """model + context + compute per device, the draft/MTP context included (fit's view)."""
        if self.nd == 0:
            h = p.host
            return [sum(h.get(k) for k in ("weights", "kv", "recurrent", "compute", "output", "draft"))]
        return [d.total - d.get("other") - d.get("mmproj") for d in p.devices]

    def short(self, used: list[int]) -> bool:
        return any(self.free[i] - u < self.margins[i] for i, u in enumerate(used))


def fit(inp: PlanInputs, plan0: Plan, plan_fn: PlanFn) -> FitOutcome | None:
    """common_params_fit_impl (common/fit.cpp:179-931), steps 1-4, on the memory model. None when
    --fit changes nothing (or cannot be modelled: a device of unknown size)."""
    tr = _Trials.make(inp, plan0, plan_fn)
    if tr is None or not tr.short(tr.measure(inp.cfg)):  # step 1 (fit.cpp:261-370)
        return None
    cfg = inp.cfg
    out = FitOutcome(plan0, cfg)
    if _lower_context(tr, plan0, out):  # step 2; with one device a context that fits ends it
        return out
    if tr.nd == 0:
        out.diagnostics.append(warning(FIT_NO_MEMORY, _(
            "--fit: the model does not fit into system memory even at the smallest context; llama-server's fit "
            "gives up (common/fit.cpp:459-461)")))
        return out if out.said(Severity.INFO) else None
    why = _layers_stopped_by(cfg, tr.nd)
    if why:
        if tr.short(tr.measure(out.cfg)):
            out.diagnostics.append(info(FIT_KEEPS_PLACEMENT, _(
                "--fit does not move layers to the CPU: {why}; the plan keeps your placement").format(why=why)))
        out.result = replace(out.result, stopped=why)
        return out if out.said(Severity.INFO) else None
    return _place_layers(tr, out)


def _lower_context(tr: _Trials, plan0: Plan, out: FitOutcome) -> bool:
    """Step 2 (fit.cpp:373-457): with ``-c`` unset, the context is interpolated linearly between
    --fit-ctx and n_ctx_train (x streams) to meet the total target. True when that ends fitting
    (one device and the interpolated context fits, fit.cpp:436-439)."""
    spec, cfg = tr.inp.spec, tr.inp.cfg
    n_streams = 1 if plan0.kv_unified else max(1, plan0.n_parallel)
    # -c unset -> n_ctx 0 (auto); --kv-unified-per-slot sizes it first (server.cpp:176-186)
    n_ctx_auto = cfg.n_ctx == 0 and not (cfg.kv_unified_per_slot > 0 and "n_ctx" not in cfg.set_flags)
    # an explicit -c 0 sets fit_params_min_ctx = UINT32_MAX (common/arg.cpp:1645-1648)
    n_ctx_min = _U32_MAX if (cfg.n_ctx == 0 and "n_ctx" in cfg.set_flags) else cfg.fit_ctx
    n_ctx_max = min((spec.n_ctx_train or 4096) * n_streams, _U32_MAX)
    n_ctx_min_total = min(n_ctx_min * n_streams, _U32_MAX)
    used0 = tr.measure(cfg)
    surplus = sum(tr.free[i] - used0[i] for i in range(max(1, tr.nd))) - sum(tr.margins)
    if surplus >= 0 or not n_ctx_auto or n_ctx_max <= n_ctx_min_total:
        return False
    target = sum(tr.free) - sum(tr.margins)
    if tr.nd > 1:
        # whole layers / tensors per device: expect some waste (fit.cpp:403-411)
        model = sum(plan0.fit_model_bytes)
        ngl_u = cfg.n_gpu_layers if cfg.n_gpu_layers >= 0 else _U32_MAX
        per_layer = _tdiv(model, max(1, min(ngl_u, tr.hp_ngl)))
        target -= (tr.nd + 1) * per_layer // (2 if spec.n_expert == 0 else 6)
    used_min = sum(tr.measure(cfg.with_(n_ctx=n_ctx_min_total)))
    done = False
    if target > used_min:
        n_ctx = n_ctx_min_total + _tdiv((n_ctx_max - n_ctx_min_total) * (target - used_min), sum(used0) - used_min)
        align = 256 * n_streams  # fit.cpp:428-430
        n_ctx = max(n_ctx - n_ctx % align, n_ctx_min_total)
        done = tr.nd <= 1
    else:
        n_ctx = n_ctx_min_total
    out.cfg = cfg.with_(n_ctx=n_ctx)
    out.plan = tr.plan(out.cfg)
    out.result = replace(out.result, n_ctx=n_ctx)
    out.diagnostics.append(info(FIT_CONTEXT_LOWERED, _(
        "--fit (on by default, -c unset): context lowered from {before} to {after} so that each device keeps "
        "--fit-target {mib} MiB free (common/fit.cpp:413-445, linear interpolation between --fit-ctx and "
        "n_ctx_train)").format(before=n_ctx_max, after=n_ctx,
                               mib=cfg.fit_target_mib[0] if cfg.fit_target_mib else 1024)))
    return done


def _layers_stopped_by(cfg: ServerConfig, nd: int) -> str:
    """The flag that keeps fit from moving layers (fit.cpp:463-486), or ""."""
    if cfg.n_gpu_layers != -1:
        return _("{flags} given (fit.cpp:{lines})").format(
            flags=f"-ngl {cfg.n_gpu_layers if cfg.n_gpu_layers >= 0 else 'all'}", lines="463-465")
    if nd > 1 and any(x != 0 for x in cfg.tensor_split[:nd]):
        return _("{flags} given (fit.cpp:{lines})").format(flags="-ts", lines="470-475")
    if nd > 1 and cfg.split_mode == "row":
        return "-sm row (fit.cpp:477-479)"
    if cfg.override_tensor or cfg.cpu_moe or cfg.n_cpu_moe or cfg.n_cpu_ffn:
        return _("{flags} given (fit.cpp:{lines})").format(flags="-ot/--cpu-moe/--n-cpu-moe/--n-cpu-ffn",
                                                           lines="484-486")
    return ""


class _Layers:
    """Steps 3 and 4: the settings a per-device layer assignment means, and their memory."""

    def __init__(self, tr: _Trials, base: ServerConfig) -> None:
        self.tr, self.base, self.nd = tr, base, tr.nd
        self.targets = [tr.free[i] - tr.margins[i] for i in range(tr.nd)]  # fit.cpp:646-651

    def cfg_for(self, ngl: list[_Ngl], ob: list[str]) -> ServerConfig:
        """set_ngl_tensor_split_tbo (fit.cpp:548-584)."""
        n_gpu = sum(x.n_layer for x in ngl)
        il0 = self.tr.hp_ngl + 1 - n_gpu
        ots: list[tuple[str, str]] = []
        for i in range(self.nd):
            il0 += ngl[i].n_full
            for il in range(il0, il0 + ngl[i].n_part):
                ots.append((_overflow_pattern(il, ngl[i].overflow if il == il0 else _MOE),
                            ob[i] if il == il0 else "CPU"))
            il0 += ngl[i].n_part
        if len(ots) + 1 >= _MAX_OVERRIDES:
            raise _FitAbort("llama_max_tensor_buft_overrides() == 4096 is insufficient for model (fit.cpp:566-575)")
        ts = tuple(float(x.n_layer) for x in ngl) if self.nd > 1 else self.base.tensor_split
        return self.base.with_(n_gpu_layers=n_gpu, tensor_split=ts, override_tensor=tuple(ots))

    def mem(self, ngl: list[_Ngl], ob: list[str]) -> list[int]:
        return self.tr.measure(self.cfg_for(ngl, ob))


def trial_config(inp: PlanInputs, device_names: Sequence[str], n_ctx: int,
                 trial: Sequence[tuple[int, int, int]]) -> ServerConfig:
    """The settings of one of fit's dry runs as its trace logs it ((n_layer, n_part,
    overflow_type) per device, llamarig.plan.fit.fit_log.FitTrial) at context ``n_ctx``: what the plan
    must measure the same as llama-server did. A device whose first partial layer overflows by
    a fraction (UP, GATE, ATTN) sends it to the next device (fit.cpp:817-822)."""
    nd = len(device_names)
    tr = _Trials(inp, lambda i, c, d: NotImplemented, nd, [0] * nd, [0] * nd,
                 inp.spec.n_layer_main + (inp.spec.nextn_layers if inp.cfg.mtp else 0), list(device_names))
    ngl = [_Ngl(n, p, ov) for n, p, ov in trial]
    ob = [device_names[i + 1] if ov in (_UP, _GATE, _ATTN) and i < nd - 1 else "CPU"
          for i, (_n, _p, ov) in enumerate(trial)]
    return _Layers(tr, inp.cfg.with_(n_ctx=n_ctx)).cfg_for(ngl, ob)


def _place_layers(tr: _Trials, out: FitOutcome) -> FitOutcome:
    """Steps 3 and 4, then the plan of their result and its notes."""
    lay = _Layers(tr, out.cfg)
    moe = tr.inp.spec.n_expert > 0
    try:
        surplus_cpu_moe = 0
        if moe:  # fit.cpp:616-644
            u = tr.measure(out.cfg.with_(override_tensor=((_MOE_ALL, "CPU"),)))
            surplus_cpu_moe = sum(tr.free[i] - u[i] - tr.margins[i] for i in range(tr.nd))
        ob = ["CPU"] * tr.nd
        ngl, mem, settled = _fill_back_to_front(lay, ob, moe)
        if moe and surplus_cpu_moe > 0:
            ngl, ob, mem = _fit_step4(lay, ngl, ob, mem)
        final_cfg = lay.cfg_for(ngl, ob)
    except _FitAbort as e:
        out.diagnostics.append(info(FIT_GIVES_UP, _("--fit gives up: {why}").format(why=e)))
        out.result = replace(out.result, stopped=str(e))
        return out
    out.plan, out.cfg = tr.plan(final_cfg), final_cfg
    out.result = replace(out.result, layers=tuple(x.n_layer for x in ngl), overflowing=tuple(x.n_part for x in ngl),
                         n_gpu_layers=final_cfg.n_gpu_layers, overrides=final_cfg.override_tensor)
    _placement_notes(tr, ngl, final_cfg, out)
    _under_counted(tr, settled, out)
    return out


def _under_counted(tr: _Trials, settled: list[int], out: FitOutcome) -> None:
    """fit settles each device from the last to the first and checks only the one it is filling
    (common/fit.cpp:689, 706): a device settled within its target can need more once the devices
    before it take layers (with every layer offloaded the scheduler runs the devices as a pipeline
    and keeps 4 copies of each stage's inputs, llama-context.cpp:431-457; the MTP context's graph
    grows with it). The plan counts the final placement: say so where fit's count is short."""
    real = tr.used(out.plan)
    layers = out.result.layers
    for i, (was, now) in enumerate(zip(settled, real, strict=True)):
        target = tr.free[i] - tr.margins[i]
        if not now > target >= was:
            continue
        if any(layers[:i]):
            why = _("once the devices before it took layers (all layers offloaded: pipeline parallelism, 4 copies "
                    "of each stage's inputs, llama-context.cpp:431-457)")
        else:
            why = _("as loaded (a dry run reserves the prompt graph alone, fit.cpp:56-58; the server also the "
                    "one-token graph, llama-context.cpp:674-677)")
        out.diagnostics.append(warning(FIT_UNDER_COUNTS, _(
            "--fit under-counts {device}: it settled the device at {was} (its dry run while filling it; "
            "common/fit.cpp:706 checks only the device being filled), but the final placement needs {now} "
            "of {free}, {short} past --fit-target, {why}; expect an out-of-memory there: set -ngl / -ts "
            "yourself, or raise -fitt by {short}").format(
            device=tr.names[i], was=fmt_bytes(was), now=fmt_bytes(now), free=fmt_bytes(tr.free[i]),
            short=fmt_bytes(now - target), why=why)))


def _fill_back_to_front(lay: _Layers, ob: list[str], moe: bool) -> tuple[list[_Ngl], list[int], list[int]]:
    """Step 3 (fit.cpp:653-732): each device from the last, the largest layer count (dense, or
    dense-only for MoE) that keeps its target, by the method of false position. Also what fit
    counted on each device when it settled it (its trace's "MiB used", fit.cpp:725-729)."""
    nd = lay.nd
    ngl = [_Ngl() for _ in range(nd)]
    mem = lay.mem(ngl, ob)
    settled = [0] * nd
    for i in range(nd - 1, -1, -1):
        ngl, mem = _fill_device(lay, ngl, mem, ob, moe, i)
        settled[i] = mem[i]
    return ngl, mem, settled


def _fill_device(lay: _Layers, ngl: list[_Ngl], mem: list[int], ob: list[str], moe: bool,
                 i: int) -> tuple[list[_Ngl], list[int]]:
    """One device of step 3 (fit.cpp:675-724)."""
    nd, targets = lay.nd, lay.targets
    high = _copy(ngl)
    high[i].n_layer = lay.tr.hp_ngl + 1 - sum(ngl[j].n_layer for j in range(i + 1, nd))
    if moe:
        high[i].n_part = high[i].n_layer if i < nd - 1 else high[i].n_layer - 1
    if high[i].n_layer <= 0:
        return ngl, mem
    mem_high = lay.mem(high, ob)
    if mem_high[i] <= targets[i]:
        return high, mem_high
    delta = high[i].n_layer - ngl[i].n_layer
    while delta > 1:
        step = _step(delta, targets[i], mem[i], mem_high[i])
        test = _copy(ngl)
        test[i].n_layer += step
        if moe:
            test[i].n_part += step - 1 if (i == nd - 1 and test[i].n_part == 0) else step
        mem_test = lay.mem(test, ob)
        if mem_test[i] <= targets[i]:
            ngl, mem = test, mem_test
        else:
            high, mem_high = test, mem_test
        delta = high[i].n_layer - ngl[i].n_layer
    return ngl, mem


def _fit_step4(lay: _Layers, ngl: list[_Ngl], ob: list[str],
               mem: list[int]) -> tuple[list[_Ngl], list[str], list[int]]:
    """Step 4 (fit.cpp:735-928): a MoE model whose dense tensors all fit converts dense-only layers
    into full layers front to back, then tries to fit part of one more layer (UP, GATE or ATTN
    fraction overflowing to the next device or the CPU)."""
    nd = lay.nd
    start = nd
    for i in range(nd - 1, -1, -1):
        if ngl[i].n_layer <= 0:
            break
        start = i
    i = 0
    while i <= start < nd:
        ngl, mem, start = _convert_dense_only(lay, ngl, ob, mem, i, start)
        # try to fit at least part of one more layer (fit.cpp:810-870); llama.cpp's unsigned
        # n_part would wrap below 0 there: that case is skipped here
        if start < nd and ngl[start].n_layer > (0 if i < nd - 1 else 1) and ngl[start].n_part > 0:
            ngl, ob, mem, start = _one_more_partial(lay, ngl, ob, mem, i, start)
        i += 1
    return ngl, ob, mem


def _convert_dense_only(lay: _Layers, ngl: list[_Ngl], ob: list[str], mem: list[int], i: int,
                        start: int) -> tuple[list[_Ngl], list[int], int]:
    """fit.cpp:753-809: move dense-only layers from ``start`` on into full layers of device i."""
    nd, targets = lay.nd, lay.targets
    high = _copy(ngl)
    for j in range(start, nd):
        n_move = high[j].n_layer if j < nd - 1 else high[j].n_layer - 1
        high[i].n_layer += n_move
        high[j].n_layer -= n_move
        high[j].n_part = 0
    start_high = nd - 1
    mem_high = lay.mem(high, ob)
    if mem_high[i] <= targets[i]:
        return high, mem_high, start_high
    delta = high[i].n_full - ngl[i].n_full
    while delta > 1:
        step = _step(delta, targets[i], mem[i], mem_high[i])
        test = _copy(ngl)
        st = start
        conv = 0
        while st < nd:
            n_c = min(step - conv, test[st].n_part)
            test[st].n_layer -= n_c
            test[st].n_part -= n_c
            test[i].n_layer += n_c
            conv += n_c
            if test[st].n_part > 0:
                break
            st += 1
        mem_test = lay.mem(test, ob)
        if mem_test[i] <= targets[i]:
            ngl, mem, start = test, mem_test, st
        else:
            high, mem_high, start_high = test, mem_test, st
        delta = high[i].n_full - ngl[i].n_full
    return ngl, mem, start


def _one_more_partial(lay: _Layers, ngl: list[_Ngl], ob: list[str], mem: list[int], i: int,
                      start: int) -> tuple[list[_Ngl], list[str], list[int], int]:
    """fit.cpp:810-870: one more layer on device i with its UP, then GATE, else ATTN fraction
    overflowing to the next device (or the CPU for the last)."""
    nd, targets = lay.nd, lay.targets
    test = _copy(ngl)
    st = start
    test[st].n_layer -= 1
    test[st].n_part -= 1
    test[i].n_layer += 1
    test[i].n_part += 1
    if test[st].n_part == 0:
        st += 1
    ob_test = list(ob)
    if i < nd - 1:
        ob_test[i] = lay.tr.names[i + 1]

    def ok(m: list[int]) -> bool:
        return m[i] < targets[i] and (i + 1 == nd or m[i + 1] < targets[i + 1])

    test[i].overflow = _UP
    mem_test = lay.mem(test, ob_test)
    if ok(mem_test):
        ngl, ob, mem, start = _copy(test), ob_test, mem_test, st
        test[i].overflow = _GATE
        mem_test = lay.mem(test, ob_test)
        if ok(mem_test):
            ngl, ob, mem, start = _copy(test), ob_test, mem_test, st
    else:
        test[i].overflow = _ATTN
        mem_test = lay.mem(test, ob_test)
        if ok(mem_test):
            ngl, ob, mem, start = _copy(test), ob_test, mem_test, st
    return ngl, ob, mem, start


def _placement_notes(tr: _Trials, ngl: list[_Ngl], final_cfg: ServerConfig, out: FitOutcome) -> None:
    """The note that says where fit put the layers, and the warning when some stay on the CPU."""
    spec = tr.inp.spec
    m_all = tr.hp_ngl + 1
    n_gpu = final_cfg.n_gpu_layers
    per = join(", ", (_("{n} on {device}").format(n=x.n_layer, device=tr.names[i]) for i, x in enumerate(ngl)))
    n_cpu = m_all - n_gpu
    n_exp_cpu = sum(1 for pat, buft in final_cfg.override_tensor
                    if buft == "CPU" and any(re.search(pat, t.name) for t in spec.tensors))
    what = []
    if n_cpu > 0:
        what.append(_("{n} layer(s)").format(n=n_cpu))
    if n_exp_cpu:
        what.append(_("the expert tensors of {n} layer(s) (like --n-cpu-moe)").format(n=n_exp_cpu))
    equiv = f"-ngl {n_gpu}" + (f" -ts {','.join(str(x.n_layer) for x in ngl)}" if tr.nd > 1 else "")
    if final_cfg.override_tensor:
        equiv += f" + {len(final_cfg.override_tensor)} -ot override(s)"
    out.diagnostics.append(info(FIT_PLACEMENT,
        _("--fit would place {n} of {total} layers on the GPU ({per}), the rest on the CPU").format(
            n=n_gpu, total=m_all, per=per)
        + (_(": {what} in host memory").format(what=_(" and ").join(what)) if what else "")
        + _("; each device keeps --fit-target free (common/fit.cpp:488-931, modelled from the source, not "
            "measured); equivalent to {equiv}").format(equiv=equiv)))
    if what:
        out.diagnostics.append(warning(FIT_MOVES_TO_CPU, _(
            "--fit moves {what} to the CPU: llama-server starts, but decode will be much slower than with everything "
            "on the GPU (see the speed table); lower -c, use smaller KV types or a smaller quant to keep it all on "
            "the GPU").format(what=_(" and ").join(what))))
