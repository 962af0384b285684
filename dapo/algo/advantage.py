"""Group-relative outcome advantages (GRPO, as used by DAPO).

Paper eq. 8 (docs/dapo.md §1 and §3): Â_i = (R_i − mean({R_j})) / std({R_j}) over the G samples
of one prompt, the same value for every token of o_i. The G samples of a prompt are contiguous in the
batch, so group statistics are a ``view(-1, G)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def group_advantages(
    scores: torch.Tensor,
    group_size: int,
    *,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """One advantage per sequence from the sequence scores of contiguous groups.

    Args:
        scores: (B,) total reward of each sequence (correctness ± overlong penalty); B = num_groups · G,
            the G samples of a prompt contiguous.
        group_size: G.
        norm_by_std: divide by (std + eps) (GRPO/DAPO); False gives Dr. GRPO's ``score − mean``.
        eps: added to the std.

    Returns:
        (B,) advantages, float. Groups of size 1 use mean 0 and std 1 (the reference's convention);
        otherwise mean and sample std (ddof = 1). A group whose scores are all equal gets exactly 0.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if scores.dim() != 1 or scores.numel() % group_size != 0:
        raise ValueError(
            f"scores must be 1-D with a length divisible by group_size={group_size}, "
            f"got shape {tuple(scores.shape)}"
        )
    if not scores.is_floating_point():
        scores = scores.float()
    grouped = scores.view(-1, group_size)  # (N, G)
    if group_size == 1:
        mean = torch.zeros_like(grouped)  # (N, 1)
        std = torch.ones_like(grouped)  # (N, 1)
    else:
        mean = grouped.mean(dim=-1, keepdim=True)  # (N, 1)
        std = grouped.std(dim=-1, keepdim=True, unbiased=True)  # (N, 1)
    centered = grouped - mean  # (N, G)
    advantages = centered / (std + eps) if norm_by_std else centered  # (N, G)
    if group_size > 1:
        # mean() of equal floats can differ from them by rounding; pin constant groups to exactly 0.
        constant = (grouped == grouped[:, :1]).all(dim=-1, keepdim=True)  # (N, 1)
        advantages = torch.where(constant, torch.zeros_like(advantages), advantages)
    return advantages.reshape(-1)


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., torch.Tensor]] = {"grpo": group_advantages}
"""Advantage estimators by name; each takes (scores (B,), group_size, **options) -> (B,)."""


def get_advantage_estimator(name: str) -> Callable[..., torch.Tensor]:
    """Look up an advantage estimator by name; raises ValueError listing the valid names."""
    try:
        return ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        valid = ", ".join(ADVANTAGE_ESTIMATORS)
        raise ValueError(f"unknown advantage estimator {name!r}; valid names: {valid}") from None
