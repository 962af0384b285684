"""Why a token moved: the terms of the DAPO policy loss for one token, in plain Python (no torch).

The rollout inspector's objective explainer (the web process, which never imports torch) shows, for a
token of a trained sample, what ``dapo.algo.loss.policy_loss`` computed for it at the sample's first optimiser
step: the log-ratio and ratio, the two surrogate terms, which clip rule bound, the per-token loss, the
token's weight in its mini-batch's loss under ``algorithm.loss_agg_mode`` (``dapo.algo.loss.aggregate``), its
share of that loss and the gradient the loss put on its log-prob. The formulas are docs/dapo.md §2, written
out scalar by scalar; ``tests/dapo/test_explain.py`` checks every value against ``dapo.algo.loss`` (the
per-token loss, the clip fractions and autograd's gradient) on hand-made batches in every mode.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

LOG_RATIO_BOUND = 20.0
"""The bound dapo.algo.loss.policy_loss clamps log π_θ − log π_old to (dapo.algo.loss.LOG_RATIO_BOUND)."""

RULES = {
    "": "not clipped: the gradient −A·ratio flows to the token's log-prob",
    "high": "clipped at 1 + ε_high (A > 0 and the ratio above it): no gradient",
    "low": "clipped at 1 − ε_low (A < 0 and the ratio below it): no gradient",
    "dual": "dual clip (A < 0 and −A·ratio above −A·c): the loss is the constant −A·c, no gradient",
    "zero_advantage": "advantage 0: the token adds nothing to the loss",
    "log_ratio_bound": "log-ratio clamped at ±20: no gradient",
    "masked": "left out of the loss (overlong filtering masked the whole sample)",
}
"""Each clip rule the explainer names, and what it means for the token."""


@dataclass(frozen=True)
class TokenTerms:
    """One token's terms in the policy loss (docs/dapo.md §2)."""

    old_logprob: float
    new_logprob: float
    log_ratio: float
    """clamp(new − old, −20, 20)."""
    ratio: float
    pg1: float
    """−A · ratio."""
    pg2: float
    """−A · clamp(ratio, 1 − ε_low, 1 + ε_high)."""
    loss: float
    """The per-token loss L: max(pg1, pg2), bounded by −A·c where A < 0 and the dual clip is on."""
    rule: str
    """A key of ``RULES``: which rule bound ("" when none did)."""
    clipped: bool
    """pg2 > pg1: what ``actor/pg_clipfrac`` counts."""
    dual_clipped: bool
    """The dual clip bound: what ``actor/pg_clipfrac_lower`` counts."""
    dloss_dlogp: float
    """∂L/∂ log π_θ of the token: −A·ratio where the gradient flows, else 0."""
    weight: float
    """The token's weight in its mini-batch's loss (``aggregate``'s normaliser for it; 0 when masked)."""
    share: float
    """weight · L: what the token adds to its mini-batch's loss (those add up to the loss)."""
    gradient: float
    """weight · ∂L/∂ log π_θ: the gradient of the mini-batch's loss with respect to the token's log-prob;
    gradient descent raises the log-prob where it is negative and lowers it where it is positive."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def token_weight(
    mode: str,
    *,
    in_loss: bool,
    seq_tokens: int,
    minibatch_tokens: int | float,
    minibatch_seqs: int | float,
    max_len: int,
) -> float:
    """The factor ``dapo.algo.loss.aggregate`` multiplies a valid token's value by, for one sequence of
    ``seq_tokens`` valid tokens in a mini-batch of ``minibatch_tokens`` valid tokens over ``minibatch_seqs``
    sequences (the whole mini-batch's counts, as the learner passes them), ``max_len`` the padded length of
    seq-mean-token-sum-norm (rollout.max_response_length):

      token-mean               1 / minibatch_tokens
      seq-mean-token-mean      1 / (minibatch_seqs · seq_tokens)
      seq-mean-token-sum       1 / minibatch_seqs
      seq-mean-token-sum-norm  1 / (minibatch_seqs · max_len)

    Normalisers below 1 count as 1, as in ``aggregate``. 0 for a sequence out of the loss (``in_loss``
    False: overlong filtering zeroed its mask)."""
    if not in_loss or seq_tokens <= 0:
        return 0.0
    tokens, seqs = max(float(minibatch_tokens), 1.0), max(float(minibatch_seqs), 1.0)
    if mode == "token-mean":
        return 1.0 / tokens
    if mode == "seq-mean-token-mean":
        return 1.0 / (seqs * float(seq_tokens))
    if mode == "seq-mean-token-sum":
        return 1.0 / seqs
    if mode == "seq-mean-token-sum-norm":
        return 1.0 / (seqs * max(float(max_len), 1.0))
    raise ValueError(f"unknown loss aggregation mode {mode!r}")


def token_terms(
    old_logprob: float,
    new_logprob: float,
    advantage: float,
    *,
    clip_low: float,
    clip_high: float,
    clip_c: float | None,
    weight: float = 1.0,
    in_loss: bool = True,
) -> TokenTerms:
    """The terms ``dapo.algo.loss.policy_loss`` computes for one token (docs/dapo.md §2), with its weight."""
    diff = new_logprob - old_logprob
    log_ratio = min(max(diff, -LOG_RATIO_BOUND), LOG_RATIO_BOUND)
    ratio = math.exp(log_ratio)
    a = advantage
    pg1 = -a * ratio
    pg2 = -a * min(max(ratio, 1.0 - clip_low), 1.0 + clip_high)
    clipped_value = max(pg1, pg2)
    clipped = pg2 > pg1
    dual = clip_c is not None and a < 0 and clipped_value > -a * clip_c
    loss = -a * clip_c if dual and clip_c is not None else clipped_value
    if a == 0:
        rule = "zero_advantage"
    elif dual:
        rule = "dual"
    elif clipped:
        rule = "high" if a > 0 else "low"
    elif abs(diff) > LOG_RATIO_BOUND:
        rule = "log_ratio_bound"
    else:
        rule = ""
    dloss = -a * ratio if rule == "" else 0.0
    if not in_loss:
        rule = "masked"
    w = weight if in_loss else 0.0
    return TokenTerms(
        old_logprob=old_logprob,
        new_logprob=new_logprob,
        log_ratio=log_ratio,
        ratio=ratio,
        pg1=pg1,
        pg2=pg2,
        loss=loss,
        rule=rule,
        clipped=clipped,
        dual_clipped=dual,
        dloss_dlogp=dloss,
        weight=w,
        share=w * loss,
        gradient=w * dloss,
    )


def explain_sample(
    old_logprobs: list[float],
    new_logprobs: list[float],
    advantage: float,
    *,
    clip_low: float,
    clip_high: float,
    clip_c: float | None,
    mode: str,
    in_loss: bool,
    minibatch_tokens: int | float,
    minibatch_seqs: int | float,
    max_len: int,
) -> list[TokenTerms]:
    """``token_terms`` of every token of one trained sample (old and new log-probs aligned, one per
    response token), each weighted by ``token_weight`` for the sample's mini-batch."""
    n = min(len(old_logprobs), len(new_logprobs))
    weight = token_weight(
        mode,
        in_loss=in_loss,
        seq_tokens=n,
        minibatch_tokens=minibatch_tokens,
        minibatch_seqs=minibatch_seqs,
        max_len=max_len,
    )
    return [
        token_terms(
            float(old_logprobs[i]),
            float(new_logprobs[i]),
            advantage,
            clip_low=clip_low,
            clip_high=clip_high,
            clip_c=clip_c,
            weight=weight,
            in_loss=in_loss,
        )
        for i in range(n)
    ]
