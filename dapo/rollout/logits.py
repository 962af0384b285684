"""Vectorised next-token sampling: temperature, top-k, top-p, and the log-prob of the sampled token.

Pure tensor functions over a batch of rows (no Python loop over rows), shared by the torch engines. The
semantics follow vLLM's sampler so that engines agree: temperature first, then top-k, then top-p on the
renormalised top-k distribution; the returned log-prob is that of softmax(logits / T) BEFORE truncation
(the distribution the policy-gradient ratio is defined on when top-k/top-p are off, as in training).
"""

from __future__ import annotations

import torch

_TINY = 1e-20  # floor of the exponential noise: a 0 draw would turn p / q into inf or nan


def filter_top_k(logp: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the k largest entries of each row, set the rest to -inf.

    Args:
        logp: (B, V) log-probabilities (or logits).
        top_k: k; values <= 0 or >= V leave the rows unchanged.
    Returns:
        (B, V) the filtered tensor (a new tensor; ties at the k-th value are all kept).
    """
    if top_k <= 0 or top_k >= logp.shape[-1]:
        return logp
    kth = torch.topk(logp, top_k, dim=-1).values[:, -1:]  # (B, 1)
    return logp.masked_fill(logp < kth, float("-inf"))


def filter_top_p(logp: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filter: keep the most likely tokens until their mass reaches top_p, set the rest to -inf.

    A token is kept when the mass of the tokens ranked above it is < top_p, so the argmax is always kept.

    Args:
        logp: (B, V) normalised log-probabilities.
        top_p: the mass to keep, in (0, 1]; 1 leaves the rows unchanged.
    Returns:
        (B, V) the filtered log-probabilities (not renormalised).
    """
    if top_p >= 1.0:
        return logp
    sorted_logp, order = torch.sort(logp, dim=-1, descending=True)  # (B, V)
    sorted_p = sorted_logp.exp()
    mass_above = torch.cumsum(sorted_p, dim=-1) - sorted_p  # (B, V) mass of strictly higher-ranked tokens
    drop_sorted = mass_above >= top_p
    drop = torch.empty_like(drop_sorted).scatter_(-1, order, drop_sorted)  # back to vocabulary order
    return logp.masked_fill(drop, float("-inf"))


def sample_tokens(
    logits: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row and return it with its log-prob.

    Greedy (argmax) when temperature == 0 or top_k == 1; the log-probs are then those of temperature 1
    when temperature == 0 (vLLM does the same), else of softmax(logits / temperature).
    Sampling uses the exponential race argmax(p / q), q ~ Exp(1), which draws from p without a
    normalised CDF (vLLM's sampler does the same), with `generator` for reproducibility.

    Args:
        logits: (B, V) next-token logits of B rows (any float dtype; computed in float32).
        temperature: T >= 0.
        top_k: -1/0 = off.
        top_p: 1 = off.
        generator: the torch RNG driving the draw (None = global RNG).
    Returns:
        tokens (B,) int64 and logprobs (B,) float32: log softmax(logits / T)[token].
    """
    logits = logits.float()
    scaled = logits / temperature if temperature > 0 else logits
    logp = torch.log_softmax(scaled, dim=-1)  # (B, V)
    if temperature == 0 or top_k == 1:
        tokens = logp.argmax(dim=-1)  # (B,)
    else:
        truncated = filter_top_k(logp, top_k)
        if top_p < 1.0:
            if truncated is not logp:  # top-p acts on the renormalised top-k distribution (as vLLM)
                truncated = torch.log_softmax(truncated, dim=-1)
            truncated = filter_top_p(truncated, top_p)
        q = torch.empty_like(truncated).exponential_(generator=generator).clamp_min_(_TINY)  # (B, V)
        tokens = (truncated.exp() / q).argmax(dim=-1)  # (B,)
    token_logp = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (B,)
    return tokens, token_logp
