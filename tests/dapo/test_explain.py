"""The objective explainer (dapo.algo.explain) against dapo.algo.loss on hand-made batches: every token's
loss, clip rule, weight, share of the loss and gradient, in every aggregation mode, with and without the
dual clip."""

from __future__ import annotations

import math

import pytest
import torch

from dapo.algo.explain import RULES, explain_sample, token_terms, token_weight
from dapo.algo.loss import AGG_MODES, aggregate, count_seqs, policy_loss

CLIP = {"clip_low": 0.2, "clip_high": 0.28}
MAX_LEN = 6
# Three sequences (B=3, T=4): ratios chosen to hit every rule. Row 0 (A > 0): unclipped, clipped high,
# unclipped below 1, a ratio just under 1 + ε_high. Row 1 (A < 0): clipped low, unclipped, dual-clipped
# (ratio 12 > c = 10), padding. Row 2 (A < 0, masked out of the loss as overlong filtering does).
RATIOS = [[1.1, 1.5, 0.7, 1.27], [0.5, 1.05, 12.0, 1.0], [0.9, 1.3, 1.0, 1.0]]
VALID = [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]]
ADVANTAGES = [0.8, -1.3, -0.4]
IN_LOSS = [True, True, False]


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    old = torch.tensor(
        [[-1.0, -2.0, -0.5, -3.0], [-0.2, -1.5, -4.0, -1.0], [-2.0, -0.7, -1.0, -1.0]], dtype=torch.float64
    )
    logp = old + torch.log(torch.tensor(RATIOS, dtype=torch.float64))
    mask = torch.tensor(VALID, dtype=torch.float64) * torch.tensor(IN_LOSS, dtype=torch.float64)[:, None]
    return logp, old, torch.tensor(ADVANTAGES, dtype=torch.float64), mask


def explained(mode: str, clip_c: float | None) -> list[list]:
    logp, old, adv, mask = batch()
    tokens, seqs = float(mask.sum()), count_seqs(mask)
    return [
        explain_sample(
            old[b, : sum(VALID[b])].tolist(),
            logp[b, : sum(VALID[b])].tolist(),
            ADVANTAGES[b],
            **CLIP,
            clip_c=clip_c,
            mode=mode,
            in_loss=IN_LOSS[b],
            minibatch_tokens=tokens,
            minibatch_seqs=seqs,
            max_len=MAX_LEN,
        )
        for b in range(3)
    ]


@pytest.mark.parametrize("clip_c", [10.0, None])
@pytest.mark.parametrize("mode", AGG_MODES)
def test_shares_add_up_to_the_loss_and_gradients_are_autograds(mode, clip_c):
    logp, old, adv, mask = batch()
    logp.requires_grad_(True)
    counts = {"num_tokens": mask.sum().item(), "num_seqs": count_seqs(mask), "max_len": MAX_LEN}
    loss, _ = policy_loss(logp, old, adv, mask, **CLIP, clip_c=clip_c, agg=mode, **counts)
    loss.backward()
    terms = explained(mode, clip_c)
    assert sum(t.share for row in terms for t in row) == pytest.approx(loss.item(), rel=1e-12)
    assert logp.grad is not None
    for b, row in enumerate(terms):
        for t, term in enumerate(row):
            assert term.gradient == pytest.approx(logp.grad[b, t].item(), abs=1e-12), (b, t)
        for t in range(len(row), 4):
            assert logp.grad[b, t].item() == 0.0  # padding


@pytest.mark.parametrize("clip_c", [10.0, None])
def test_each_tokens_loss_and_clip_flags_are_dapo_loss_on_that_token_alone(clip_c):
    """dapo.algo.loss on a one-token mask (token-mean over 1 token) is that token's L; its clip fractions are
    1 exactly where the explainer says clipped / dual-clipped."""
    logp, old, adv, _ = batch()
    terms = explained("token-mean", clip_c)
    for b, row in enumerate(terms):
        for t, term in enumerate(row):
            one = torch.zeros(3, 4, dtype=torch.float64)
            one[b, t] = 1.0
            loss, m = policy_loss(logp, old, adv, one, **CLIP, clip_c=clip_c, num_tokens=1)
            assert term.loss == pytest.approx(loss.item(), rel=1e-12), (b, t)
            assert term.clipped == (m["actor/pg_clipfrac"] == 1.0)
            assert term.dual_clipped == (m["actor/pg_clipfrac_lower"] == 1.0)
            assert term.ratio == pytest.approx(RATIOS[b][t], rel=1e-12)


def test_the_rules_by_hand():
    rules = [[t.rule for t in row] for row in explained("token-mean", 10.0)]
    assert rules == [["", "high", "", ""], ["low", "", "dual"], ["masked", "masked"]]
    assert [t.rule for t in explained("token-mean", None)[1]] == ["low", "", ""]  # no dual clip: −A·ratio
    assert set(RULES) >= {r for row in rules for r in row}
    dual = explained("token-mean", 10.0)[1][2]
    assert dual.loss == pytest.approx(1.3 * 10.0) and dual.gradient == 0.0  # the constant −A·c
    zero = token_terms(-1.0, -0.5, 0.0, **CLIP, clip_c=10.0)
    assert (zero.rule, zero.loss, zero.gradient) == ("zero_advantage", 0.0, 0.0)
    far = token_terms(-30.0, -1.0, 1.0, **CLIP, clip_c=None)  # log-ratio 29 clamped to 20: clipped high
    assert far.log_ratio == 20.0 and far.ratio == pytest.approx(math.exp(20.0)) and far.rule == "high"


def test_weights_are_aggregates_normalisers():
    """The weight of a token is what aggregate() gives a one-hot value at that token."""
    _, _, _, mask = batch()
    for mode in AGG_MODES:
        for b in range(2):
            one = torch.zeros(3, 4, dtype=torch.float64)
            one[b, 0] = 1.0
            want = aggregate(one, mask, mode, num_tokens=mask.sum().item(), num_seqs=2, max_len=MAX_LEN)
            got = token_weight(
                mode,
                in_loss=True,
                seq_tokens=sum(VALID[b]),
                minibatch_tokens=7,
                minibatch_seqs=2,
                max_len=MAX_LEN,
            )
            assert got == pytest.approx(want.item(), rel=1e-12), mode
    assert (
        token_weight(
            "token-mean", in_loss=False, seq_tokens=3, minibatch_tokens=7, minibatch_seqs=2, max_len=6
        )
        == 0.0
    )
    with pytest.raises(ValueError, match="unknown loss aggregation mode"):
        token_weight("nope", in_loss=True, seq_tokens=1, minibatch_tokens=1, minibatch_seqs=1, max_len=1)
