"""What every replayed graph shares: the reservation's parameters, where weights and caches
live, and the pieces of src/llama-graph.cpp (build 11434) the models are made of.

A graph is built the way ``sched_reserve`` reserves it (src/llama-context.cpp:616-746,
graph_reserve at 2526-2582): n_tokens = min(n_ctx, n_ubatch) rounded up to a multiple of
n_seq_max sequences, every KV cell and recurrent row of the memory, n_outputs = min(n_tokens,
n_outputs_max). Weights, caches and states are external tensors in their device's buffer
(:class:`Layout`), so ggml-backend's scheduler (:mod:`llamarig.plan.compute.ggml_sched`) can split the
graph across devices as llama.cpp does.
"""

from __future__ import annotations

from dataclasses import dataclass

from llamarig.gguf.ggml_types import TYPE_SIZES
from llamarig.gguf.spec import LayerSpec, ModelSpec
from llamarig.plan.compute.ggml_graph import FLAG_OUTPUT, Graph, Tensor, contiguous_nb
from llamarig.plan.specmemo import per_spec

#: the K/V types llama.cpp does not rotate (llama-kv-cache.cpp:321-355: only quantized caches,
#: ggml_is_quantized: a block of more than one element)
UNROTATED = frozenset(name for name, (block, _size) in TYPE_SIZES.items() if block == 1)
#: llm_arch_supports_mixed_batch (src/llama-arch.cpp:1182-1194): the architectures without the
#: mixed-batch input branch of build_inp_embd
NO_MIXED_BATCH = frozenset({"cogvlm", "deepseek4", "graniteswitch", "eagle3", "dflash", "gemma4-assistant"})


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
    #: cells per stream of the SWA cache (iSWA models), 0 without one
    n_kv_swa: int = 0


@dataclass(frozen=True)
class Layout:
    """Where a context's tensors live, as indices into the scheduler's backends (the CPU last):
    each layer's device (src/llama-model.cpp:1558-1610; the input layer, i.e. the token
    embeddings, always on the CPU), the output layer's, tensors an override moved (-ot,
    --n-cpu-moe: name -> backend) and the KV cache (the CPU with -nkvo)."""

    layers: tuple[int, ...]  # backend of every layer of n_layer_all (MTP layers too)
    output: int
    cpu: int
    overrides: tuple[tuple[str, int], ...] = ()
    kv_on_cpu: bool = False
    #: model.n_gpu_layers() > n_layer_all: llama.cpp pins each layer's norms to the layer's device
    #: (src/llama-context.cpp:2646-2661; also for batches under 32 tokens)
    full_offload: bool = True
    #: the main layers built, in order (a cut of a repeating trunk); None: all of them
    keep: tuple[int, ...] | None = None
    #: llama.cpp's backend choices made while building the graph (the norms above, the attention
    #: output with -nkvo) hold; not in --fit's dry runs, where ggml_backend_sched_reserve_size
    #: resets the scheduler after the graph is built (ggml-backend.cpp:2117-2129, called from
    #: llama-context.cpp:2569-2571 when the model is not allocated)
    pinned: bool = True

    @staticmethod
    def single(n_layer: int, backend: int = 0, cpu: int = 0) -> Layout:
        """Every layer and the output on one backend."""
        return Layout((backend,) * n_layer, backend, cpu)


_INPUT = ("token_embd", "token_types", "position_embd", "per_layer_token_embd")

#: where a weight lives (:func:`_where`): its layer's device, or the input layer's (the CPU), or the
#: output layer's
_IN, _OUT = -1, -2
#: a weight as the graph sees it: its ggml type (f16 for one this module does not size), its
#: bytes, and its layer (or _IN, _OUT)
WeightInfo = tuple[str, int, int]


def _where(name: str) -> int:
    """llama.cpp's layer of a tensor (src/llama-model.cpp:1558-1610): blk.N is layer N, the token
    embeddings and friends the input layer, anything else the output layer."""
    if name.startswith("blk."):
        return int(name[4:name.index(".", 4)])
    return _IN if name.startswith(_INPUT) else _OUT


@per_spec
def _weights(spec: ModelSpec) -> dict[str, WeightInfo]:
    """Every tensor of the file by name (:data:`WeightInfo`); made once per spec object, filled
    in for the names a graph asks for that the file lacks (:func:`_weight`)."""
    info = {}
    for t in spec.tensors:
        type_ = t.ggml_type.lower()
        info[t.name] = (type_ if type_ in TYPE_SIZES else "f16", t.n_bytes, _where(t.name))
    return info


def _weight(info: dict[str, WeightInfo], name: str) -> WeightInfo:
    """A weight the file does not hold: ``output.weight`` of tied embeddings is token_embd's
    (on the output device), anything else an f16 tensor of unknown size."""
    tok = info.get("token_embd.weight") if name == "output.weight" else None
    out = info[name] = (tok[0], tok[1], _OUT) if tok is not None else ("f16", -1, _where(name))
    return out


class Builder:
    """A graph under construction: the ggml context, the weights met so far, the shared inputs."""

    def __init__(self, spec: ModelSpec, p: GraphParams, lay: Layout) -> None:
        self.s = spec
        self.p = p
        self.lay = lay
        self.g = Graph()
        self.W: dict[str, Tensor] = {}
        self.info = _weights(spec)
        self.overrides = dict(lay.overrides)
        self.e = spec.n_embd or 0
        self.pin_norms = lay.pinned and (lay.full_offload or p.n_tokens < 32)

    # ------------------------------------------------------------------ weights and caches
    def w(self, name: str, *ne: int) -> Tensor:
        """A weight (external: the model's buffers). ``output.weight`` of a file with tied
        embeddings is token_embd's duplicate on the output device (src/llama-model.cpp)."""
        t = self.W.get(name)
        if t is None:
            info = self.info.get(name) or _weight(self.info, name)
            ov = self.overrides.get(name) if self.overrides else None
            if ov is None:
                il = info[2]
                lay = self.lay
                ov = lay.layers[il] if il >= 0 else (lay.cpu if il == _IN else lay.output)
            t = self.W[name] = self.g.external(ne, info[0], name, ov, True, info[1])
        return t

    def cache_backend(self, il: int) -> int:
        return self.lay.cpu if self.lay.kv_on_cpu else self.lay.layers[il]

    def main_layers(self) -> list[LayerSpec]:
        main = [ly for ly in self.s.layers if not ly.nextn]
        if self.lay.keep is None:
            return main
        return [main[i] for i in self.lay.keep]

    # ------------------------------------------------------------------ common pieces
    def norm(self, x: Tensor, wname: str, il: int) -> Tensor:
        """build_norm RMS (llama-graph.cpp:1634-1668): rms_norm ("norm", pinned to the layer's
        device, llama-context.cpp:2646-2661), then mul by the weight."""
        g = self.g
        cur = g.unary(x, "RMS_NORM")
        if il >= 0 and self.pin_norms:
            cur.pin = self.lay.layers[il]
        return g.binary("MUL", cur, self.w(wname, x.ne[0]))

    def inp_embd(self, scale: bool = False) -> Tensor:
        """build_inp_embd (llama-graph.cpp:2413-2538): the token rows, the embeddings input and
        the mixed-batch branch, all in the graph (ggml_build_forward_select); ``scale``: the token
        rows are scaled by an input (gemma3's sqrt(n_embd), scale_tok)."""
        g, e, n = self.g, self.e, self.p.n_tokens
        tok_embd = self.w("token_embd.weight", e, self.s.n_vocab or 0)
        tokens = g.input((n,), "i32", "inp_tokens")
        embd = g.input((e, n), "f32", "inp_embd")
        inp0 = g.get_rows(tok_embd, tokens)
        branches = [inp0, embd]
        if self.s.architecture not in NO_MIXED_BATCH:
            mixed_tokens = g.input((n,), "i32", "inp_mixed_tokens")
            mixed_slots = g.input((n,), "i64", "inp_mixed_slots")
            mixed_embd = g.input((e, n), "f32", "inp_mixed_embd")
            dup = g.unary(mixed_embd, "DUP")
            branches.append(g.set_rows(dup, g.get_rows(tok_embd, mixed_tokens), mixed_slots))
        for t in branches:
            g.expand(t)
        cur = inp0
        if scale:
            cur = g.binary("MUL", cur, g.input((1, n), "f32", "inp_scale_rows"))
        g.expand(cur)
        return cur

    def inp_pos(self, per_embd: int = 1) -> Tensor:
        """build_inp_pos (llama-graph.cpp:2540-2552): n_pos_per_embd positions per token."""
        return self.g.input((self.p.n_tokens * per_embd,), "i32", "inp_pos")

    def inp_out_ids(self) -> Tensor:
        """build_inp_out_ids (llama-graph.cpp:2569-2589): always built."""
        return self.g.input((self.p.n_outputs,), "i32", "out_ids")

    def ffn(self, cur: Tensor, il: int, n_ff: int, suffix: str = "") -> Tensor:
        """build_ffn with a parallel gate (llama-graph.cpp:1799-1998): up, gate, the fused
        swiglu/geglu split (one GLU op), down; ``suffix`` "_shexp" for a shared expert."""
        g, e = self.g, self.e
        tmp = g.mul_mat(self.w(f"blk.{il}.ffn_up{suffix}.weight", e, n_ff), cur)
        gate = g.mul_mat(self.w(f"blk.{il}.ffn_gate{suffix}.weight", e, n_ff), cur)
        a = g.new("GLU", gate.ne, "f32", (gate, tmp))
        return g.mul_mat(self.w(f"blk.{il}.ffn_down{suffix}.weight", n_ff, e), a)

    def moe(self, cur: Tensor, il: int) -> Tensor:
        """build_moe_ffn with softmax gating, normalised weights, SiLU (llama-graph.cpp:
        2044-2357)."""
        g, s, n = self.g, self.s, cur.ne[1]  # the last layer's experts see only the output rows
        e, n_exp, n_used, n_ff = self.e, s.n_expert, s.n_expert_used, s.n_ff_expert or 0
        logits = g.mul_mat(self.w(f"blk.{il}.ffn_gate_inp.weight", e, n_exp), cur)
        probs = g.new("SOFT_MAX", logits.ne, "f32", (logits,))
        order = g.new("ARGSORT", probs.ne, "i32", (probs,))
        selected = g.view(order, (n_used, n), (order.nb[1],), 0)
        weights = g.get_rows(g.reshape(probs, 1, n_exp, n), selected)
        weights = g.reshape(weights, n_used, n)
        wsum = g.unary(g.new("SUM_ROWS", (1, n), "f32", (weights,)), "CLAMP")
        weights = g.reshape(g.binary("DIV", weights, wsum), 1, n_used, n)
        g.expand(weights)
        cur3 = g.reshape(cur, e, 1, n)
        up = g.new("MUL_MAT_ID", (n_ff, n_used, n), "f32",
                   (self.w(f"blk.{il}.ffn_up_exps.weight", e, n_ff, n_exp), cur3, selected))
        gate = g.new("MUL_MAT_ID", (n_ff, n_used, n), "f32",
                     (self.w(f"blk.{il}.ffn_gate_exps.weight", e, n_ff, n_exp), cur3, selected))
        act = g.new("GLU", gate.ne, "f32", (gate, up))
        experts = g.new("MUL_MAT_ID", (e, n_used, n), "f32",
                        (self.w(f"blk.{il}.ffn_down_exps.weight", n_ff, e, n_exp), act, selected))
        experts = g.binary("MUL", experts, weights)
        g.expand(experts)
        views = [g.view(experts, (e, n), (experts.nb[2],), i * experts.nb[1]) for i in range(n_used)]
        for v in views:
            g.expand(v)
        out = views[0]
        for v in views[1:]:
            out = g.binary("ADD", out, v)
            g.expand(out)
        return g.cont(out) if n_used == 1 else out

    def output_head(self, cur: Tensor, out_ids: Tensor | None, norm_name: str = "output_norm.weight",
                    get_rows_first: bool = False) -> Tensor:
        """The output norm (t_embd / t_h_nextn, graph outputs: llama-graph.cpp:1396-1408), the
        output rows (qwen35 selects them after the norm) and the LM head."""
        g = self.g
        cur = self.norm(cur, norm_name, -1)
        cur.flags |= FLAG_OUTPUT
        if get_rows_first and out_ids is not None:
            cur = g.get_rows(cur, out_ids)
            cur.flags |= FLAG_OUTPUT
        logits = g.mul_mat(self.w("output.weight", self.e, self.s.n_vocab or 0), cur)
        logits = self.softcap(logits)
        logits.flags |= FLAG_OUTPUT
        g.expand(logits)
        return logits

    def softcap(self, logits: Tensor) -> Tensor:
        return logits

    # ------------------------------------------------------------------ attention
    def hadamard(self, cur: Tensor, rot: Tensor) -> Tensor:
        """llama_mul_mat_hadamard (src/llama-impl.h:57-74)."""
        g = self.g
        n = rot.ne[0]
        nel = cur.ne[0] * cur.ne[1] * cur.ne[2] * cur.ne[3]
        contiguous = cur.nb == contiguous_nb(cur.ne, cur.type)
        res = g.reshape(cur, n, nel // n) if contiguous else g.cont(cur, n, nel // n)
        res = g.mul_mat(rot, res)
        return g.reshape(res, *cur.ne)

    def attn_inputs(self, n_kv: int, suffix: str = "") -> dict[str, Tensor]:
        """One cache's inputs (build_attn_inp_kv_impl, llama-graph.cpp:2910-2934; the iSWA pair at
        3500-3530): K/V row indices and the KQ mask (f16 with flash attention, llama-graph.cpp:
        29-46)."""
        g, p = self.g, self.p
        v_gqa = max((ly.n_embd_v_gqa for ly in self.s.layers if ly.kind != "recurrent"), default=0)
        return {
            "k_idxs": g.input((p.n_tokens,), "i64", "attn_inp_k_idxs" + suffix),
            "v_idxs": g.input((p.n_tokens if p.flash_attn else p.n_tokens * v_gqa,), "i64",
                              "attn_inp_v_idxs" + suffix),
            "kq_mask": g.input((n_kv, p.n_tokens // p.n_stream, 1, p.n_stream), "f16" if p.flash_attn else "f32",
                               "attn_inp_kq_mask" + suffix),
        }

    def rot_inputs(self, a: dict[str, Tensor], suffix: str = "") -> None:
        """The Hadamard rotations of a quantized cache (llama-kv-cache.cpp:321-357,
        build_input_k_rot / v_rot at 1467-1488)."""
        g, p = self.g, self.p
        hdk = max((ly.head_dim_k for ly in self.s.layers if ly.kind != "recurrent"), default=0)
        if p.type_k not in UNROTATED and hdk % 64 == 0 and hdk:
            n_rot = 64
            while hdk % (2 * n_rot) == 0:
                n_rot *= 2
            a["k_rot"] = g.input((n_rot, n_rot), "f32", "attn_inp_k_rot" + suffix)
        hdv = max((ly.head_dim_v for ly in self.s.layers if ly.kind != "recurrent"), default=0)
        if p.type_v not in UNROTATED and hdv % 64 == 0 and hdv:
            a["v_rot"] = g.input((64, 64), "f32", "attn_inp_v_rot" + suffix)

    def kv_caches(self, il: int, n_kv: int) -> tuple[Tensor, Tensor]:
        """A layer's K and V cache tensors ([n_embd_gqa, kv_size, n_stream], its device's KV
        buffer; llama-kv-cache.cpp:150-215)."""
        ly, p, g = self.s.layers[il], self.p, self.g
        b = self.cache_backend(il)
        k = g.external((ly.n_embd_k_gqa, n_kv, p.n_stream), p.type_k, f"cache_k_l{il}", backend=b)
        v = g.external((ly.n_embd_v_gqa, n_kv, p.n_stream), p.type_v, f"cache_v_l{il}", backend=b)
        return k, v

    def store_kv(self, il: int, k_cur: Tensor, v_cur: Tensor, a: dict[str, Tensor], caches: tuple[Tensor, Tensor]) -> None:
        """cpy_k / cpy_v (llama-kv-cache.cpp:1348-1437): set_rows into the cache (V element by
        element when it is stored transposed, without flash attention)."""
        g, p = self.g, self.p
        kc, vc = caches
        gqa = kc.ne[0]
        n = p.n_tokens
        kview = g.view(k_cur, (gqa, n), (k_cur.nb[2],), 0)
        kdst = g.reshape(kc, gqa, kc.ne[1] * p.n_stream) if p.n_stream > 1 else kc
        g.expand(g.set_rows(kdst, kview, a["k_idxs"]))
        vgqa = vc.ne[0]
        if p.flash_attn:
            vview = g.view(v_cur, (vgqa, n), (v_cur.nb[2],), 0)
            vdst = g.reshape(vc, vgqa, vc.ne[1] * p.n_stream) if p.n_stream > 1 else vc
            g.expand(g.set_rows(vdst, vview, a["v_idxs"]))
            return
        contiguous = v_cur.nb[2] == 4 * vgqa
        v2 = g.reshape(v_cur, vgqa, n) if contiguous else g.cont(v_cur, vgqa, n)
        v_view = g.reshape(vc, 1, vc.ne[0] * vc.ne[1] * vc.ne[2])
        v2 = g.reshape(v2, 1, vgqa * n)
        g.expand(g.set_rows(v_view, v2, a["v_idxs"]))

    def attend(self, il: int, q: Tensor, caches: tuple[Tensor, Tensor], mask: Tensor) -> Tensor:
        """get_k / get_v (llama-kv-cache.cpp:1296-1346) and build_attn_mha (llama-graph.cpp:
        2691-2830): flash attention (f32 caches cast to f16) or KQ, softmax, KQV."""
        g, p = self.g, self.p
        ly = self.s.layers[il]
        hd, hv, hkv, ns = ly.head_dim_k, ly.head_dim_v, ly.n_head_kv, p.n_stream
        kc, vc = caches
        n_kv, n = kc.ne[1], p.n_tokens
        k = g.view(kc, (hd, hkv, n_kv, ns), (kc.nb[0] * hd, kc.nb[1], kc.nb[2]), 0)
        if p.flash_attn:
            v = g.view(vc, (hv, hkv, n_kv, ns), (vc.nb[0] * hv, vc.nb[1], vc.nb[2]), 0)
        else:
            es = vc.nb[0]
            v = g.view(vc, (n_kv, hkv, hv, ns), (es * n_kv * hv, es * n_kv, vc.nb[2]), 0)
        q4 = g.view(q, (q.ne[0], q.ne[1], n // ns, ns), (q.nb[1], q.nb[2], q.nb[2] * (n // ns)), 0)
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
            if self.lay.kv_on_cpu and self.lay.pinned:
                att.pin = self.lay.cpu  # llama-graph.cpp:2820-2823
        g.expand(att)
        return att

    def attention(self, il: int, q: Tensor, k: Tensor, v: Tensor, a: dict[str, Tensor],
                  caches: tuple[Tensor, Tensor], wo: str | None, iswa: bool = False) -> Tensor:
        """build_attn on a KV cache (llama-graph.cpp:2943-3025; the iSWA variant at 3190-3283
        expands K before V): rotations, the cache stores, attention, the output projection."""
        g = self.g
        if "k_rot" in a:
            q = self.hadamard(q, a["k_rot"])
            k = self.hadamard(k, a["k_rot"])
        if "v_rot" in a:
            v = self.hadamard(v, a["v_rot"])
        for t in ((q, k, v) if iswa else (q, v, k)):
            g.expand(t)
        self.store_kv(il, k, v, a, caches)
        att = self.attend(il, q, caches, a["kq_mask"])
        if "v_rot" in a:
            att = self.hadamard(att, a["v_rot"])
        if wo is None:
            return att
        ly = self.s.layers[il]
        return g.mul_mat(self.w(wo, ly.head_dim_v * ly.n_head, self.e), att)
