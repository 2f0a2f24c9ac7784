"""llama.cpp's qwen35 / qwen35moe prompt graph (build 11434), as ggml-alloc sees it.

The trunk graph of src/models/qwen35.cpp:137-497 (qwen35moe.cpp for the MoE FFN), built the
way ``sched_reserve`` reserves it (src/llama-context.cpp:620-746): n_tokens = min(n_ctx,
n_ubatch) rounded up to a multiple of n_seq_max (llama-context.cpp:2531-2534), n_seq_max
sequences of n_tokens / n_seq_max tokens each, the full memory (every KV cell, every recurrent
row), and the fused gated delta net the CPU backend supports (delta-net-base.cpp:373-447,
ggml_gated_delta_net at ggml/src/ggml.c:6375-6424). :func:`compute_bytes` runs ggml-alloc over
it (:mod:`llamarig.plan.ggml_graph`), so the compute buffer is llama.cpp's own figure, not a fit.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from llamarig.gguf.spec import ModelSpec
from llamarig.plan import cuda_fattn
from llamarig.plan.ggml_graph import (
    CPU,
    FLAG_OUTPUT,
    GPU,
    Graph,
    Tensor,
    _contig_nb,
    allocate,
    schedule,
)
from llamarig.plan.memory import ContextLayout

QUANTIZED_SKIP = {"f32", "f16", "bf16"}


@dataclass(frozen=True)
class GraphParams:
    n_tokens: int  # ubatch tokens (a multiple of n_seqs)
    n_seqs: int  # sequences in the ubatch (n_seq_max at reserve)
    n_outputs: int
    n_kv: int  # KV cells per stream
    n_stream: int
    n_rs: int  # recurrent rows (all of them at reserve)
    n_rs_seq: int
    flash_attn: bool
    type_k: str
    type_v: str


def _separate_qkv(spec: ModelSpec) -> bool:
    """The attention layers carry attn_q / attn_k / attn_v (as conversion writes them): the graph
    built here. A fused attn_qkv there would add three conts (llama-graph.cpp:1700-1738), a
    graph this module does not build, so such a file keeps the phase model."""
    attn = {ly.index for ly in spec.layers if ly.kind != "recurrent"}
    return not any(t.name == f"blk.{i}.attn_qkv.weight" for t in spec.tensors for i in attn)


def is_qwen35(spec: ModelSpec) -> bool:
    """A qwen35 / qwen35moe trunk this module can replay."""
    return (spec.architecture in ("qwen35", "qwen35moe") and spec.recurrent is not None and not spec.mtp_sidecar
            and _separate_qkv(spec))


def has_mtp_graph(spec: ModelSpec) -> bool:
    """A qwen35 / qwen35moe file with one MTP (nextn) block: its draft context runs graph_mtp
    (a sidecar file too: it holds the block and the head, qwen35.cpp:36)."""
    return (spec.architecture in ("qwen35", "qwen35moe") and sum(1 for ly in spec.layers if ly.nextn) == 1
            and _separate_qkv(spec))


class _Builder:
    def __init__(self, spec: ModelSpec, p: GraphParams) -> None:
        self.s = spec
        self.p = p
        self.g = Graph()
        self.W: dict[str, Tensor] = {}

    def w(self, name: str, *ne: int) -> Tensor:
        """A weight (external: the model's buffers)."""
        t = self.W.get(name)
        if t is None:
            # the token embeddings stay in host memory whatever -ngl says (llama.cpp's input layer
            # is on the CPU, src/llama-model.cpp); every other weight is on the GPU for a
            # scheduled graph (:func:`compute_buffers`)
            t = self.W[name] = self.g.external(ne, "f16", name, backend=CPU if name == "token_embd" else GPU,
                                               weight=True)
        return t

    # ------------------------------------------------------------------ common pieces
    def norm(self, x: Tensor, wname: str) -> Tensor:
        """build_norm RMS (llama-graph.cpp:1634-1668): rms_norm then mul by the weight."""
        g = self.g
        cur = g.unary(x, "RMS_NORM")
        return g.binary("MUL", cur, self.w(wname, x.ne[0]))

    def inp_embd(self) -> Tensor:
        """build_inp_embd (llama-graph.cpp:2413-2538): the token rows, the embeddings input and
        the mixed-batch branch, all three in the graph (ggml_build_forward_select)."""
        g, e, n = self.g, self.s.n_embd or 0, self.p.n_tokens
        tok_embd = self.w("token_embd", e, self.s.n_vocab or 0)
        tokens = g.input((n,), "i32", "inp_tokens")
        embd = g.input((e, n), "f32", "inp_embd")
        mixed_tokens = g.input((n,), "i32", "inp_mixed_tokens")
        mixed_slots = g.input((n,), "i64", "inp_mixed_slots")
        mixed_embd = g.input((e, n), "f32", "inp_mixed_embd")
        inp0 = g.get_rows(tok_embd, tokens)
        dup = g.unary(mixed_embd, "DUP")
        inp2 = g.set_rows(dup, g.get_rows(tok_embd, mixed_tokens), mixed_slots)
        for t in (inp0, embd, inp2):
            g.expand(t)
        g.expand(inp0)
        return inp0

    def ffn_dense(self, cur: Tensor, il: int, n_ff: int, prefix: str = "ffn") -> Tensor:
        """build_ffn SILU + PAR (llama-graph.cpp:1799-1998): up, gate, swiglu_split, down."""
        g, e = self.g, self.s.n_embd or 0
        tmp = g.mul_mat(self.w(f"{il}.{prefix}_up", e, n_ff), cur)
        gate = g.mul_mat(self.w(f"{il}.{prefix}_gate", e, n_ff), cur)
        act = g.new("GLU", gate.ne, "f32", (gate, tmp))
        return g.mul_mat(self.w(f"{il}.{prefix}_down", n_ff, e), act)

    def ffn_moe(self, cur: Tensor, il: int) -> Tensor:
        """qwen35moe build_layer_ffn (src/models/qwen35moe.cpp:494-548): build_moe_ffn with
        softmax gating and normalised weights (llama-graph.cpp:2044-2357), then the shared
        expert gated by a sigmoid."""
        g, s, N = self.g, self.s, self.p.n_tokens
        e = s.n_embd or 0
        n_exp, n_used, n_ff = s.n_expert, s.n_expert_used, s.n_ff_expert or 0
        logits = g.mul_mat(self.w(f"{il}.gate_inp", e, n_exp), cur)
        probs = g.new("SOFT_MAX", logits.ne, "f32", (logits,))
        order = g.new("ARGSORT", probs.ne, "i32", (probs,))
        selected = g.view(order, (n_used, N), (order.nb[1],), 0)
        probs3 = g.reshape(probs, 1, n_exp, N)
        weights = g.get_rows(probs3, selected)
        weights = g.reshape(weights, n_used, N)
        wsum = g.new("SUM_ROWS", (1, N), "f32", (weights,))
        wsum = g.unary(wsum, "CLAMP")
        weights = g.binary("DIV", weights, wsum)
        weights = g.reshape(weights, 1, n_used, N)
        g.expand(weights)
        cur3 = g.reshape(cur, e, 1, N)
        up = g.new("MUL_MAT_ID", (n_ff, n_used, N), "f32", (self.w(f"{il}.up_exps", e, n_ff, n_exp), cur3, selected))
        gate = g.new("MUL_MAT_ID", (n_ff, n_used, N), "f32", (self.w(f"{il}.gate_exps", e, n_ff, n_exp), cur3, selected))
        act = g.new("GLU", gate.ne, "f32", (gate, up))
        experts = g.new("MUL_MAT_ID", (e, n_used, N), "f32", (self.w(f"{il}.down_exps", n_ff, e, n_exp), act, selected))
        experts = g.binary("MUL", experts, weights)
        g.expand(experts)
        views = [g.view(experts, (e, N), (experts.nb[2],), i * experts.nb[1]) for i in range(n_used)]
        for v in views:
            g.expand(v)
        moe_out = views[0]
        for v in views[1:]:
            moe_out = g.binary("ADD", moe_out, v)
            g.expand(moe_out)
        if n_used == 1:
            moe_out = g.cont(moe_out)
        n_sh = self.n_ff_shexp()
        if not n_sh:
            return moe_out
        sh = self.ffn_dense(cur, il, n_sh, "shexp")
        sgate = g.mul_mat(self.w(f"{il}.gate_inp_shexp", e, 1), cur)
        sgate = g.unary(sgate)
        sh = g.binary("MUL", sh, sgate)
        return g.binary("ADD", moe_out, sh)

    def n_ff_shexp(self) -> int:
        md = self.s.metadata or {}
        v = md.get(f"{self.s.architecture}.expert_shared_feed_forward_length")
        if isinstance(v, (int, float)) and v:
            return int(v)
        for t in self.s.tensors:
            if t.name.endswith("ffn_up_shexp.weight"):
                return int(t.shape[1])
        return 0

    # ------------------------------------------------------------------ recurrent input
    def build_rs(self, s_all: Tensor, state_size: int, s_copy: Tensor) -> Tensor:
        """llm_graph_context::build_rs (llama-graph.cpp:3587-3628)."""
        g, p = self.g, self.p
        states = g.reshape(s_all, state_size, s_all.ne[1])
        zero = g.view(states, (state_size,), offs=0)
        g.expand(g.view_tensor(zero, "SCALE", (zero,)))
        states_all = g.get_rows(states, s_copy)
        out = g.view(states_all, (state_size, p.n_seqs), (states_all.nb[1],), 0)
        g.expand(out)
        extra = g.view(states_all, (state_size, p.n_rs - p.n_seqs), (states_all.nb[1],), p.n_seqs * states_all.nb[1])
        g.expand(g.cpy(extra, g.view(s_all, (state_size, p.n_rs - p.n_seqs), (s_all.nb[1],), 0)))
        return out

    def layer_linear(self, cur: Tensor, il: int, rs_inputs: dict[str, Tensor]) -> Tensor:
        """build_layer_attn_linear (qwen35.cpp:349-482) with build_conv_state and
        build_recurrent_attn (delta-net-base.cpp:449-606)."""
        g, s, p = self.g, self.s, self.p
        r = s.recurrent
        assert r is not None
        e = s.n_embd or 0
        S, T = p.n_seqs, p.n_tokens // p.n_seqs
        hk, hv, sk = r.group_count, r.time_step_rank, r.state_size
        sv = r.inner_size // hv
        key_dim, value_dim = sk * hk, sv * hv
        conv_dim = 2 * key_dim + value_dim
        qkv = g.mul_mat(self.w(f"{il}.wqkv", e, conv_dim), cur)
        qkv = g.reshape(qkv, conv_dim, T, S)
        z = g.mul_mat(self.w(f"{il}.wqkv_gate", e, value_dim), cur)
        beta = g.mul_mat(self.w(f"{il}.ssm_beta", e, hv), cur)
        beta = g.reshape(beta, 1, hv, T, S)
        beta = g.unary(beta)
        alpha = g.mul_mat(self.w(f"{il}.ssm_alpha", e, hv), cur)
        alpha = g.reshape(alpha, hv, T, S)
        alpha = g.binary("ADD", alpha, self.w(f"{il}.ssm_dt", hv))
        alpha = g.unary(alpha)
        gate = g.binary("MUL", alpha, self.w(f"{il}.ssm_a", hv))
        gate = g.reshape(gate, 1, hv, T, S)
        # build_conv_state
        conv_all = rs_inputs[f"conv{il}"]
        conv_states = self.build_rs(conv_all, r.n_embd_r, rs_inputs["s_copy"])
        conv_states = g.reshape(conv_states, r.conv_kernel - 1, conv_dim, S)
        qkv_t = g.transpose(qkv)
        conv_input = g.concat(conv_states, qkv_t, 0)
        k_snap = p.n_rs_seq + 1
        n_cpy = 1 if p.n_rs_seq == 0 else k_snap
        for t in range(1, n_cpy + 1):
            last = g.view(conv_input, (r.conv_kernel - 1, conv_dim, S), (conv_input.nb[1], conv_input.nb[2]),
                          4 * max(0, conv_input.ne[0] - conv_states.ne[0] - (0 if p.n_rs_seq == 0 else k_snap - t)))
            g.expand(g.cpy(last, g.view(conv_all, ((r.conv_kernel - 1) * conv_dim, S), (conv_all.nb[1],), 0)))
        ssm_all = rs_inputs[f"ssm{il}"]
        state = self.build_rs(ssm_all, r.n_embd_s, rs_inputs["s_copy"])
        state = g.reshape(state, sv, sv, hv, S)
        conv_out = g.new("SSM_CONV", (conv_dim, T, S), "f32", (conv_input, self.w(f"{il}.conv1d", r.conv_kernel, conv_dim)))
        conv_out = g.unary(conv_out)
        nb1 = 4 * conv_dim
        q_conv = g.view(conv_out, (sk, hk, T, S), (4 * sk, nb1, nb1 * T), 0)
        k_conv = g.view(conv_out, (sk, hk, T, S), (4 * sk, nb1, nb1 * T), 4 * key_dim)
        v_conv = g.view(conv_out, (sv, hv, T, S), (4 * sv, nb1, nb1 * T), 4 * 2 * key_dim)
        q_conv = g.unary(g.unary(q_conv, "RMS_NORM"), "SCALE")
        k_conv = g.unary(g.unary(k_conv, "RMS_NORM"), "SCALE")
        # build_recurrent_attn: the fused op (K = 1 without rollback, n_rs_seq + 1 with it)
        kk = 1 if p.n_rs_seq == 0 else k_snap
        gdn = g.new("GATED_DELTA_NET", (sv * hv, p.n_tokens + kk * sv * S), "f32",
                    (q_conv, k_conv, v_conv, gate, beta, state))
        output = g.view(gdn, (sv, hv, T, S), (4 * sv, 4 * sv * hv, 4 * sv * hv * T), 0)
        n_state = sv * sv * hv
        if p.n_rs_seq == 0:
            new_state = g.view(gdn, (sv, sv, hv, S), (4 * sv, 4 * sv * sv, 4 * n_state), 4 * sv * hv * p.n_tokens)
            g.expand(g.cpy(new_state, g.view(ssm_all, (r.n_embd_s, S), (ssm_all.nb[1],), 0)))
        else:
            n_written = min(T, k_snap)
            src = g.view(gdn, (n_state, S, n_written), (4 * n_state, 4 * n_state * S), 4 * sv * hv * p.n_tokens)
            g.expand(g.cpy(src, g.view(ssm_all, (n_state, S, n_written), (ssm_all.nb[1], ssm_all.nb[1] * p.n_rs), 0)))
        z2 = g.reshape(z, sv, hv, T, S)
        normed = self.norm(output, f"{il}.ssm_norm")
        z_act = g.unary(z2)
        normed = g.binary("MUL", normed, z_act)
        final = g.reshape(normed, value_dim, T, S)
        out = g.mul_mat(self.w(f"{il}.ssm_out", value_dim, e), final)
        return g.reshape(out, e, p.n_tokens)

    # ------------------------------------------------------------------ attention
    def hadamard(self, cur: Tensor, rot: Tensor) -> Tensor:
        """llama_mul_mat_hadamard (src/llama-impl.h:57-74)."""
        g = self.g
        n = rot.ne[0]
        nel = cur.ne[0] * cur.ne[1] * cur.ne[2] * cur.ne[3]
        contiguous = cur.nb == _contig_nb(cur.ne, cur.type)
        res = g.reshape(cur, n, nel // n) if contiguous else g.cont(cur, n, nel // n)
        res = g.mul_mat(rot, res)
        return g.reshape(res, *cur.ne)

    def layer_attn(self, cur: Tensor, il: int, a: dict[str, Tensor]) -> Tensor:
        """build_layer_attn (qwen35.cpp:268-347) and build_attn / build_attn_mha
        (llama-graph.cpp:2943-3030, 2691-2826) on the unified KV cache."""
        g, s, p = self.g, self.s, self.p
        ly = s.layers[il]
        e = s.n_embd or 0
        hd, H, Hkv = ly.head_dim_k, ly.n_head, ly.n_head_kv
        N = p.n_tokens
        q_full = g.mul_mat(self.w(f"{il}.wq", e, 2 * hd * H), cur)
        k_cur = g.mul_mat(self.w(f"{il}.wk", e, hd * Hkv), cur)
        v_cur = g.mul_mat(self.w(f"{il}.wv", e, hd * Hkv), cur)
        q = g.view(q_full, (hd, H, N), (4 * 2 * hd, 4 * 2 * hd * H), 0)
        q = self.norm(q, f"{il}.q_norm")
        k_cur = g.reshape(k_cur, hd, Hkv, N)
        k_cur = self.norm(k_cur, f"{il}.k_norm")
        gate = g.view(q_full, (hd, H, N), (4 * 2 * hd, 4 * 2 * hd * H), 4 * hd)
        gate = g.cont(gate, hd * H, N)
        v_cur = g.reshape(v_cur, hd, Hkv, N)
        q = g.new("ROPE", q.ne, "f32", (q, a["pos"]))
        k_cur = g.new("ROPE", k_cur.ne, "f32", (k_cur, a["pos"]))
        if "k_rot" in a:
            q = self.hadamard(q, a["k_rot"])
            k_cur = self.hadamard(k_cur, a["k_rot"])
        if "v_rot" in a:
            v_cur = self.hadamard(v_cur, a["v_rot"])
        g.expand(q)
        g.expand(v_cur)
        g.expand(k_cur)
        kc, vc = a[f"k{il}"], a[f"v{il}"]
        kv = kc.ne[1]
        n_embd_gqa = hd * Hkv
        kview = g.view(k_cur, (n_embd_gqa, N), (k_cur.nb[2],), 0)
        kdst = g.reshape(kc, n_embd_gqa, kv) if p.n_stream > 1 else kc
        g.expand(g.set_rows(kdst, kview, a["k_idxs"]))
        if p.flash_attn:
            vview = g.view(v_cur, (n_embd_gqa, N), (v_cur.nb[2],), 0)
            vdst = g.reshape(vc, n_embd_gqa, kv) if p.n_stream > 1 else vc
            g.expand(g.set_rows(vdst, vview, a["v_idxs"]))
        else:
            contiguous = v_cur.nb[2] == 4 * n_embd_gqa
            v2 = g.reshape(v_cur, n_embd_gqa, N) if contiguous else g.cont(v_cur, n_embd_gqa, N)
            v_view = g.reshape(vc, 1, vc.ne[0] * vc.ne[1])
            v2 = g.reshape(v2, 1, n_embd_gqa * N)
            g.expand(g.set_rows(v_view, v2, a["v_idxs"]))
        ns = p.n_stream
        k = g.external((hd, p.n_kv, Hkv, ns), p.type_k)
        k = g.view(k, (hd, Hkv, p.n_kv, ns), op="VIEW")
        if p.flash_attn:
            v = g.view(g.external((hd, p.n_kv, Hkv, ns), p.type_v), (hd, Hkv, p.n_kv, ns), op="VIEW")
        else:
            v = g.view(g.external((p.n_kv, hd, Hkv, ns), p.type_v), (p.n_kv, Hkv, hd, ns), op="VIEW")
        mask = a["kq_mask"]
        q4 = g.view(q, (q.ne[0], q.ne[1], N // ns, ns), (q.nb[1], q.nb[2], q.nb[2] * (N // ns)), 0)
        q4 = g.permute(q4, 0, 2, 1, 3)
        k = g.permute(k, 0, 2, 1, 3)
        v = g.permute(v, 0, 2, 1, 3)
        if p.flash_attn:
            if p.type_k == "f32":
                k = g.cast(k, "f16")
            if p.type_v == "f32":
                v = g.cast(v, "f16")
            att = g.new("FLASH_ATTN_EXT", (v.ne[0], q4.ne[2], q4.ne[1], q4.ne[3]), "f32", (q4, k, v, mask))
            att = g.reshape(att, att.ne[0] * att.ne[1], att.ne[2] * att.ne[3])
        else:
            kq = g.mul_mat(k, q4)
            kq = g.new("SOFT_MAX", kq.ne, "f32", (kq, mask))
            kqv = g.mul_mat(v, kq)
            att = g.permute(kqv, 0, 2, 1, 3)
            att = g.cont(att, att.ne[0] * att.ne[1], att.ne[2] * att.ne[3])
        g.expand(att)
        if "v_rot" in a:
            att = self.hadamard(att, a["v_rot"])
        gs = g.unary(gate)
        att = g.binary("MUL", att, gs)
        return g.mul_mat(self.w(f"{il}.wo", hd * H, e), att)

    # ------------------------------------------------------------------ the whole graph
    def attn_inputs(self, a: dict[str, Tensor]) -> int:
        """build_attn_inp_kv_impl (llama-graph.cpp:2910-2934): K/V row indices, the KQ mask and
        the Hadamard rotations of a quantized cache (llama-kv-cache.cpp:321-357); returns the
        attention head size."""
        g, s, p = self.g, self.s, self.p
        a["k_idxs"] = g.input((p.n_tokens,), "i64", "k_idxs")
        v_gqa = max((ly.n_embd_v_gqa for ly in s.layers if ly.kind != "recurrent"), default=0)
        a["v_idxs"] = g.input((p.n_tokens if p.flash_attn else p.n_tokens * v_gqa,), "i64", "v_idxs")
        a["kq_mask"] = g.input((p.n_kv, p.n_tokens // p.n_stream, 1, p.n_stream),
                               "f16" if p.flash_attn else "f32", "kq_mask")
        hdk = max((ly.head_dim_k for ly in s.layers if ly.kind != "recurrent"), default=0)
        if p.type_k not in QUANTIZED_SKIP and hdk % 64 == 0 and hdk:
            n_rot = 64
            while hdk % (2 * n_rot) == 0:
                n_rot *= 2
            a["k_rot"] = g.input((n_rot, n_rot), "f32", "k_rot")
        if p.type_v not in QUANTIZED_SKIP and hdk % 64 == 0 and hdk:
            a["v_rot"] = g.input((64, 64), "f32", "v_rot")
        return hdk

    def build(self) -> Graph:
        g, s, p = self.g, self.s, self.p
        e = s.n_embd or 0
        r = s.recurrent
        assert r is not None
        inpL = self.inp_embd()
        # build_inp_mem_hybrid (llama-graph.cpp:3719-3728): recurrent then attention inputs
        a: dict[str, Tensor] = {}
        a["s_copy"] = g.input((p.n_rs,), "i32", "rs_s_copy")
        hdk = self.attn_inputs(a)
        a["pos"] = g.input((p.n_tokens * 4,), "i32", "inp_pos")
        out_ids = g.input((p.n_outputs,), "i32", "out_ids")
        for ly in s.layers:
            if ly.nextn:
                continue
            il = ly.index
            if ly.kind == "recurrent":
                a[f"conv{il}"] = g.external((r.n_embd_r, p.n_rs), "f32")
                a[f"ssm{il}"] = g.external((r.n_embd_s, p.n_rs), "f32")
            else:
                a[f"k{il}"] = g.external((hdk * ly.n_head_kv, p.n_kv, p.n_stream), p.type_k)
                a[f"v{il}"] = g.external((hdk * ly.n_head_kv, p.n_kv, p.n_stream), p.type_v)
        for ly in s.layers:
            if ly.nextn:
                continue
            il = ly.index
            inpSA = inpL
            cur = self.norm(inpL, f"{il}.attn_norm")
            g.expand(cur)
            if ly.kind == "recurrent":
                cur = self.layer_linear(cur, il, a)
            else:
                cur = self.layer_attn(cur, il, a)
            inpL = self.residual_ffn(cur, inpSA, il)
        cur = self.norm(inpL, "output_norm")
        cur.flags |= FLAG_OUTPUT  # t_h_nextn
        cur = g.get_rows(cur, out_ids)
        cur.flags |= FLAG_OUTPUT  # t_embd
        logits = g.mul_mat(self.w("output", e, s.n_vocab or 0), cur)
        logits.flags |= FLAG_OUTPUT
        g.expand(logits)
        return g

    def residual_ffn(self, cur: Tensor, inp_sa: Tensor, il: int) -> Tensor:
        """The second half of every block, trunk and MTP alike (qwen35.cpp, qwen35moe.cpp): the
        attention's residual, the post-attention norm, the FFN (or MoE) and its residual."""
        g, s = self.g, self.s
        cur = g.binary("ADD", cur, inp_sa)
        ffn_res = cur
        post = self.norm(cur, f"{il}.attn_post_norm")
        cur = self.ffn_moe(post, il) if s.n_expert else self.ffn_dense(post, il, s.n_ff or 0)
        return g.binary("ADD", cur, ffn_res)

    def build_mtp(self) -> Graph:
        """The MTP draft context's graph (LLM_GRAPH_TYPE_DECODER_MTP: qwen35.cpp:499-640,
        qwen35moe.cpp:551-735): the embeddings of the next tokens and the target's hidden
        state, both normed, concatenated and projected, one full-attention block, the shared
        head."""
        g, s, p = self.g, self.s, self.p
        e, N = s.n_embd or 0, p.n_tokens
        ly = next(x for x in s.layers if x.nextn)
        il = ly.index
        tokens = g.input((N,), "i32", "inp_tokens")
        h = g.input((e, N), "f32", "mtp_h_input")
        tok = g.get_rows(self.w("token_embd", e, s.n_vocab or 0), tokens)
        a: dict[str, Tensor] = {}
        a["pos"] = g.input((N * 4,), "i32", "inp_pos")
        out_ids = g.input((p.n_outputs,), "i32", "out_ids")
        hdk = self.attn_inputs(a)
        a[f"k{il}"] = g.external((hdk * ly.n_head_kv, p.n_kv, p.n_stream), p.type_k)
        a[f"v{il}"] = g.external((hdk * ly.n_head_kv, p.n_kv, p.n_stream), p.type_v)
        h_norm = self.norm(h, "hnorm")
        e_norm = self.norm(tok, "enorm")
        cat = g.concat(e_norm, h_norm, 0)
        cur = g.mul_mat(self.w("eh_proj", 2 * e, e), cat)
        inpSA = cur
        cur = self.norm(cur, f"{il}.attn_norm")
        cur = self.layer_attn(cur, il, a)
        cur = self.residual_ffn(cur, inpSA, il)
        cur = self.norm(cur, "head_norm")
        cur.flags |= FLAG_OUTPUT  # t_h_nextn
        cur = g.get_rows(cur, out_ids)
        logits = g.mul_mat(self.w("output", e, s.n_vocab or 0), cur)
        logits.flags |= FLAG_OUTPUT
        g.expand(logits)
        return g


#: id(spec) -> (a weak reference to the spec, {(params, alignment, mtp, cuda cc): sizes}): a replay
#: costs 20-50 ms, and the optimiser and --fit ask for the same graph many times (84 plans of one
#: qwen35 model needed 12 distinct graphs); an entry goes with its spec
_MEMO: dict[int, tuple[weakref.ref[ModelSpec], dict[tuple[GraphParams, int, bool, int | None], tuple[int, int]]]] = {}

#: buffer alignments: ggml_backend_cuda_buffer_type_get_alignment (ggml-cuda.cu:896-900) and
#: the CPU / CUDA_Host buffer types' TENSOR_ALIGNMENT (ggml-cuda.cu:1306-1320 reuses the CPU's)
CUDA_ALIGNMENT = 128
HOST_ALIGNMENT = 32


def _forget(key: int) -> Callable[[weakref.ref[ModelSpec]], None]:
    def drop(_ref: weakref.ref[ModelSpec]) -> None:
        _MEMO.pop(key, None)

    return drop


def _memo(spec: ModelSpec, key: tuple[GraphParams, int, bool, int | None],
          make: Callable[[], tuple[int, int]]) -> tuple[int, int]:
    k = id(spec)
    entry = _MEMO.get(k)
    if entry is None or entry[0]() is not spec:
        entry = (weakref.ref(spec, _forget(k)), {})
        _MEMO[k] = entry
    memo = entry[1]
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = make()
    return hit


_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")


def _period_cut(spec: ModelSpec) -> tuple[ModelSpec, ModelSpec] | None:
    """Two cut-down copies of a trunk whose layers repeat with a period P (qwen35: three
    recurrent layers, then one attention layer): 2P and 3P layers (the MTP block kept). ggml-alloc
    reaches its steady state within the first periods, so when both cuts give the same buffer the
    full trunk gives it too (checked on 360 configurations of three catalogue models: K/V types,
    -ub 1-4096, 4K-256K cells); None when the layers do not repeat or are too few to cut."""
    main = [ly for ly in spec.layers if not ly.nextn]
    by_block: dict[int, list[tuple[str, tuple[int, ...]]]] = {}
    for t in spec.tensors:  # what a layer's share of the graph depends on: its tensors' shapes
        m = _BLOCK.match(t.name)
        if m:
            by_block.setdefault(int(m.group(1)), []).append((m.group(2), tuple(t.shape)))
    shapes = [(replace(ly, index=0), sorted(by_block.get(ly.index, []))) for ly in main]
    for period in range(1, 9):
        if len(main) < 4 * period:
            return None
        if all(shapes[i] == shapes[i % period] for i in range(len(main))):
            nextn = tuple(ly for ly in spec.layers if ly.nextn)
            return (replace(spec, layers=tuple(main[:2 * period]) + nextn),
                    replace(spec, layers=tuple(main[:3 * period]) + nextn))
    return None


_T = TypeVar("_T")


def _cut_or_full(spec: ModelSpec, mtp: bool, replay: Callable[[ModelSpec], _T]) -> _T:
    """``replay`` of the trunk cut to 2 and 3 periods when its layers repeat and the two agree
    (about a fifth of the work of a 64-layer replay), else of the whole trunk."""
    cut = None if mtp else _period_cut(spec)
    if cut is not None:
        a, b = (replay(c) for c in cut)
        if a == b:
            return a
    return replay(spec)


def compute_bytes(spec: ModelSpec, p: GraphParams, alignment: int = 32, mtp: bool = False) -> int:
    """The compute buffer ``sched_reserve`` ends with (``mtp``: the MTP draft context's) when
    the whole graph runs on one backend (the CPU): it reserves the prompt graph of ``p``, then
    the one-token-per-sequence graph, then the prompt graph again (llama-context.cpp:667-732),
    and ggml-alloc only ever grows the buffer (ggml-alloc.c:906-940), so the buffer is the
    larger of the two graphs' high-water marks. Remembered per spec object: the same graph is
    replayed once."""
    return _memo(spec, (p, alignment, mtp, None),
                 lambda: (_cut_or_full(spec, mtp, lambda s: _replay(s, p, alignment, mtp)), 0))[0]


def _replay(spec: ModelSpec, p: GraphParams, alignment: int, mtp: bool) -> int:
    tg = replace(p, n_tokens=p.n_seqs, n_outputs=p.n_seqs)
    sizes = []
    for q in (p, tg):
        b = _Builder(spec, q)
        sizes.append(allocate(b.build_mtp() if mtp else b.build(), alignment).size)
    return max(sizes)


def compute_buffers(spec: ModelSpec, p: GraphParams, cuda_cc: int, mtp: bool = False) -> tuple[int, int]:
    """The two compute buffers of a context whose every layer and output layer sit on one CUDA
    GPU (compute capability ``cuda_cc``, 900 for 9.0): (the GPU's ``CUDA0 compute buffer
    size``, the ``CUDA_Host compute buffer size``). The graph goes through ggml-backend's
    scheduler (:func:`llamarig.plan.ggml_graph.schedule`): the inputs and the token embeddings'
    get_rows run on the CPU (the embeddings stay in host memory and CUDA never takes GET_ROWS,
    ggml-cuda.cu:5739-5758), the GPU gets copies of what it reads from them; then ggml-alloc
    with the CUDA buffer type's alignment and FLASH_ATTN_EXT size
    (:mod:`llamarig.plan.cuda_fattn`). Prompt graph and one-token graph, the larger of each
    buffer, as :func:`compute_bytes`."""
    return _memo(spec, (p, CUDA_ALIGNMENT, mtp, cuda_cc),
                 lambda: _cut_or_full(spec, mtp, lambda s: _compute_buffers(s, p, cuda_cc, mtp)))


def _compute_buffers(spec: ModelSpec, p: GraphParams, cuda_cc: int, mtp: bool) -> tuple[int, int]:
    tg = replace(p, n_tokens=p.n_seqs, n_outputs=p.n_seqs)

    def size(buf: int, t: Tensor) -> int:
        if buf == GPU and t.op == "FLASH_ATTN_EXT":
            return cuda_fattn.alloc_size(cuda_cc, t)
        return t.nbytes

    gpu = host = 0
    for q in (p, tg):
        b = _Builder(spec, q)
        sch = schedule(b.build_mtp() if mtp else b.build())
        r = allocate(sch.graph, node_buffer=sch.node_buffer, alignments=(CUDA_ALIGNMENT, HOST_ALIGNMENT),
                     alloc_size=size)
        gpu, host = max(gpu, r.sizes[GPU]), max(host, r.sizes[CPU])
    return gpu, host


def graph_params(spec: ModelSpec, ctx: ContextLayout, n_outputs_max: int, type_k: str, type_v: str) -> GraphParams:
    """The prompt reservation of sched_reserve (llama-context.cpp:620-746, graph_reserve at
    2527-2534): n_seq_max sequences, n_tokens = min(n_ctx, n_ubatch) rounded up to a multiple of
    them, n_outputs = min(n_tokens, n_outputs_max), every KV cell of a stream and the
    recurrent memory's n_seq_max rows (get_n_rs() of a full context is mem->size,
    llama-memory-recurrent.cpp:1336-1338; the n_rs_seq rollback groups sit behind them)."""
    n_seqs = max(1, ctx.n_parallel)
    n = min(ctx.n_ctx, ctx.n_ubatch)
    n_tokens = (n + n_seqs - 1) // n_seqs * n_seqs
    n_kv = ctx.n_ctx if ctx.kv_unified else ctx.n_ctx_seq
    return GraphParams(n_tokens, n_seqs, min(n, max(1, n_outputs_max)), n_kv, ctx.n_stream, n_seqs,
                       ctx.n_rs_seq, ctx.flash_attn, type_k, type_v)
