"""``llamarig plan``'s network section for an RPC deployment (llamarig.plan.network)."""

from __future__ import annotations

from typing import Any

from llamarig.cli.lang import _, localize
from llamarig.errors import InputError
from llamarig.plan.network import ETHERNET_PAYLOAD, LINKS, Link, NetworkReport, network_model
from llamarig.plan.result import Plan, PlanInputs
from llamarig.units import fmt_bytes

_NAMED = {lk.name.lower(): lk for lk in LINKS}


def parse_link(text: str) -> Link:
    """``--link 1gbe|2.5gbe|10gbe`` or ``GBIT[:RTT_MS]`` (``2.5:0.3``: 2.5 Gbit/s Ethernet, 0.3 ms
    round trip). Raises InputError (exit 2)."""
    name, _sep, rtt = text.strip().partition(":")
    try:
        base = _NAMED.get(name.lower()) or Link(f"{float(name):g}Gbit", float(name) * 1e9 / 8 * ETHERNET_PAYLOAD,
                                                0.25e-3)
        if float(name.lower().removesuffix("gbe") or 0) <= 0 and name.lower() not in _NAMED:
            raise ValueError(name)
        if rtt:
            base = Link(base.name, base.rate, float(rtt) / 1e3, "given")
            if base.rtt_s < 0:
                raise ValueError(rtt)
    except ValueError:
        raise InputError(_("--link {text}: expected 1gbe, 2.5gbe, 10gbe or GBIT[:RTT_MS], e.g. 2.5:0.3").format(
            text=text)) from None
    return base


def network_report(inp: PlanInputs, plan: Plan, links: list[Link], depth: int | None) -> NetworkReport | None:
    d = plan.n_ctx_slot // 2 if depth is None else depth
    tok_s = plan.speed.at_depth(d).decode_tok_s if plan.speed is not None and plan.speed.by_depth else None
    return network_model(inp.spec, plan.effective_cfg or inp.cfg, plan, depth=d, links=links or LINKS,
                         decode_tok_s=tok_s)


def render_network(rep: NetworkReport, console: Any) -> None:
    console.print(localize(_("network (RPC; bytes exact at build 11434, the link's rate and round trip given): "
                             "decode at depth {depth}, prefill per ubatch of {ub}").format(
        depth=rep.depth, ub=rep.prefill.n_tokens)))
    for s in rep.decode.stages:
        console.print(localize(_("  {device}: decode {up} up, {down} down, {trips} round trip(s) per token").format(
            device=s.device, up=fmt_bytes(s.up), down=fmt_bytes(s.down), trips=s.round_trips)), highlight=False)
    for c in rep.costs:
        tok = "" if c.decode_tok_s is None else localize(_(" ({tok:.1f} tok/s with the modelled compute)").format(
            tok=c.decode_tok_s))
        console.print(localize(_("  {link} ({rtt:.2f} ms round trip): +{dec:.2f} ms per decoded token{tok}; "
                                 "+{pre:.0f} ms per prefill ubatch").format(
            link=c.link.name, rtt=c.link.rtt_s * 1e3, dec=c.decode_ms, tok=tok, pre=c.prefill_ms)), highlight=False)
    for n in rep.notes:
        console.print("  " + localize(n), highlight=False)
