"""DAPO policy loss: decoupled clip, optional dual clip, and loss aggregation.

Implements the per-token clipped surrogate of the DAPO objective (paper eq. 8, see
docs/dapo.md §2) and the four aggregation modes of §2. No KL term, no reference model.

Shapes: B sequences (responses) per micro-batch, T padded response length, V vocabulary size.

Exact aggregation under gradient accumulation
----------------------------------------------
A mini-batch (one optimiser step) is often split into micro-batches (gradient accumulation) and
across data-parallel workers. `aggregate` divides by *global* normalisers when they are given, so
that ``sum(loss(micro_batch) for every micro-batch of the mini-batch)`` equals the loss of the whole
mini-batch computed in one piece, and so do the gradients:

- ``num_tokens``: valid tokens (``mask.sum()``) of the WHOLE mini-batch (token-mean).
- ``num_seqs``: sequences of the WHOLE mini-batch with at least one valid token, i.e.
  ``count_seqs(mask_of_whole_mini_batch)`` (every seq mode). A fully masked row (a truncated sample
  removed by overlong filtering) drops out of every mode's numerator and denominator alike.
- ``max_len``: the padded length T shared by the whole mini-batch (seq-mean-token-sum-norm, Dr. GRPO);
  pass the max response length so that micro-batches padded to different lengths agree.

Left as ``None`` they default to the counts of the tensors passed in (a single micro-batch is the
mini-batch). With data parallelism the sum runs over all workers' micro-batches: use a gradient
all-reduce SUM, or multiply the loss by the world size when the framework averages gradients.
"""

from __future__ import annotations

import torch

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")

LOG_RATIO_BOUND = 20.0
"""|log π_θ − log π_old| is clamped to this bound before exp (the reference does the same)."""


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1; 0 when the mask is empty.

    x, mask: (B, T) (any equal shapes). Returns a 0-dim tensor.
    """
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def count_seqs(mask: torch.Tensor) -> int:
    """Number of sequences with at least one valid token: the ``num_seqs`` of the seq modes.

    mask: (B, T).
    """
    return int((mask.sum(dim=-1) > 0).sum().item())


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical distribution at each position.

    logits: (B, T, V). Returns (B, T): H = logsumexp(z) − Σ softmax(z)·z.
    """
    log_norm = torch.logsumexp(logits, dim=-1)  # (B, T)
    probs = torch.softmax(logits, dim=-1)  # (B, T, V)
    return log_norm - (probs * logits).sum(dim=-1)


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    num_tokens: int | float | None = None,
    num_seqs: int | float | None = None,
    max_len: int | None = None,
) -> torch.Tensor:
    """Aggregate per-token values into a scalar loss (docs/dapo.md §2).

    values, mask: (B, T); mask is 1 on valid response tokens (the first EOS included).
    Modes:
      token-mean               Σ v·m / num_tokens                         (DAPO, eq. 8)
      seq-mean-token-mean      Σ_b (Σ_t v·m / Σ_t m) / num_seqs           (GRPO)
      seq-mean-token-sum       Σ_b Σ_t v·m / num_seqs
      seq-mean-token-sum-norm  Σ v·m / (num_seqs · max_len)               (Dr. GRPO)
    ``num_tokens``, ``num_seqs`` and ``max_len`` are the whole mini-batch's counts (see the module
    docstring); each defaults to the count of this tensor, and a normaliser a mode does not use is
    ignored. Returns a 0-dim tensor; 0 (with zero gradient) when nothing is valid.
    """
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; valid modes: {', '.join(AGG_MODES)}")
    mask = mask.to(values.dtype)
    masked = values * mask  # (B, T)
    if mode == "token-mean":
        denom = mask.sum().item() if num_tokens is None else num_tokens
        return masked.sum() / max(float(denom), 1.0)

    seq_tokens = mask.sum(dim=-1)  # (B,)
    denom = count_seqs(mask) if num_seqs is None else num_seqs
    denom = max(float(denom), 1.0)
    if mode == "seq-mean-token-mean":
        seq_means = masked.sum(dim=-1) / seq_tokens.clamp(min=1.0)  # (B,); empty rows give 0
        return seq_means.sum() / denom
    if mode == "seq-mean-token-sum":
        return masked.sum() / denom
    padded_len = values.shape[-1] if max_len is None else max_len
    return masked.sum() / (denom * max(float(padded_len), 1.0))


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    clip_c: float | None = 10.0,
    agg: str = "token-mean",
    num_tokens: int | float | None = None,
    num_seqs: int | float | None = None,
    max_len: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped policy-gradient loss with decoupled clip range (clip-higher) and dual clip.

    Per token (docs/dapo.md §2; the clipped surrogate of paper eq. 8, negated to a loss):
        d       = clamp(logp − old_logp, −20, 20)
        ratio   = exp(d)                                        r_i,t in eq. 8
        pg1     = −A · ratio
        pg2     = −A · clamp(ratio, 1 − clip_low, 1 + clip_high)
        clipped = max(pg1, pg2)
        L       = min(−A · clip_c, clipped) where A < 0 (dual clip), else clipped

    Args:
        logp: (B, T) log π_θ of the sampled tokens (carries the gradient).
        old_logp: (B, T) log π_old of the same tokens (no gradient needed).
        advantages: (B,) one advantage per sequence, broadcast to its tokens, or (B, T).
        mask: (B, T) 1 on valid response tokens.
        clip_low: ε_low (paper 0.2). clip_high: ε_high (paper 0.28).
        clip_c: dual-clip constant c (> 1; reference 10); None disables the dual clip (the paper's form).
        agg: aggregation mode, see ``aggregate``; num_tokens / num_seqs / max_len are passed to it.

    Returns:
        (loss, metrics): loss a 0-dim tensor; metrics floats averaged over this call's valid tokens:
        ``actor/pg_clipfrac`` (pg2 > pg1), ``actor/pg_clipfrac_lower`` (dual clip active), ``actor/ppo_kl``
        (mean of −d).
    """
    if clip_c is not None and clip_c <= 1.0:
        raise ValueError(f"clip_c must be > 1 or None, got {clip_c}")
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)  # (B, 1), broadcasts over T
    advantages = advantages.to(logp.dtype)

    log_ratio = torch.clamp(logp - old_logp, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    pg1 = -advantages * ratio  # (B, T)
    pg2 = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)  # (B, T)
    clipped = torch.maximum(pg1, pg2)  # (B, T)

    negative = advantages < 0  # (B, 1) or (B, T)
    if clip_c is None:
        per_token = clipped
        lower_clipped = torch.zeros_like(clipped, dtype=torch.bool)
    else:
        pg3 = -advantages * clip_c  # the dual-clip bound, only binding where A < 0
        per_token = torch.where(negative, torch.minimum(pg3, clipped), clipped)  # (B, T)
        lower_clipped = (clipped > pg3) & negative  # (B, T)

    loss = aggregate(per_token, mask, agg, num_tokens=num_tokens, num_seqs=num_seqs, max_len=max_len)
    with torch.no_grad():
        metrics = {
            "actor/pg_clipfrac": masked_mean((pg2 > pg1).to(logp.dtype), mask).item(),
            "actor/pg_clipfrac_lower": masked_mean(lower_clipped.to(logp.dtype), mask).item(),
            "actor/ppo_kl": masked_mean(-log_ratio, mask).item(),
        }
    return loss, metrics


POLICY_LOSSES = {"dapo": policy_loss}
"""Policy losses by name (the same function covers GRPO and Dr. GRPO through ``agg`` and ``clip_c``)."""


def get_policy_loss(name: str):
    """Look up a policy loss by name; raises ValueError listing the valid names."""
    try:
        return POLICY_LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown policy loss {name!r}; valid names: {', '.join(POLICY_LOSSES)}") from None
