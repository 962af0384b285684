"""Loading the policy and computing per-token log-probs of responses.

Layout of a training batch (the same as the hf rollout engine's, so both compute the same numbers):
prompts are LEFT-padded to the longest prompt P and responses RIGHT-padded to the longest response T,
so every response starts at column P. Position ids count real tokens only. The logits at column
P - 1 + t predict response token t.

Log-probs at a real vocabulary: a (B, T, V) logits tensor of 4 x 512 tokens at Qwen2.5's 151,936 tokens
is 1.2 GB in fp32, and its softmax, cast and gradient copies several times that. ``response_logprobs``
never builds it: it takes the decoder's hidden states of the response tokens and runs the LM head on
``chunk_tokens`` of them at a time (and again in backward), so the head's memory is O(chunk x V).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from dapo.algo.loss import entropy_from_logits
from dapo.learner.families import exact_attention, scaled_head
from dapo.learner.head_chunks import chunked_logprobs
from dapo.runconfig import ModelConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
LOGPROB_CHUNK_TOKENS = 1024
"""Response tokens per LM-head chunk: (1024, 151936) fp32 logits are 0.6 GB."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("model.device is 'cuda' but torch sees no CUDA device; use 'cpu' or 'auto'")
    return torch.device(name)


def load_policy(cfg: ModelConfig, device: torch.device | None = None):  # -> (model, tokenizer)
    """Load a local HuggingFace causal LM and its tokenizer (never from a hub)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(cfg.path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model.path {cfg.path!r} is not a model directory (no config.json there)")
    device = device or resolve_device(cfg.device)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[cfg.dtype], local_files_only=True)
    exact_attention(model)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device)  # type: ignore[arg-type]  # nn.Module.to moves in place
    return model, tokenizer


def eos_token_ids(model, tokenizer) -> list[int]:
    """Every token id that ends a response: the tokenizer's EOS and the generation config's."""
    ids = {tokenizer.eos_token_id}
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
    return sorted(i for i in ids if i is not None)


@dataclass
class PackedBatch:
    input_ids: Tensor  # (B, P + T)
    attention_mask: Tensor  # (B, P + T)
    position_ids: Tensor  # (B, P + T)
    response_mask: Tensor  # (B, T) float: 1 on real response tokens (EOS included)
    prompt_width: int  # P


def pack(
    prompts: list[list[int]], responses: list[list[int]], pad_id: int, device: torch.device
) -> PackedBatch:
    """Left-pad prompts and right-pad responses into one (B, P + T) batch."""
    width_p = max(len(p) for p in prompts)
    width_t = max(1, max(len(r) for r in responses))
    rows, masks = [], []
    for p, r in zip(prompts, responses, strict=True):
        left, right = width_p - len(p), width_t - len(r)
        rows.append([pad_id] * left + list(p) + list(r) + [pad_id] * right)
        masks.append([0] * left + [1] * (len(p) + len(r)) + [0] * right)
    input_ids = torch.tensor(rows, dtype=torch.long, device=device)
    attention_mask = torch.tensor(masks, dtype=torch.long, device=device)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    response_mask = attention_mask[:, width_p:].to(torch.float32)
    return PackedBatch(input_ids, attention_mask, position_ids, response_mask, width_p)


def response_logprobs(
    model,
    batch: PackedBatch,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_tokens: int = LOGPROB_CHUNK_TOKENS,
) -> tuple[Tensor, Tensor | None]:
    """Log-prob of each response token under softmax(logits / temperature), and optionally the entropy.

    ``model`` is a HF causal LM, or one wrapped in DistributedDataParallel (``.module``). Memory-bounded:
    the decoder runs once; only the hidden states of real response tokens go through the LM head, in
    chunks of ``chunk_tokens`` tokens, so no (B, T, V) tensor exists. With grad, each chunk is recomputed
    in backward (``dapo.learner.head_chunks``), so the head saves O(tokens x H) and peaks at O(chunk_tokens x
    V). Models whose head does more than a linear layer and a soft cap fall back to full logits.

    Returns (logp (B, T), entropy (B, T) or None); padded positions hold zeros.
    """
    inner = getattr(model, "module", model)  # DistributedDataParallel keeps the model in .module
    head = inner.get_output_embeddings()
    if head is None or chunked_head_reason(inner) is not None:
        return full_logits_logprobs(model, batch, temperature=temperature, with_entropy=with_entropy)
    hidden = _last_hidden_state(model, inner, batch)  # (B, P + T, H)
    width_t, p = batch.response_mask.shape[1], batch.prompt_width
    valid = batch.response_mask > 0  # (B, T)
    states = hidden[:, p - 1 : p - 1 + width_t][valid]  # (N, H): positions that predict a response token
    targets = batch.input_ids[:, p : p + width_t][valid]  # (N,)
    head_fn = functools.partial(
        chunked_logprobs,
        head,
        chunk=max(1, chunk_tokens),
        temperature=temperature,
        softcap=getattr(inner.config, "final_logit_softcapping", None),
        with_entropy=with_entropy,
    )
    if states.shape[0] == 0:
        # No response token at all: still run the head on one position, times zero, so that every
        # parameter gets a gradient (DDP waits for all of them).
        zero = sum(x.sum() for x in head_fn(hidden[:1, p - 1], batch.input_ids[:1, p])) * 0.0
        logp = hidden.new_zeros(valid.shape, dtype=torch.float32) + zero
        return logp, logp.clone() if with_entropy else None
    logp_flat, ent_flat = head_fn(states, targets)
    logp = hidden.new_zeros(valid.shape, dtype=torch.float32).masked_scatter(valid, logp_flat)
    entropy = None
    if with_entropy:
        entropy = hidden.new_zeros(valid.shape, dtype=torch.float32).masked_scatter(valid, ent_flat)
    return logp, entropy


def _last_hidden_state(model, inner, batch: PackedBatch) -> Tensor:
    """The decoder's last hidden state (final norm applied), (B, P + T, H).

    The call goes through the OUTER module's forward (DDP syncs gradients only for what its forward ran)
    with ``logits_to_keep`` set to no position, so the model's own head computes nothing; a forward hook
    on the decoder keeps its output.
    """
    kept: list[Tensor] = []
    hook = inner.get_decoder().register_forward_hook(lambda _m, _a, out: kept.append(out[0]))
    try:
        model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            use_cache=False,
            logits_to_keep=torch.zeros(0, dtype=torch.long, device=batch.input_ids.device),
        )
    finally:
        hook.remove()
    return kept[-1]


def chunked_head_reason(inner) -> str | None:
    """Why the chunked path cannot reproduce the model's logits (None: it can): it needs a plain head (a
    soft cap is applied here) and a forward that takes ``logits_to_keep``."""
    if inner.get_output_embeddings() is None:
        return f"{type(inner).__name__} has no output embeddings to run in chunks"
    scale = scaled_head(inner.config)
    if scale is not None:
        return f"the head scales its logits ({scale}), which only the model's own forward applies"
    if "logits_to_keep" not in inspect.signature(inner.forward).parameters:
        return f"{type(inner).__name__}.forward takes no logits_to_keep"
    return None


def full_logits_logprobs(
    model, batch: PackedBatch, *, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """``response_logprobs`` from the model's full logits: a (B, T, V) tensor and its softmax.

    The fallback for heads the chunked path cannot reproduce, and the baseline of the memory bench.
    """
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        use_cache=False,
    )
    width_t = batch.response_mask.shape[1]
    p = batch.prompt_width
    logits = out.logits[:, p - 1 : p - 1 + width_t].float() / temperature  # (B, T, V)
    targets = batch.input_ids[:, p : p + width_t]  # (B, T)
    log_norm = torch.logsumexp(logits, dim=-1)  # (B, T)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_norm
    logp = logp * batch.response_mask
    entropy = entropy_from_logits(logits) * batch.response_mask if with_entropy else None
    return logp, entropy
