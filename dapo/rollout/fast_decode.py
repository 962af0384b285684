"""A faster prefill + decode forward for Llama-family causal LMs (the hf engine's CPU fast path).

It computes what the transformers model computes (same parameters, same maths up to float rounding) with
fewer, larger tensor ops, which is what a small model's decode step on CPU is bound by:
  - fused weights, built once per `generate` call from the model's own parameters (the model is shared
    with the learner and its weights change between calls, so no weight is kept across calls): one QKV
    matmul and one gate/up matmul per layer, matrices stored (in, out); the attention scale and the
    RMSNorm weights folded into the matrices;
  - rotary embedding from the model's own `rotary_emb` for every position of the call (rope scaling is
    honoured), applied as one complex multiply: the query and key rows of each head are reordered once
    into (x_i, x_{i+D/2}) pairs, which leaves every q.k dot product unchanged;
  - shared-prefix (cascade) attention: the prompt's keys and values are kept ONCE per prompt, and the n
    sample rows of a prompt read them in one batched matmul ((P, Hkv, n*g, D) x (P, Hkv, D, L)); each row
    also attends to its own generated keys, and one softmax runs over both parts (their scores are
    concatenated, so the normalisation is exact); left padding of the prompts is masked;
  - preallocated buffers for the generated tokens' keys and values (every layer in one tensor, the memory
    reused from call to call: `Workspace`), in a "slot" layout of m slots per prompt, so that dropping
    finished rows (compaction) keeps the prefix shared; a step reads them in blocks of GEN_BLOCK
    positions, the unfilled ones masked, so that the batched matmuls keep a few shapes.

Supported: LlamaForCausalLM, Qwen2ForCausalLM (q/k/v bias), Qwen3ForCausalLM (q_norm/k_norm) and
MistralForCausalLM, float32, GQA, no logit softcapping, and the rope types whose frequencies do not depend
on the sequence length. `unsupported_reason` says why a model is not; the engine then keeps the
transformers forward. A sliding attention window is no reason: the fast path attends to every position,
which is what the window does for sequences that fit in it, and the engine runs a chunk whose prompts plus
new tokens would not fit (`FastWeights.fits`) through the transformers forward.

It is longer than 400 lines because it re-implements one decoder step of the Llama family, and its
parts (weights, masks, the cache, the step) are only checked for exactness together.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dapo.learner import families

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM")
"""Model classes (exactly these, not subclasses) the fast path knows."""
STATIC_ROPE_TYPES = frozenset({"default", "linear", "llama3", "yarn", "proportional"})
"""Rope types whose cos/sin depend on the position only ("dynamic" and "longrope" rescale with the length
of each forward call, which one table per call cannot reproduce)."""


def _architecture_classes() -> dict[str, type]:
    """The supported transformers classes by name (those this transformers version has)."""
    import transformers

    return {name: cls for name in ARCHITECTURES if (cls := getattr(transformers, name, None)) is not None}


def unsupported_reason(module: nn.Module) -> str | None:
    """None when the fast path can run `module`, else one line saying why it cannot."""
    model: Any = module  # a transformers model: its submodules are read by name
    name = type(model).__name__
    if type(model) not in _architecture_classes().values():
        return f"{name} is not one of {', '.join(ARCHITECTURES)}"
    config = model.config
    for field in ("attn_logit_softcapping", "final_logit_softcapping"):
        if getattr(config, field, None) is not None:
            return f"{name} uses {field}"
    layer_types = set(getattr(config, "layer_types", None) or ["full_attention"])
    if not layer_types <= {"full_attention", "sliding_attention"}:
        return f"{name} has layer types {sorted(layer_types)} (only full and sliding attention are supported)"
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {torch.float32}:
        return f"{name} has parameters of dtype {sorted(str(d) for d in dtypes)} (only float32 is supported)"
    rope_type = getattr(model.model.rotary_emb, "rope_type", None)
    if rope_type not in STATIC_ROPE_TYPES:
        return f"{name} uses rope type {rope_type!r} (supported: {', '.join(sorted(STATIC_ROPE_TYPES))})"
    attn = model.model.layers[0].self_attn
    if attn.head_dim % 2:
        return f"{name} has an odd head_dim ({attn.head_dim})"
    try:
        rotary_table(model, 4)
    except ValueError as err:
        return f"{name}: {err}"
    return None


def sliding_window(module: nn.Module) -> int | None:
    """The attention window of `module`'s sliding-window layers; None when it has none
    (`dapo.learner.families.sliding_window`: Mistral's window covers every layer, Qwen's only its
    "sliding_attention" layers)."""
    config = getattr(module, "config", None)
    return families.sliding_window(config) if config is not None else None


def rotary_table(module: nn.Module, length: int) -> torch.Tensor:
    """The model's rotary embedding of positions 0..length-1 as complex factors.

    Returns:
        (length, D/2) complex tensor, cos + i sin of each position and frequency (times the rope's
        attention scaling), from the model's own `rotary_emb`.
    Raises:
        ValueError: the table is not the (freqs, freqs) layout of a full-width Llama rotary embedding.
    """
    model: Any = module
    param = next(model.parameters())
    positions = torch.arange(length, device=param.device).unsqueeze(0)  # (1, N)
    cos, sin = model.model.rotary_emb(param.new_empty(0), position_ids=positions)  # (1, N, D) each
    head_dim = model.model.layers[0].self_attn.head_dim
    half = head_dim // 2
    if cos.shape[-1] != head_dim:
        raise ValueError(f"rotary embedding width {cos.shape[-1]} differs from head_dim {head_dim}")
    if not (torch.equal(cos[..., :half], cos[..., half:]) and torch.equal(sin[..., :half], sin[..., half:])):
        raise ValueError("rotary embedding halves differ (not the rotate-half layout)")
    return torch.complex(cos[0, :, :half].float(), sin[0, :, :half].float())


@dataclass
class LayerWeights:
    """One decoder layer's weights for one `generate` call, fused and transposed copies of the model's.

    E = hidden size, H / Hkv = query / key-value heads, D = head dim, I = MLP width. Matrices are stored
    (in, out), contiguous (x @ W runs ~15% faster on CPU than x @ W.T of a (out, in) weight), and the
    weight of the RMSNorm before a matrix is folded into its rows. Query and key columns are in pair order
    (each head's dims i and i + D/2 side by side); queries carry the attention scale.
    """

    qkv: torch.Tensor  # (E, (H + 2 Hkv) D), times the input norm's weight
    qkv_bias: torch.Tensor | None  # ((H + 2 Hkv) D,)
    q_norm: torch.Tensor | None  # (D,) Qwen3's per-head query norm, pair order, times the scale
    k_norm: torch.Tensor | None  # (D,)
    o: torch.Tensor  # (H D, E)
    o_bias: torch.Tensor | None  # (E,)
    gate_up: torch.Tensor  # (E, 2 I), times the post-attention norm's weight
    gate_up_bias: torch.Tensor | None  # (2 I,)
    down: torch.Tensor  # (I, E)
    down_bias: torch.Tensor | None  # (E,)


@dataclass
class FastWeights:
    """Everything the fast forward reads, built from the model by `build_weights` for ONE call."""

    layers: list[LayerWeights]
    embed: torch.Tensor  # (V, E)
    lm_head: torch.Tensor  # (E, V), times the final norm's weight
    lm_head_bias: torch.Tensor | None  # (V,)
    eps: float
    heads: int  # H
    kv_heads: int  # Hkv
    head_dim: int  # D
    act: Callable[[torch.Tensor], torch.Tensor]
    model: nn.Module  # for the rotary table
    window: int | None  # the sliding attention window of some layers, if any

    def fits(self, positions: int) -> bool:
        """True when a sequence of `positions` positions (padding included) is inside the sliding window,
        so that the window hides nothing and full attention is exact (always True without a window)."""
        return self.window is None or positions <= self.window


def build_weights(module: nn.Module) -> FastWeights:
    """Fuse and reorder the model's CURRENT parameters (once per `generate`: about one copy of them)."""
    model: Any = module
    config = model.config
    layers_module = model.model.layers[: config.num_hidden_layers]
    attn0 = layers_module[0].self_attn
    head_dim = attn0.head_dim
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    half = head_dim // 2
    device = model.model.embed_tokens.weight.device
    pair = torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).flatten().to(device)  # (D,)

    def pairs(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
        """Reorder each head's rows (or bias entries) into pair order: (num_heads * D, ...)."""
        shaped = weight.view(num_heads, head_dim, *weight.shape[1:])
        return shaped.index_select(1, pair).reshape(weight.shape)

    layers = []
    for layer in layers_module:
        attn, mlp = layer.self_attn, layer.mlp
        q_norm = getattr(attn, "q_norm", None)
        k_norm = getattr(attn, "k_norm", None)
        q_scale = 1.0 if q_norm is not None else attn.scaling  # Qwen3: the scale goes into q_norm
        projections = (
            pairs(attn.q_proj.weight, heads),
            pairs(attn.k_proj.weight, kv_heads),
            attn.v_proj.weight,
        )
        qkv = torch.cat([proj.t() for proj in projections], dim=1)  # (E, (H + 2 Hkv) D)
        qkv.mul_(layer.input_layernorm.weight[:, None])
        if q_norm is None:
            qkv[:, : heads * head_dim].mul_(q_scale)
        q_b = pairs(attn.q_proj.bias, heads) * q_scale if attn.q_proj.bias is not None else None
        k_b = pairs(attn.k_proj.bias, kv_heads) if attn.k_proj.bias is not None else None
        gate_up = torch.cat([mlp.gate_proj.weight.t(), mlp.up_proj.weight.t()], dim=1)  # (E, 2 I)
        layers.append(
            LayerWeights(
                qkv=qkv,
                qkv_bias=_bias(q_b, k_b, attn.v_proj.bias, sizes=(heads, kv_heads, kv_heads), dim=head_dim),
                q_norm=q_norm.weight.index_select(0, pair) * attn.scaling if q_norm is not None else None,
                k_norm=k_norm.weight.index_select(0, pair) if k_norm is not None else None,
                o=attn.o_proj.weight.t().contiguous(),
                o_bias=attn.o_proj.bias,
                gate_up=gate_up.mul_(layer.post_attention_layernorm.weight[:, None]),
                gate_up_bias=_bias(
                    mlp.gate_proj.bias, mlp.up_proj.bias, sizes=(1, 1), dim=mlp.gate_proj.out_features
                ),
                down=mlp.down_proj.weight.t().contiguous(),
                down_bias=mlp.down_proj.bias,
            )
        )
    act_name = getattr(config, "hidden_act", None)
    act: Callable[[torch.Tensor], torch.Tensor] = (
        F.silu if act_name in ("silu", "swish") else layers_module[0].mlp.act_fn
    )
    return FastWeights(
        layers=layers,
        embed=model.model.embed_tokens.weight,
        lm_head=model.lm_head.weight.t().contiguous().mul_(model.model.norm.weight[:, None]),
        lm_head_bias=model.lm_head.bias,
        eps=float(model.model.norm.variance_epsilon),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        act=act,
        model=model,
        window=sliding_window(model),
    )


def _bias(*biases: torch.Tensor | None, sizes: tuple[int, ...], dim: int) -> torch.Tensor | None:
    """Concatenate the biases of fused projections (None when none has one; zeros for a missing one)."""
    if all(b is None for b in biases):
        return None
    ref = next(b for b in biases if b is not None)
    return torch.cat(
        [b if b is not None else ref.new_zeros(size * dim) for b, size in zip(biases, sizes, strict=True)]
    )


def _new_buffer(like: torch.Tensor, *shape: int) -> torch.Tensor:
    """An uninitialised buffer of `like`'s dtype and device (the tests fill it with NaN instead)."""
    return like.new_empty(shape)


class Workspace:
    """Memory for the generated-token keys and values, kept from one `generate` call to the next.

    Fresh memory costs a page fault per 4 KiB page at its first write, 3-5% of a call on the bench model;
    a call reuses the buffers of the one before when they are large enough. It holds scratch values only
    (no weights: nothing to go stale). Its contents are never read before being zeroed or written.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def take(self, name: str, like: torch.Tensor, *shape: int) -> torch.Tensor:
        """A (*shape) buffer of `like`'s dtype and device, uninitialised: the memory `name` had last time
        when it is large enough and alike, else new memory (kept for next time)."""
        numel = math.prod(shape)
        buffer = self._buffers.get(name)
        if (
            buffer is None
            or buffer.numel() < numel
            or (buffer.dtype, buffer.device) != (like.dtype, like.device)
        ):
            buffer = self._buffers[name] = _new_buffer(like, numel)
        return buffer[:numel].view(shape)

    def clear(self) -> None:
        """Let go of the memory."""
        self._buffers.clear()


def _move_slots(
    buffer: torch.Tensor, source: torch.Tensor, prompts: int, slots: int, filled: int
) -> torch.Tensor:
    """Lay a generated-token buffer (layers, P', Hkv, m, C, D) out anew as (layers, prompts, Hkv, slots,
    C, D) IN its own memory (the new layout is never larger): the first `filled` positions of new flat
    slot i come from old flat slot source[i] (source: (prompts Hkv slots,)). Later positions keep what
    the memory held there: the same position of some old slot (slots are C D apart in both layouts)."""
    layers, _, kv_heads, _, capacity, dim = buffer.shape
    size = layers * prompts * kv_heads * slots * capacity * dim
    out = buffer.flatten()[:size].view(layers, prompts, kv_heads, slots, capacity, dim)
    for layer in range(layers):  # layer l of `out` ends where layer l of `buffer` starts or before
        rows = buffer[layer].view(-1, capacity * dim)[:, : filled * dim].index_select(0, source)  # a copy
        out[layer].view(-1, capacity * dim)[:, : filled * dim].copy_(rows)
    return out


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x (..., in) @ weight (in, out) + bias (out,) -> (..., out)."""
    if bias is not None and x.dim() == 2:
        return torch.addmm(bias, x, weight)
    out = torch.matmul(x, weight)
    return out if bias is None else out + bias


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dim: RMSNorm without its weight (folded into the next
    matrix); one reduction, then small ops on the (..., 1) scale."""
    scale = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_().mul_(1.0 / x.shape[-1])
    return x * scale.add_(eps).rsqrt_()


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / sqrt(mean(x^2) + eps) over the last dim (the model's RMSNorm, in one op)."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _rope(x: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """Rotate pair-ordered heads: x (..., heads, D) times factors (..., 1, D/2) complex -> (..., heads, D)."""
    pairs = torch.view_as_complex(x.unflatten(-1, (-1, 2)))  # (..., heads, D/2)
    return torch.view_as_real(pairs * factors).flatten(-2)


GEN_BLOCK = 16
"""Generated keys are read in blocks of this many positions (the unfilled ones masked): on CPU a batched
matmul whose shape changes at every step runs ~2x slower than one of a shape it has seen (the BLAS kernels
are cached per shape), so the shapes of one call's steps take only a few values. (At 8, the per-slot
matmuls of a 32-dim head are small enough for ATen's naive loop, which is 3x slower.)"""


class FastDecoder:
    """Prefill and decode state of one chunk: P prompts, n sample rows each, up to T new tokens.

    Rows are the live batch of B rows, prompt-major (as the engine orders them); the matmuls outside
    attention run on them. Attention runs on slots: each of the P' prompts still generating owns m slots
    (m = most live rows of one prompt), slot (p, j) holding the j-th live row of prompt p; before any row
    is dropped B = P n and m = n.
    Buffers: prompt keys (layers, P', Hkv, D, L) and values (layers, P', Hkv, L, D), written once at
    prefill; generated keys and values, each (layers, P', Hkv, m, C, D), one position per decode step
    (C = T - 1 rounded up to a multiple of GEN_BLOCK). A free slot reads row 0's query; its output and
    whatever its buffers hold (finite values) are never read by a row.
    """

    def __init__(self, weights: FastWeights, max_new_tokens: int, workspace: Workspace | None = None) -> None:
        self.w = weights
        self.max_new_tokens = max_new_tokens
        self.workspace = workspace if workspace is not None else Workspace()

    # ---- prefill ---------------------------------------------------------------------------------

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, n: int) -> torch.Tensor:
        """Run the P left-padded prompts, keep their keys and values, set up n rows per prompt.

        Args:
            ids, mask, positions: (P, L) int64 as `hf.left_pad` returns them.
            n: sample rows per prompt.
        Returns:
            (P, V) logits of the first generated token of each prompt.
        """
        w = self.w
        num_prompts, length = ids.shape
        kv_heads, dim = w.kv_heads, w.head_dim
        group = w.heads // kv_heads
        device, dtype = ids.device, w.embed.dtype
        self.freqs = rotary_table(w.model, length + self.max_new_tokens)  # (N, D/2)
        factors = self.freqs[positions].unsqueeze(2)  # (P, L, 1, D/2)
        real = mask.bool()  # (P, L)
        causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()  # (L, L)
        # a padding query sees itself too, so that no softmax row is empty (its output is never read)
        allowed = (causal & real[:, None, :]) | torch.eye(length, dtype=torch.bool, device=device)
        bias = torch.zeros(allowed.shape, dtype=dtype, device=device)
        bias = bias.masked_fill_(~allowed, float("-inf"))[:, None, None]  # (P, 1, 1, L, L)
        keys, values = [], []
        x = F.embedding(ids, w.embed)  # (P, L, E)
        last = len(w.layers) - 1
        for index, layer in enumerate(w.layers):
            qkv = _linear(_rms(x, w.eps), layer.qkv, layer.qkv_bias)  # (P, L, *)
            q, k, v = self._split(qkv, layer, factors)  # (P, L, H | Hkv, D)
            keys.append(k.permute(0, 2, 3, 1))  # (P, Hkv, D, L)
            values.append(v.transpose(1, 2))  # (P, Hkv, L, D)
            if index == last:  # only the last position's output is needed from here on
                q, x, bias = q[:, -1:], x[:, -1:], bias[..., -1:, :]
            queries = q.unflatten(2, (kv_heads, group)).permute(0, 2, 3, 1, 4)  # (P, Hkv, g, Lq, D)
            scores = torch.matmul(queries, keys[-1].unsqueeze(2)) + bias  # (P, Hkv, g, Lq, L)
            out = torch.matmul(torch.softmax(scores, dim=-1), values[-1].unsqueeze(2))  # (P, Hkv, g, Lq, D)
            out = out.permute(0, 3, 1, 2, 4).flatten(2)  # (P, Lq, H D)
            x = self._mlp(x + _linear(out, layer.o, layer.o_bias), layer)
        self.prefix_k = torch.stack(keys)  # (layers, P, Hkv, D, L)
        self.prefix_v = torch.stack(values)  # (layers, P, Hkv, L, D)
        self._prefix_bias = torch.zeros(real.shape, dtype=dtype, device=device).masked_fill_(
            ~real, float("-inf")
        )
        capacity = -(-max(self.max_new_tokens - 1, 1) // GEN_BLOCK) * GEN_BLOCK  # C
        # row t: 0 up to generated position t, -inf after it
        self._gen_mask = torch.full((capacity, capacity), float("-inf"), dtype=dtype, device=device).triu_(1)
        # Positions past the last filled one are read (masked), so they must hold finite values: `step`
        # zeroes each block of every slot when decoding enters it (zeroing all of it here would cost more
        # than the prefill); compaction moves whole slots, keeping each value's position in its slot, so
        # every position before the end of the current block stays finite.
        shape = (len(w.layers), num_prompts, kv_heads, n, capacity, dim)
        self.gen_k = self.workspace.take("keys", w.embed, *shape)
        self.gen_v = self.workspace.take("values", w.embed, *shape)
        self.steps = 0
        self.next_pos = mask.sum(-1).repeat_interleave(n)  # (B,) position of the first generated token
        self._layout(torch.arange(num_prompts, device=device).repeat_interleave(n), None)
        return _linear(_rms(x[:, -1], w.eps), w.lm_head, w.lm_head_bias)

    # ---- decode ----------------------------------------------------------------------------------

    def step(self, token: torch.Tensor, alive: torch.Tensor | None = None) -> torch.Tensor:
        """Feed one token per row (B,) at its next position; returns the (B, V) next-token logits.

        `alive` (B,) is not needed: a finished row only ever attends to its own slot, and nobody reads
        its output (the transformers path masks its new position instead).
        """
        w, t = self.w, self.steps
        width = -(-(t + 1) // GEN_BLOCK) * GEN_BLOCK  # generated positions read, t + 1 of them filled
        if t % GEN_BLOCK == 0:
            self._zero(t, width)
        gen_bias = self._gen_mask[t, :width].view(1, 1, width)
        factors = self.freqs.index_select(0, self.next_pos).unsqueeze(1)  # (B, 1, D/2)
        x = F.embedding(token, w.embed)  # (B, E)
        for index, layer in enumerate(w.layers):
            qkv = _linear(_rms(x, w.eps), layer.qkv, layer.qkv_bias)  # (B, *)
            q, k, v = self._split(qkv, layer, factors)  # (B, H | Hkv, D)
            self._write(self.gen_k[index, :, :, :, t], k)
            self._write(self.gen_v[index, :, :, :, t], v)
            out = self._attend(index, q, width, gen_bias)  # (B, H D)
            x = torch.addmm(x, out, layer.o)
            if layer.o_bias is not None:
                x = x + layer.o_bias
            x = self._mlp(x, layer)
        self.steps += 1
        self.next_pos = self.next_pos + 1
        return _linear(_rms(x, w.eps), w.lm_head, w.lm_head_bias)

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the rows `keep` (B',) (sorted indices into the current rows): compaction."""
        row_prompt = self._row_prompt[keep]  # (B',) current prompt index of each kept row
        present, prompt_of_row = torch.unique_consecutive(row_prompt, return_inverse=True)
        old = self._kv_index.view(-1, self.w.kv_heads)[keep].flatten()  # (B' Hkv,) their current slots
        if present.numel() < self.prefix_k.shape[1]:
            self.prefix_k = self.prefix_k.index_select(1, present)
            self.prefix_v = self.prefix_v.index_select(1, present)
            self._prefix_bias = self._prefix_bias.index_select(0, present)
        self.next_pos = self.next_pos[keep]
        self._layout(prompt_of_row, old)

    # ---- internals -------------------------------------------------------------------------------

    def _layout(self, row_prompt: torch.Tensor, old: torch.Tensor | None) -> None:
        """Give each row of prompt `row_prompt` (B,) (sorted) a slot, m per prompt, moving each row's
        generated keys and values from `old` (B Hkv,), the flat (prompt, kv head, slot) index of each
        (row, kv head) in the current buffers (None: they are laid out already)."""
        device = row_prompt.device
        num_rows, num_prompts, kv_heads = row_prompt.numel(), self.prefix_k.shape[1], self.w.kv_heads
        counts = torch.bincount(row_prompt, minlength=num_prompts)  # (P',)
        slots = int(counts.max())  # m
        row_slot = torch.arange(num_rows, device=device) - (counts.cumsum(0) - counts)[row_prompt]  # (B,)
        heads = torch.arange(kv_heads, device=device)
        # flat (prompt, kv head, slot) index of each (row, kv head): where its keys go, its output comes from
        kv_index = (
            (row_prompt[:, None] * kv_heads + heads) * slots + row_slot[:, None]
        ).flatten()  # (B Hkv,)
        self._row_prompt, self._slots, self._kv_index = row_prompt, slots, kv_index
        self._identity = num_prompts * slots == num_rows  # every slot holds a row: plain reshapes suffice
        row_of_slot = torch.zeros(num_prompts, slots, dtype=torch.long, device=device)  # free slots: row 0
        row_of_slot[row_prompt, row_slot] = torch.arange(num_rows, device=device)
        # flat (row, kv head) index of each (prompt, kv head, slot): where its query comes from
        self._q_index = (row_of_slot[:, None, :] * kv_heads + heads[:, None]).flatten()  # (P' Hkv m,)
        if old is not None:  # (free slots copy row 0's)
            source = old.index_select(0, self._q_index)  # (P' Hkv m,) old flat slot of each new slot
            self.gen_k = _move_slots(self.gen_k, source, num_prompts, slots, self.steps)
            self.gen_v = _move_slots(self.gen_v, source, num_prompts, slots, self.steps)
        length = self._prefix_bias.shape[1]
        self._bias: torch.Tensor | None = None  # no padding in the prompts: nothing to mask
        if bool(self._prefix_bias.isinf().any()):
            bias = self._prefix_bias[:, None, None, :].expand(num_prompts, kv_heads, 1, length)
            self._bias = bias.reshape(num_prompts * kv_heads, 1, length)  # (P' Hkv, 1, L)

    def _zero(self, start: int, end: int) -> None:
        """Zero positions [start, end) of every slot's generated keys and values (all layers)."""
        if end > start:
            self.gen_k[:, :, :, :, start:end].zero_()
            self.gen_v[:, :, :, :, start:end].zero_()

    def _write(self, buffer: torch.Tensor, states: torch.Tensor) -> None:
        """Write each row's keys or values (B, Hkv, D) into its slot of `buffer` (P', Hkv, m, D) (a view)."""
        num_prompts, kv_heads, slots, dim = buffer.shape
        if self._identity:
            buffer.copy_(states.view(num_prompts, slots, kv_heads, dim).transpose(1, 2))
        else:
            buffer.view(-1, dim).index_copy_(0, self._kv_index, states.reshape(-1, dim))

    def _split(
        self, qkv: torch.Tensor, layer: LayerWeights, factors: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys (rotated, queries scaled) and values of a fused projection (..., (H+2Hkv) D).

        Returns (..., H, D), (..., Hkv, D), (..., Hkv, D); `factors` (..., 1, D/2) complex.
        """
        w = self.w
        dim, heads, kv_heads = w.head_dim, w.heads, w.kv_heads
        q_end, k_end = heads * dim, (heads + kv_heads) * dim
        v = qkv[..., k_end:].unflatten(-1, (kv_heads, dim))
        if layer.q_norm is None or layer.k_norm is None:
            qk = _rope(qkv[..., :k_end].unflatten(-1, (heads + kv_heads, dim)), factors)
            return qk[..., :heads, :], qk[..., heads:, :], v
        q = _rms_norm(qkv[..., :q_end].unflatten(-1, (heads, dim)), layer.q_norm, w.eps)
        k = _rms_norm(qkv[..., q_end:k_end].unflatten(-1, (kv_heads, dim)), layer.k_norm, w.eps)
        return _rope(q, factors), _rope(k, factors), v

    def _attend(self, index: int, q: torch.Tensor, width: int, gen_bias: torch.Tensor) -> torch.Tensor:
        """Attention of the rows' queries q (B, H, D) to their prompt and their generated tokens.

        The m g queries of a (prompt, kv head) read the prompt's keys in one matmul; each slot reads its
        own first `width` generated positions, `gen_bias` (1, 1, width) masking the unfilled ones; one
        softmax runs over the concatenated scores of both parts. Returns (B, H D).
        """
        w = self.w
        kv_heads, dim = w.kv_heads, w.head_dim
        group = w.heads // kv_heads
        num_rows, num_prompts, slots = q.shape[0], self.prefix_k.shape[1], self._slots
        length = self.prefix_k.shape[-1]
        batch, per_slot = num_prompts * kv_heads, num_prompts * kv_heads * slots
        if self._identity:  # (P', m, Hkv, g D) -> (P', Hkv, m, g D)
            queries = q.view(num_prompts, slots, kv_heads, group * dim).transpose(1, 2).contiguous()
        else:
            queries = q.reshape(num_rows * kv_heads, group * dim).index_select(0, self._q_index)
        keys = self.prefix_k[index].view(batch, dim, length)
        if self._bias is None:
            s_prompt = torch.bmm(queries.view(batch, slots * group, dim), keys)  # (P' Hkv, m g, L)
        else:
            s_prompt = torch.baddbmm(self._bias, queries.view(batch, slots * group, dim), keys)
        gen_k = self.gen_k[index].view(per_slot, -1, dim)[:, :width].transpose(1, 2)
        s_gen = torch.baddbmm(gen_bias, queries.view(per_slot, group, dim), gen_k)  # (P' Hkv m, g, width)
        scores = torch.cat(
            [
                s_prompt.view(num_prompts, kv_heads, slots, group, length),
                s_gen.view(num_prompts, kv_heads, slots, group, width),
            ],
            dim=-1,
        )
        probs = torch.softmax(scores, dim=-1)  # (P', Hkv, m, g, L + width)
        values = self.prefix_v[index].view(batch, length, dim)
        out = torch.bmm(probs[..., :length].view(batch, slots * group, length), values)  # (P' Hkv, m g, D)
        gen_v = self.gen_v[index].view(per_slot, -1, dim)[:, :width]
        out = torch.baddbmm(
            out.view(per_slot, group, dim), probs[..., length:].view(per_slot, group, width), gen_v
        )
        if self._identity:  # (P', Hkv, m, g D) -> (B, H D)
            return out.view(num_prompts, kv_heads, slots, group * dim).transpose(1, 2).reshape(num_rows, -1)
        return out.view(per_slot, group * dim).index_select(0, self._kv_index).view(num_rows, -1)

    def _mlp(self, x: torch.Tensor, layer: LayerWeights) -> torch.Tensor:
        """x + MLP(post-attention norm of x), for x (..., E)."""
        gate_up = _linear(_rms(x, self.w.eps), layer.gate_up, layer.gate_up_bias)
        gate, up = gate_up.chunk(2, dim=-1)  # (..., I) each
        hidden = self.w.act(gate) * up
        if x.dim() == 2:
            out = torch.addmm(x, hidden, layer.down)
        else:
            out = x + torch.matmul(hidden, layer.down)
        return out if layer.down_bias is None else out + layer.down_bias
