"""llama.cpp's qwen35 / qwen35moe graphs (build 11434): the trunk of src/models/qwen35.cpp:137-497
(qwen35moe.cpp for the MoE FFN: 494-548) with the fused gated delta net the CPU backend supports
(delta-net-base.cpp:373-447, ggml_gated_delta_net at ggml/src/ggml.c:6375-6424), and the MTP
draft context's graph (LLM_GRAPH_TYPE_DECODER_MTP: qwen35.cpp:499-659, qwen35moe.cpp:551-735)."""

from __future__ import annotations

from llamarig.gguf.spec import ModelSpec
from llamarig.plan.compute.ggml_graph import FLAG_OUTPUT, Graph, Tensor
from llamarig.plan.compute.graphs.base import Builder

ARCHS = frozenset({"qwen35", "qwen35moe"})


def separate_qkv(spec: ModelSpec) -> bool:
    """The attention layers carry attn_q / attn_k / attn_v (as conversion writes them): the graph
    built here. A fused attn_qkv there would add three conts (llama-graph.cpp:1700-1738), a
    graph this module does not build."""
    names = {t.name for t in spec.tensors}
    return not any(f"blk.{ly.index}.attn_qkv.weight" in names for ly in spec.layers if ly.kind != "recurrent")


class Qwen35Builder(Builder):
    def n_ff_shexp(self) -> int:
        v = (self.s.metadata or {}).get(f"{self.s.architecture}.expert_shared_feed_forward_length")
        if isinstance(v, (int, float)) and v:
            return int(v)
        return next((int(t.shape[1]) for t in self.s.tensors if t.name.endswith("ffn_up_shexp.weight")), 0)

    def ffn_any(self, cur: Tensor, il: int) -> Tensor:
        """build_layer_ffn: the dense FFN (qwen35.cpp:484-497), or qwen35moe's experts plus the
        shared expert gated by a sigmoid (qwen35moe.cpp:494-548)."""
        g = self.g
        if not self.s.n_expert:
            return self.ffn(cur, il, self.s.n_ff or 0)
        out = self.moe(cur, il)
        n_sh = self.n_ff_shexp()
        if not n_sh:
            return out
        sh = self.ffn(cur, il, n_sh, "_shexp")
        sgate = g.unary(g.mul_mat(self.w(f"blk.{il}.ffn_gate_inp_shexp.weight", self.e, 1), cur))
        return g.binary("ADD", out, g.binary("MUL", sh, sgate))

    def residual_ffn(self, cur: Tensor, inp_sa: Tensor, il: int) -> Tensor:
        """The second half of every block, trunk and MTP alike: the attention's residual, the
        post-attention norm, the FFN (or MoE) and its residual."""
        g = self.g
        cur = g.binary("ADD", cur, inp_sa)
        post = self.norm(cur, f"blk.{il}.post_attention_norm.weight", il)
        return g.binary("ADD", self.ffn_any(post, il), cur)

    # ------------------------------------------------------------------ recurrent layers
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

    def conv_input(self, il: int, qkv: Tensor, conv_dim: int, rs: dict[str, Tensor]) -> Tensor:
        """build_conv_state (delta-net-base.cpp:449-525): the conv states, the new tokens, and
        the last kernel-1 columns written back (one per rollback snapshot)."""
        g, p = self.g, self.p
        r = self.s.recurrent
        assert r is not None
        conv_all = rs[f"conv{il}"]
        conv_states = self.build_rs(conv_all, r.n_embd_r, rs["s_copy"])
        conv_states = g.reshape(conv_states, r.conv_kernel - 1, conv_dim, p.n_seqs)
        conv_input = g.concat(conv_states, g.transpose(qkv), 0)
        k_snap = p.n_rs_seq + 1
        for t in range(1, (1 if p.n_rs_seq == 0 else k_snap) + 1):
            offs = 4 * max(0, conv_input.ne[0] - conv_states.ne[0] - (0 if p.n_rs_seq == 0 else k_snap - t))
            last = g.view(conv_input, (r.conv_kernel - 1, conv_dim, p.n_seqs), (conv_input.nb[1], conv_input.nb[2]), offs)
            g.expand(g.cpy(last, g.view(conv_all, ((r.conv_kernel - 1) * conv_dim, p.n_seqs), (conv_all.nb[1],), 0)))
        return conv_input

    def delta_net(self, il: int, conv_out: Tensor, gate: Tensor, beta: Tensor, state: Tensor,
                  ssm_all: Tensor) -> Tensor:
        """The fused gated delta net (K = 1 without rollback, n_rs_seq + 1 snapshots with it) and
        its new state written back (delta-net-base.cpp:373-447, 527-606)."""
        g, p = self.g, self.p
        r = self.s.recurrent
        assert r is not None
        hk, hv, sk = r.group_count, r.time_step_rank, r.state_size
        sv = r.inner_size // hv
        key_dim, seqs, t_seq = sk * hk, p.n_seqs, p.n_tokens // p.n_seqs
        nb1 = 4 * (2 * key_dim + sv * hv)
        q_conv = g.view(conv_out, (sk, hk, t_seq, seqs), (4 * sk, nb1, nb1 * t_seq), 0)
        k_conv = g.view(conv_out, (sk, hk, t_seq, seqs), (4 * sk, nb1, nb1 * t_seq), 4 * key_dim)
        v_conv = g.view(conv_out, (sv, hv, t_seq, seqs), (4 * sv, nb1, nb1 * t_seq), 4 * 2 * key_dim)
        q_conv = g.unary(g.unary(q_conv, "RMS_NORM"), "SCALE")
        k_conv = g.unary(g.unary(k_conv, "RMS_NORM"), "SCALE")
        k_snap = 1 if p.n_rs_seq == 0 else p.n_rs_seq + 1
        gdn = g.new("GATED_DELTA_NET", (sv * hv, p.n_tokens + k_snap * sv * seqs), "f32",
                    (q_conv, k_conv, v_conv, gate, beta, state))
        output = g.view(gdn, (sv, hv, t_seq, seqs), (4 * sv, 4 * sv * hv, 4 * sv * hv * t_seq), 0)
        n_state = sv * sv * hv
        if p.n_rs_seq == 0:
            new_state = g.view(gdn, (sv, sv, hv, seqs), (4 * sv, 4 * sv * sv, 4 * n_state), 4 * sv * hv * p.n_tokens)
            g.expand(g.cpy(new_state, g.view(ssm_all, (r.n_embd_s, seqs), (ssm_all.nb[1],), 0)))
        else:
            n_written = min(t_seq, k_snap)
            src = g.view(gdn, (n_state, seqs, n_written), (4 * n_state, 4 * n_state * seqs), 4 * sv * hv * p.n_tokens)
            g.expand(g.cpy(src, g.view(ssm_all, (n_state, seqs, n_written), (ssm_all.nb[1], ssm_all.nb[1] * p.n_rs), 0)))
        return output

    def layer_linear(self, cur: Tensor, il: int, rs: dict[str, Tensor]) -> Tensor:
        """build_layer_attn_linear (qwen35.cpp:349-482) with build_conv_state and
        build_recurrent_attn (delta-net-base.cpp:449-606)."""
        g, p = self.g, self.p
        r = self.s.recurrent
        assert r is not None
        e, seqs, t_seq = self.e, p.n_seqs, p.n_tokens // p.n_seqs
        hv = r.time_step_rank
        sv = r.inner_size // hv
        value_dim = sv * hv
        conv_dim = 2 * r.state_size * r.group_count + value_dim
        qkv = g.reshape(g.mul_mat(self.w(f"blk.{il}.attn_qkv.weight", e, conv_dim), cur), conv_dim, t_seq, seqs)
        z = g.mul_mat(self.w(f"blk.{il}.attn_gate.weight", e, value_dim), cur)
        beta = g.unary(g.reshape(g.mul_mat(self.w(f"blk.{il}.ssm_beta.weight", e, hv), cur), 1, hv, t_seq, seqs))
        alpha = g.reshape(g.mul_mat(self.w(f"blk.{il}.ssm_alpha.weight", e, hv), cur), hv, t_seq, seqs)
        alpha = g.unary(g.binary("ADD", alpha, self.w(f"blk.{il}.ssm_dt.bias", hv)))
        gate = g.reshape(g.binary("MUL", alpha, self.w(f"blk.{il}.ssm_a", hv)), 1, hv, t_seq, seqs)
        conv_input = self.conv_input(il, qkv, conv_dim, rs)
        ssm_all = rs[f"ssm{il}"]
        state = g.reshape(self.build_rs(ssm_all, r.n_embd_s, rs["s_copy"]), sv, sv, hv, seqs)
        conv_out = g.new("SSM_CONV", (conv_dim, t_seq, seqs), "f32",
                         (conv_input, self.w(f"blk.{il}.ssm_conv1d.weight", r.conv_kernel, conv_dim)))
        output = self.delta_net(il, g.unary(conv_out), gate, beta, state, ssm_all)
        normed = self.norm(output, f"blk.{il}.ssm_norm.weight", il)
        normed = g.binary("MUL", normed, g.unary(g.reshape(z, sv, hv, t_seq, seqs)))
        out = g.mul_mat(self.w(f"blk.{il}.ssm_out.weight", value_dim, e), g.reshape(normed, value_dim, t_seq, seqs))
        return g.reshape(out, e, p.n_tokens)

    # ------------------------------------------------------------------ attention layers
    def layer_attn(self, cur: Tensor, il: int, a: dict[str, Tensor], pos: Tensor) -> Tensor:
        """build_layer_attn (qwen35.cpp:268-347): a joint Q + gate projection, q/k norms, M-RoPE,
        attention, the sigmoid gate, the output projection."""
        g = self.g
        ly = self.s.layers[il]
        e, n = self.e, self.p.n_tokens
        hd, heads, hkv = ly.head_dim_k, ly.n_head, ly.n_head_kv
        q_full = g.mul_mat(self.w(f"blk.{il}.attn_q.weight", e, 2 * hd * heads), cur)
        k = g.mul_mat(self.w(f"blk.{il}.attn_k.weight", e, hd * hkv), cur)
        v = g.mul_mat(self.w(f"blk.{il}.attn_v.weight", e, hd * hkv), cur)
        q = self.norm(g.view(q_full, (hd, heads, n), (4 * 2 * hd, 4 * 2 * hd * heads), 0), f"blk.{il}.attn_q_norm.weight", il)
        k = self.norm(g.reshape(k, hd, hkv, n), f"blk.{il}.attn_k_norm.weight", il)
        gate = g.cont(g.view(q_full, (hd, heads, n), (4 * 2 * hd, 4 * 2 * hd * heads), 4 * hd), hd * heads, n)
        v = g.reshape(v, hd, hkv, n)
        q = g.new("ROPE", q.ne, "f32", (q, pos))
        k = g.new("ROPE", k.ne, "f32", (k, pos))
        att = self.attention(il, q, k, v, a, self.kv_caches(il, self.p.n_kv), None)
        att = g.binary("MUL", att, g.unary(gate))
        return g.mul_mat(self.w(f"blk.{il}.attn_output.weight", hd * heads, e), att)

    # ------------------------------------------------------------------ the graphs
    def recurrent_inputs(self) -> dict[str, Tensor]:
        """build_inp_mem_hybrid's recurrent half (llama-graph.cpp:3630-3660, 3719-3728): the row
        copy ids and every recurrent layer's conv and SSM state on its device."""
        g, p = self.g, self.p
        r = self.s.recurrent
        assert r is not None
        rs = {"s_copy": g.input((p.n_rs,), "i32", "inp_s_copy")}
        for ly in self.main_layers():
            if ly.kind == "recurrent":
                b = self.cache_backend(ly.index)
                rs[f"conv{ly.index}"] = g.external((r.n_embd_r, p.n_rs), "f32", f"cache_r_l{ly.index}", backend=b)
                rs[f"ssm{ly.index}"] = g.external((r.n_embd_s, p.n_rs), "f32", f"cache_s_l{ly.index}", backend=b)
        return rs

    def build(self) -> Graph:
        g = self.g
        inp = self.inp_embd()
        rs = self.recurrent_inputs()
        a = self.attn_inputs(self.p.n_kv)
        self.rot_inputs(a)
        pos = self.inp_pos(4)
        out_ids = self.inp_out_ids()
        for ly in self.main_layers():
            il = ly.index
            cur = self.norm(inp, f"blk.{il}.attn_norm.weight", il)
            g.expand(cur)
            if ly.kind == "recurrent":
                cur = self.layer_linear(cur, il, rs)
            else:
                cur = self.layer_attn(cur, il, a, pos)
            inp = self.residual_ffn(cur, inp, il)
            g.layer_out.append(inp)
        self.output_head(inp, out_ids, get_rows_first=True)
        return g

    def build_mtp(self) -> Graph:
        """The MTP draft context's graph: the embeddings of the next tokens and the target's
        hidden state, both normed, concatenated and projected, one full-attention block, the
        shared head."""
        g, p, e, n = self.g, self.p, self.e, self.p.n_tokens
        il = next(x for x in self.s.layers if x.nextn).index
        tok = g.get_rows(self.w("token_embd.weight", e, self.s.n_vocab or 0), g.input((n,), "i32", "inp_tokens"))
        h = g.input((e, n), "f32", "mtp_h_input")
        pos = self.inp_pos(4)
        out_ids = self.inp_out_ids()
        a = self.attn_inputs(p.n_kv)
        self.rot_inputs(a)
        h_norm = self.norm(h, f"blk.{il}.nextn.hnorm.weight", il)
        e_norm = self.norm(tok, f"blk.{il}.nextn.enorm.weight", il)
        cur = g.mul_mat(self.w(f"blk.{il}.nextn.eh_proj.weight", 2 * e, e), g.concat(e_norm, h_norm, 0))
        inp_sa = cur
        cur = self.layer_attn(self.norm(cur, f"blk.{il}.attn_norm.weight", il), il, a, pos)
        cur = self.residual_ffn(cur, inp_sa, il)
        cur = self.norm(cur, f"blk.{il}.nextn.shared_head_norm.weight", -1)
        cur.flags |= FLAG_OUTPUT  # t_h_nextn
        logits = g.mul_mat(self.w("output.weight", e, self.s.n_vocab or 0), g.get_rows(cur, out_ids))
        logits.flags |= FLAG_OUTPUT
        g.expand(logits)
        return g
