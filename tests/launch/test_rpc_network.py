"""The RPC network model (llamarig.plan.network) against the bytes that really cross: a counting
proxy (llamarig.testing.netproxy) sits between llama-server and each rpc-server of the rig.

A decode step's traffic per device must equal the model to the byte (the split inputs, the
activation and logits read back, every message's header); a prefill ubatch's data likewise, plus
the serialised graph and the allocator's size queries of a new shape, which the model estimates.
Counted as the difference of two requests that differ only in the tokens they generate, so
start-up (the weights) and the first graph cancel out. --cache-ram 0: the prompt cache would read
the replaced slot's KV back (counted apart in the model's notes)."""

from __future__ import annotations

import pytest

from llamarig.plan.inputs import build_inputs
from llamarig.plan.network import network_model, step_traffic
from llamarig.plan.planner import make_plan
from llamarig.testing.netproxy import DelayProxy
from llamarig.testing.plans import deployment_of

pytestmark = pytest.mark.server

SHAPES = {
    "llama": {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head_dim": 64, "n_ff": 512},
    "qwen35": {"n_layer": 8, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head_dim": 64, "n_ff": 512},
    "gemma3": {"n_layer": 6, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head_dim": 64, "n_ff": 512,
               "swa_window": 64},
}
FLAGS = ["-c", "2048", "-np", "1", "-ngl", "99", "--cache-ram", "0"]


@pytest.fixture
def proxied(rpc_servers, llama_server, synth_model):
    """(llama-server, proxies, plan inputs) of a 2-device rig behind counting proxies."""
    proxies: list[DelayProxy] = []

    def start(arch: str, n: int = 2):
        model = synth_model(arch, **SHAPES[arch])
        rigs = rpc_servers(n)
        for r in rigs:
            proxies.append(DelayProxy(r.port))
            proxies[-1].start()
        eps = ",".join(p.endpoint for p in proxies)
        srv = llama_server(model, "--rpc", eps, *FLAGS)
        inp = build_inputs(deployment_of(str(model), ["--rpc", eps, *FLAGS],
                                         rpc_devices=[f"{p.endpoint}=20G" for p in proxies]))
        return srv, proxies, inp

    yield start
    for p in proxies:
        p.stop()


def _traffic(srv, proxies, prompt: str, n_predict: int):
    before = [p.snapshot() for p in proxies]
    r = srv.post("/completion", {"prompt": prompt, "n_predict": n_predict, "cache_prompt": False,
                                 "temperature": 0, "ignore_eos": True})
    return r, [p.snapshot() - b for p, b in zip(proxies, before, strict=True)]


@pytest.mark.parametrize("arch", ["llama", "qwen35", "gemma3"])
def test_decode_traffic_is_the_model_to_the_byte(arch, proxied):
    srv, proxies, inp = proxied(arch)
    prompt = "hello world, this is a test of the network"
    _traffic(srv, proxies, prompt, 4)  # warm: the first request's extra graphs
    r1, t1 = _traffic(srv, proxies, prompt, 8)
    r2, t2 = _traffic(srv, proxies, prompt, 24)
    k = r2["tokens_predicted"] - r1["tokens_predicted"]
    assert k == 16
    measured = [((b.up - a.up) / k, (b.down - a.down) / k) for a, b in zip(t1, t2, strict=True)]
    plan = make_plan(inp)
    rep = network_model(inp.spec, plan.effective_cfg or inp.cfg, plan, depth=20)
    assert rep is not None
    assert measured == [(s.up, s.down) for s in rep.decode.stages]
    assert rep.decode.round_trips == 2  # the activation read from the first, the logits from the last


def test_prefill_traffic_is_the_model_plus_the_graph(proxied):
    """One ubatch of 101 tokens: the data is the model's; what is left is the serialised graph
    and the allocator's queries for the new shape, within the model's estimate of them."""
    srv, proxies, inp = proxied("llama")
    _traffic(srv, proxies, "warm", 2)
    r, t = _traffic(srv, proxies, "a " * 100, 1)
    n = r["tokens_evaluated"]
    plan = make_plan(inp)
    step = step_traffic(inp.spec, plan.effective_cfg or inp.cfg, plan, n, 0)
    for got, want in zip(t, step.stages, strict=True):
        extra_up = got.up - want.up
        assert 0 < extra_up < 2 * step.graph_bytes, (got, want, step.graph_bytes)
        assert 0 <= got.down - want.down <= 16 * 12  # answers to the allocator's size queries
