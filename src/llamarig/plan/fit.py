"""``--fit``: what llama-server changes before loading the model, replayed on the memory model.

A port of common_params_fit_impl (common/fit.cpp at build 11434). Every "measurement" fit.cpp
makes by a dry-run load is a plan of the memory model here (``plan_fn``, the planner's own).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from llamarig.i18n import _, join
from llamarig.plan.config import ServerConfig
from llamarig.plan.result import Plan, PlanInputs
from llamarig.units import MiB

#: (inputs of one trial, the user's settings) -> the plan of that trial
PlanFn = Callable[[PlanInputs, ServerConfig], Plan]

#
# llama-server runs common_fit_params (common/common.cpp:1235-1267) before loading the model. It
# measures by dry-run loads; here every "measurement" is a plan of the memory model. Only the
# device buffers count (model + context + compute, fit.cpp:80-97), the draft model / MTP context
# is added to every measurement (fit.cpp:205-258), and the mmproj's worst case is added to the
# --fit-target of its device instead (tools/server/server-context.cpp:1174-1196).

_U32 = 1 << 32
_U32_MAX = _U32 - 1
#: common_layer_fraction_t (fit.cpp:17-24)
_ATTN, _UP, _GATE, _MOE = 1, 2, 3, 4
#: all MoE tensors (fit.cpp:617)
_MOE_ALL = r"blk\.\d+\.ffn_(up|down|gate_up|gate)_(ch|)exps"


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


def _tdiv(a: int, b: int) -> int:
    """C++ integer division (truncates toward zero)."""
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _u32(x: int) -> int:
    """int64 -> uint32_t as C++ converts it (modulo 2^32): a negative step becomes huge."""
    return x % _U32


@dataclass
class FitOutcome:
    plan: Plan
    cfg: ServerConfig
    notes: list[str]
    warnings: list[str]


def _margins(cfg: ServerConfig, n: int) -> list[int]:
    """--fit-target per device: one value is broadcast, a list sets the first devices and the
    rest keep 1024 MiB (common/arg.cpp:2898-2921)."""
    vals = list(cfg.fit_target_mib) or [1024]
    if len(vals) == 1:
        return [vals[0] * MiB] * max(1, n)
    return [(vals[i] if i < len(vals) else 1024) * MiB for i in range(max(1, n))]


def fit(inp: PlanInputs, plan0: Plan, plan_fn: PlanFn) -> FitOutcome | None:
    """common_params_fit_impl (common/fit.cpp:179-931), steps 1-4, on the memory model. None when
    --fit changes nothing (or cannot be modelled: a device of unknown size)."""
    spec, cfg = inp.spec, inp.cfg
    devs = plan0.devices
    nd = len(devs)
    notes: list[str] = []
    warnings: list[str] = []
    if any(not d.capacity for d in devs):
        return None  # a device without a known size: fit.cpp would not use it (fit.cpp:113-124)
    if nd == 0 and not inp.hardware.ram_bytes:
        return None
    n_streams = 1 if plan0.kv_unified else max(1, plan0.n_parallel)
    # -c unset -> n_ctx 0 (auto); --kv-unified-per-slot sizes it first (server.cpp:176-186)
    n_ctx_auto = cfg.n_ctx == 0 and not (cfg.kv_unified_per_slot > 0 and "n_ctx" not in cfg.set_flags)
    # an explicit -c 0 sets fit_params_min_ctx = UINT32_MAX (common/arg.cpp:1645-1648)
    n_ctx_min = _U32_MAX if (cfg.n_ctx == 0 and "n_ctx" in cfg.set_flags) else cfg.fit_ctx
    n_ctx_train = spec.n_ctx_train or 4096
    n_ctx_max = min(n_ctx_train * n_streams, _U32_MAX)
    n_ctx_min_total = min(n_ctx_min * n_streams, _U32_MAX)
    hp_ngl = spec.n_layer_main + (spec.nextn_layers if cfg.mtp else 0)  # fit.cpp:141-144
    hp_nex = spec.n_expert
    margins = _margins(cfg, nd)
    for i, d in enumerate(devs):
        margins[i] += d.get("mmproj")  # server-context.cpp:1174-1196
    if nd == 0:
        margins[0] += plan0.host.get("mmproj")
    cache: dict[object, Plan] = {}

    def plan_for(c: ServerConfig) -> Plan:
        key = (c.n_ctx, c.n_gpu_layers, c.tensor_split, c.override_tensor)
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = plan_fn(replace(inp, cfg=c), cfg)
        return hit

    def used(p: Plan) -> list[int]:
        """model + context + compute per device, the draft/MTP context included (fit's view)."""
        if nd == 0:
            h = p.host
            return [sum(h.get(k) for k in ("weights", "kv", "recurrent", "compute", "output", "draft"))]
        return [d.total - d.get("other") - d.get("mmproj") for d in p.devices]

    free = ([d.capacity - d.get("other") for d in devs] if nd  # type: ignore[operator]
            else [int(inp.hardware.ram_bytes or 0)])

    # ---------------------------------------------------------------- step 1 (fit.cpp:261-370)
    used0 = used(plan0)
    if all(free[i] - used0[i] >= margins[i] for i in range(max(1, nd))):
        return None
    cur_cfg = cfg
    cur_plan = plan0
    ctx_note = ""
    # ---------------------------------------------------------------- step 2 (fit.cpp:373-457)
    global_surplus = sum(free[i] - used0[i] for i in range(max(1, nd))) - sum(margins)
    done_by_ctx = False
    if global_surplus < 0 and n_ctx_auto and n_ctx_max > n_ctx_min_total:
        sum_used_target = sum(free) - sum(margins)
        if nd > 1:
            # whole layers / tensors per device: expect some waste (fit.cpp:403-411)
            model = sum(plan0.fit_model_bytes)
            ngl_u = cfg.n_gpu_layers if cfg.n_gpu_layers >= 0 else _U32_MAX
            per_layer = _tdiv(model, max(1, min(ngl_u, hp_ngl)))
            sum_used_target -= (nd + 1) * per_layer // (2 if hp_nex == 0 else 6)
        p_min = plan_for(cfg.with_(n_ctx=n_ctx_min_total))
        used_min = sum(used(p_min))
        if sum_used_target > used_min:
            n_ctx = n_ctx_min_total + _tdiv((n_ctx_max - n_ctx_min_total) * (sum_used_target - used_min),
                                            sum(used0) - used_min)
            align = 256 * n_streams  # fit.cpp:428-430
            n_ctx = max(n_ctx - n_ctx % align, n_ctx_min_total)
            done_by_ctx = nd <= 1  # fit.cpp:436-439: one device -> done
        else:
            n_ctx = n_ctx_min_total
        cur_cfg = cfg.with_(n_ctx=n_ctx)
        cur_plan = plan_for(cur_cfg)
        ctx_note = _("--fit (on by default, -c unset): context lowered from {before} to {after} so that each device "
                     "keeps --fit-target {mib} MiB free (common/fit.cpp:413-445, linear interpolation between "
                     "--fit-ctx and n_ctx_train)").format(
            before=n_ctx_max, after=n_ctx, mib=cfg.fit_target_mib[0] if cfg.fit_target_mib else 1024)
        notes.append(ctx_note)
    if done_by_ctx:
        return FitOutcome(cur_plan, cur_cfg, notes, warnings)
    if nd == 0:
        warnings.append(_("--fit: the model does not fit into system memory even at the smallest context; "
                          "llama-server's fit gives up (common/fit.cpp:459-461)"))
        return FitOutcome(cur_plan, cur_cfg, notes, warnings) if ctx_note else None

    # ---------------------------------------------------------------- preconditions (fit.cpp:463-486)
    why = ""
    if cfg.n_gpu_layers != -1:
        why = f"-ngl {cfg.n_gpu_layers if cfg.n_gpu_layers >= 0 else 'all'} given (fit.cpp:463-465)"
    elif nd > 1 and any(x != 0 for x in cfg.tensor_split[:nd]):
        why = "-ts given (fit.cpp:470-475)"
    elif nd > 1 and cfg.split_mode == "row":
        why = "-sm row (fit.cpp:477-479)"
    elif cfg.override_tensor or cfg.cpu_moe or cfg.n_cpu_moe or cfg.n_cpu_ffn:
        why = "-ot/--cpu-moe/--n-cpu-moe/--n-cpu-ffn given (fit.cpp:484-486)"
    if why:
        if any(free[i] - u < margins[i] for i, u in enumerate(used(cur_plan))):
            notes.append(_("--fit does not move layers to the CPU: {why}; the plan keeps your placement").format(why=why))
        return FitOutcome(cur_plan, cur_cfg, notes, warnings) if ctx_note else (
            FitOutcome(plan0, cfg, notes, warnings) if notes else None)

    # ---------------------------------------------------------------- step 3 (fit.cpp:488-733)
    names = [d.name for d in devs]

    def cfg_for(ngl: list[_Ngl], ob: list[str]) -> ServerConfig:
        """set_ngl_tensor_split_tbo (fit.cpp:548-584)."""
        n_gpu = sum(x.n_layer for x in ngl)
        il0 = hp_ngl + 1 - n_gpu
        ots: list[tuple[str, str]] = []
        for i in range(nd):
            il0 += ngl[i].n_full
            for il in range(il0, il0 + ngl[i].n_part):
                ots.append((_overflow_pattern(il, ngl[i].overflow if il == il0 else _MOE),
                            ob[i] if il == il0 else "CPU"))
            il0 += ngl[i].n_part
        if len(ots) + 1 >= 4096:  # llama_max_tensor_buft_overrides() (src/llama.cpp:90-92)
            raise _FitAbort("llama_max_tensor_buft_overrides() == 4096 is insufficient for model (fit.cpp:566-575)")
        ts = tuple(float(x.n_layer) for x in ngl) if nd > 1 else cur_cfg.tensor_split
        return cur_cfg.with_(n_gpu_layers=n_gpu, tensor_split=ts, override_tensor=tuple(ots))

    def mem_for(ngl: list[_Ngl], ob: list[str]) -> list[int]:
        return used(plan_for(cfg_for(ngl, ob)))

    def copy(ngl: list[_Ngl]) -> list[_Ngl]:
        return [_Ngl(x.n_layer, x.n_part, x.overflow) for x in ngl]

    try:
        surplus_cpu_moe = 0
        if hp_nex > 0:  # fit.cpp:616-644
            p_moe = plan_for(cur_cfg.with_(override_tensor=((_MOE_ALL, "CPU"),)))
            u = used(p_moe)
            surplus_cpu_moe = sum(free[i] - u[i] - margins[i] for i in range(nd))
        targets = [free[i] - margins[i] for i in range(nd)]  # fit.cpp:646-651
        ob = ["CPU"] * nd
        ngl = [_Ngl() for _ in range(nd)]
        mem = mem_for(ngl, ob)
        # fill back to front with (dense-only) layers, method of false position (fit.cpp:653-732)
        for i in range(nd - 1, -1, -1):
            n_unassigned = hp_ngl + 1 - sum(ngl[j].n_layer for j in range(i + 1, nd))
            high = copy(ngl)
            high[i].n_layer = n_unassigned
            if hp_nex > 0:
                high[i].n_part = high[i].n_layer if i < nd - 1 else high[i].n_layer - 1
            if high[i].n_layer <= 0:
                continue
            mem_high = mem_for(high, ob)
            if mem_high[i] > targets[i]:
                delta = high[i].n_layer - ngl[i].n_layer
                while delta > 1:
                    step = _u32(_tdiv(delta * (targets[i] - mem[i]), mem_high[i] - mem[i]))
                    step = min(max(step, 1), delta - 1)
                    test = copy(ngl)
                    test[i].n_layer += step
                    if hp_nex:
                        test[i].n_part += step - 1 if (i == nd - 1 and test[i].n_part == 0) else step
                    mem_test = mem_for(test, ob)
                    if mem_test[i] <= targets[i]:
                        ngl, mem = test, mem_test
                    else:
                        high, mem_high = test, mem_test
                    delta = high[i].n_layer - ngl[i].n_layer
            else:
                ngl, mem = high, mem_high
        if hp_nex > 0 and surplus_cpu_moe > 0:
            ngl, ob, mem = _fit_step4(ngl, ob, mem, targets, names, mem_for, copy)
        final_cfg = cfg_for(ngl, ob)
    except _FitAbort as e:
        notes.append(_("--fit gives up: {why}").format(why=e))
        return FitOutcome(cur_plan, cur_cfg, notes, warnings)

    out = plan_for(final_cfg)
    m_all = hp_ngl + 1
    n_gpu = final_cfg.n_gpu_layers
    per = join(", ", (_("{n} on {device}").format(n=x.n_layer, device=names[i]) for i, x in enumerate(ngl)))
    n_cpu = m_all - n_gpu
    n_exp_cpu = sum(1 for pat, buft in final_cfg.override_tensor
                    if buft == "CPU" and any(re.search(pat, t.name) for t in spec.tensors))
    what = []
    if n_cpu > 0:
        what.append(_("{n} layer(s)").format(n=n_cpu))
    if n_exp_cpu:
        what.append(_("the expert tensors of {n} layer(s) (like --n-cpu-moe)").format(n=n_exp_cpu))
    equiv = f"-ngl {n_gpu}" + (f" -ts {','.join(str(x.n_layer) for x in ngl)}" if nd > 1 else "")
    if final_cfg.override_tensor:
        equiv += f" + {len(final_cfg.override_tensor)} -ot override(s)"
    notes.append(
        _("--fit would place {n} of {total} layers on the GPU ({per}), the rest on the CPU").format(
            n=n_gpu, total=m_all, per=per)
        + (_(": {what} in host memory").format(what=_(" and ").join(what)) if what else "")
        + _("; each device keeps --fit-target free (common/fit.cpp:488-931, modelled from the source, not "
            "measured); equivalent to {equiv}").format(equiv=equiv))
    if what:
        warnings.append(_("--fit moves {what} to the CPU: llama-server starts, but decode will be much slower than "
                          "with everything on the GPU (see the speed table); lower -c, use smaller KV types or a "
                          "smaller quant to keep it all on the GPU").format(what=_(" and ").join(what)))
    return FitOutcome(out, final_cfg, notes, warnings)


class _FitAbort(Exception):
    """common_params_fit_exception: fit gives up and keeps what it changed so far."""


def _fit_step4(ngl: list[_Ngl], ob: list[str], mem: list[int], targets: list[int], names: list[str],
               mem_for: Callable[[list[_Ngl], list[str]], list[int]],
               copy: Callable[[list[_Ngl]], list[_Ngl]]) -> tuple[list[_Ngl], list[str], list[int]]:
    """Step 4 (fit.cpp:735-928): a MoE model whose dense tensors all fit converts dense-only layers
    into full layers front to back, then tries to fit part of one more layer (UP, GATE or ATTN
    fraction overflowing to the next device or the CPU)."""
    nd = len(ngl)
    start = nd
    for i in range(nd - 1, -1, -1):
        if ngl[i].n_layer > 0:
            start = i
            continue
        break
    i = 0
    while i <= start and start < nd:
        high = copy(ngl)
        for j in range(start, nd):
            n_move = high[j].n_layer if j < nd - 1 else high[j].n_layer - 1
            high[i].n_layer += n_move
            high[j].n_layer -= n_move
            high[j].n_part = 0
        start_high = nd - 1
        mem_high = mem_for(high, ob)
        if mem_high[i] > targets[i]:
            delta = high[i].n_full - ngl[i].n_full
            while delta > 1:
                step = _u32(_tdiv(delta * (targets[i] - mem[i]), mem_high[i] - mem[i]))
                step = min(max(step, 1), delta - 1)
                test = copy(ngl)
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
                mem_test = mem_for(test, ob)
                if mem_test[i] <= targets[i]:
                    ngl, mem, start = test, mem_test, st
                else:
                    high, mem_high, start_high = test, mem_test, st
                delta = high[i].n_full - ngl[i].n_full
        else:
            ngl, mem, start = high, mem_high, start_high
        # try to fit at least part of one more layer (fit.cpp:810-870); llama.cpp's unsigned
        # n_part would wrap below 0 there: that case is skipped here
        if start < nd and ngl[start].n_layer > (0 if i < nd - 1 else 1) and ngl[start].n_part > 0:
            test = copy(ngl)
            st = start
            test[st].n_layer -= 1
            test[st].n_part -= 1
            test[i].n_layer += 1
            test[i].n_part += 1
            if test[st].n_part == 0:
                st += 1
            test[i].overflow = _UP
            ob_test = list(ob)
            if i < nd - 1:
                ob_test[i] = names[i + 1]

            def ok(m: list[int], i: int = i) -> bool:
                return m[i] < targets[i] and (i + 1 == nd or m[i + 1] < targets[i + 1])

            mem_test = mem_for(test, ob_test)
            if ok(mem_test):
                ngl, ob, mem, start = copy(test), ob_test, mem_test, st
                test[i].overflow = _GATE
                mem_test = mem_for(test, ob_test)
                if ok(mem_test):
                    ngl, ob, mem, start = copy(test), ob_test, mem_test, st
            else:
                test[i].overflow = _ATTN
                mem_test = mem_for(test, ob_test)
                if ok(mem_test):
                    ngl, ob, mem, start = copy(test), ob_test, mem_test, st
        i += 1
    return ngl, ob, mem


