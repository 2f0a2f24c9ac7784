"""The attention + FFN decoders: llama (src/models/llama.cpp:99-247), qwen3 (qwen3.cpp),
qwen3moe (qwen3moe.cpp) and gemma3 with its sliding-window layers (gemma3.cpp:81-206), at build
11434. One layer: norm, Q/K/V projections (q/k norms for qwen3 and gemma3), RoPE, attention on
the KV cache (gemma3's SWA layers on the SWA cache), the output rows selected in the last layer,
the residual, norm, FFN (or experts), residual."""

from __future__ import annotations

from llamarig.plan.compute.ggml_graph import Graph, Tensor
from llamarig.plan.compute.graphs.base import Builder

#: architectures with per-head q/k norms (qwen3.cpp, qwen3moe.cpp, gemma3.cpp)
QK_NORM = frozenset({"qwen3", "qwen3moe", "gemma3"})
ARCHS = frozenset({"llama", "qwen3", "qwen3moe", "gemma3"})


class TransformerBuilder(Builder):
    def qkv(self, cur: Tensor, il: int, pos: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """build_qkv on separate Q/K/V weights (llama-graph.cpp:1684-1797), the q/k norms and
        RoPE; gemma3 scales Q by f_attention_scale (gemma3.cpp:143)."""
        g, ly = self.g, self.s.layers[il]
        e, n = self.e, self.p.n_tokens
        hd, hv = ly.head_dim_k, ly.head_dim_v
        q = g.mul_mat(self.w(f"blk.{il}.attn_q.weight", e, hd * ly.n_head), cur)
        k = g.mul_mat(self.w(f"blk.{il}.attn_k.weight", e, hd * ly.n_head_kv), cur)
        v = g.mul_mat(self.w(f"blk.{il}.attn_v.weight", e, hv * ly.n_head_kv), cur)
        q = g.reshape(q, hd, ly.n_head, n)
        k = g.reshape(k, hd, ly.n_head_kv, n)
        v = g.reshape(v, hv, ly.n_head_kv, n)
        qk_norm = self.s.architecture in QK_NORM
        if qk_norm:
            q = self.norm(q, f"blk.{il}.attn_q_norm.weight", il)
        q = g.new("ROPE", q.ne, "f32", (q, pos))
        if qk_norm:
            k = self.norm(k, f"blk.{il}.attn_k_norm.weight", il)
        k = g.new("ROPE", k.ne, "f32", (k, pos))
        if self.s.architecture == "gemma3":
            q = g.unary(q, "SCALE")
        return q, k, v

    def block(self, il: int, inp: Tensor, pos: Tensor, attn: dict[str, dict[str, Tensor]], out_ids: Tensor,
              last: bool) -> Tensor:
        g, s = self.g, self.s
        cur = self.norm(inp, f"blk.{il}.attn_norm.weight", il)
        q, k, v = self.qkv(cur, il, pos)
        swa = s.layers[il].kind == "swa" and "swa" in attn
        a = attn["swa" if swa else "base"]
        caches = self.kv_caches(il, self.p.n_kv_swa if swa else self.p.n_kv)
        cur = self.attention(il, q, k, v, a, caches, f"blk.{il}.attn_output.weight", iswa="swa" in attn)
        res = inp
        if last:
            cur = g.get_rows(cur, out_ids)
            res = g.get_rows(res, out_ids)
        if s.architecture == "gemma3":
            return self.gemma3_rest(il, cur, res)
        ffn_inp = g.binary("ADD", cur, res)
        cur = self.norm(ffn_inp, f"blk.{il}.ffn_norm.weight", il)
        cur = self.moe(cur, il) if s.n_expert else self.ffn(cur, il, s.n_ff or 0)
        return g.binary("ADD", cur, ffn_inp)

    def gemma3_rest(self, il: int, cur: Tensor, res: Tensor) -> Tensor:
        """gemma3.cpp:163-192: post-attention norm, residual, FFN norm, GELU FFN, post-FFW norm
        (not pinned: built with il -1), residual."""
        g = self.g
        cur = self.norm(cur, f"blk.{il}.post_attention_norm.weight", il)
        sa_out = g.binary("ADD", cur, res)
        cur = self.norm(sa_out, f"blk.{il}.ffn_norm.weight", il)
        cur = self.ffn(cur, il, self.s.n_ff or 0)
        cur = self.norm(cur, f"blk.{il}.post_ffw_norm.weight", -1)
        return g.binary("ADD", cur, sa_out)

    def softcap(self, logits: Tensor) -> Tensor:
        """gemma3's final logit soft-capping when the file sets it (gemma3.cpp:196-200)."""
        if self.s.architecture != "gemma3" or not self.s.metadata.get("gemma3.final_logit_softcapping"):
            return logits
        g = self.g
        return g.unary(g.unary(g.unary(logits, "SCALE")), "SCALE")

    def build(self) -> Graph:
        s, p = self.s, self.p
        gemma = s.architecture == "gemma3"
        inp = self.inp_embd(scale=gemma)
        pos = self.inp_pos()
        attn = {"base": self.attn_inputs(p.n_kv)}
        iswa = gemma and bool(p.n_kv_swa) and any(ly.kind == "swa" for ly in s.layers)
        if iswa:
            attn["swa"] = self.attn_inputs(p.n_kv_swa, "_swa")
        self.rot_inputs(attn["base"])
        if iswa:
            self.rot_inputs(attn["swa"], "_swa")
        out_ids = self.inp_out_ids()
        layers = self.main_layers()
        for i, ly in enumerate(layers):
            inp = self.block(ly.index, inp, pos, attn, out_ids, i == len(layers) - 1)
            self.g.layer_out.append(inp)
        self.output_head(inp, out_ids)
        return self.g
