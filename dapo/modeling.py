"""Loading the policy and computing per-token log-probs of responses.

Layout of a training batch (the same as the hf rollout engine's, so both compute the same numbers):
prompts are LEFT-padded to the longest prompt P and responses RIGHT-padded to the longest response T,
so every response starts at column P. Position ids count real tokens only. The logits at column
P - 1 + t predict response token t.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from dapo.config import ModelConfig
from dapo.loss import entropy_from_logits

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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
    model, batch: PackedBatch, *, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """Log-prob of each response token under softmax(logits / temperature), and optionally the entropy.

    Returns (logp (B, T), entropy (B, T) or None); padded positions hold zeros.
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
