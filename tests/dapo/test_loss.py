"""Tests of the DAPO policy loss, its dual clip, and the loss aggregation modes (docs/dapo.md §2)."""

import math

import pytest
import torch

from dapo.algo.loss import (
    AGG_MODES,
    aggregate,
    count_seqs,
    entropy_from_logits,
    get_policy_loss,
    masked_mean,
    policy_loss,
)

CLIP = {"clip_low": 0.2, "clip_high": 0.28}


def hand_batch():
    """Two sequences, T = 4, whose per-token losses are worked out by hand below.

    row 0, A = +1, ratios 1.5, 0.5, 1.0, (pad):  L = max(−r, −clamp(r, 0.8, 1.28)) = −1.28, −0.5, −1.0
    row 1, A = −1, ratios 1.5, 20, 0.5, 1.0:     clipped = max(r, clamp(r)) = 1.5, 20, 0.8, 1.0,
                                                 and the dual clip caps 20 at c·|A| = 10
    The pad token has an absurd log-ratio (100) that must be clamped and masked out.
    """
    ratios = torch.tensor([[1.5, 0.5, 1.0, 1.0], [1.5, 20.0, 0.5, 1.0]], dtype=torch.float64)
    old_logp = torch.full((2, 4), -2.0, dtype=torch.float64)
    logp = old_logp + ratios.log()
    logp[0, 3] = 98.0
    advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    return logp, old_logp, advantages, mask


ROW0 = [-1.28, -0.5, -1.0]
ROW1 = [1.5, 10.0, 0.8, 1.0]


@pytest.mark.parametrize(
    ("agg", "expected"),
    [
        ("token-mean", (sum(ROW0) + sum(ROW1)) / 7),
        ("seq-mean-token-mean", (sum(ROW0) / 3 + sum(ROW1) / 4) / 2),
        ("seq-mean-token-sum", (sum(ROW0) + sum(ROW1)) / 2),
        ("seq-mean-token-sum-norm", (sum(ROW0) + sum(ROW1)) / (2 * 4)),
    ],
)
def test_it_computes_each_aggregation_mode_by_hand(agg, expected):
    loss, _ = policy_loss(*hand_batch(), **CLIP, clip_c=10.0, agg=agg)
    assert loss.item() == pytest.approx(expected)


def test_it_reports_clip_fractions_and_kl_over_valid_tokens():
    _, metrics = policy_loss(*hand_batch(), **CLIP, clip_c=10.0)
    # pg2 > pg1 at row 0 token 0 (r = 1.5, A > 0) and row 1 token 2 (r = 0.5, A < 0)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(2 / 7)
    # the dual clip binds only at row 1 token 1 (r = 20, A < 0)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(1 / 7)
    log_ratios = [math.log(r) for r in (1.5, 0.5, 1.0, 1.5, 20.0, 0.5, 1.0)]
    assert metrics["actor/ppo_kl"] == pytest.approx(-sum(log_ratios) / 7)
    assert all(isinstance(value, float) for value in metrics.values())


def test_it_disables_the_dual_clip_when_clip_c_is_none():
    loss, metrics = policy_loss(*hand_batch(), **CLIP, clip_c=None)
    # the r = 20 token of row 1 is no longer capped at 10
    assert loss.item() == pytest.approx((sum(ROW0) + sum(ROW1) - 10.0 + 20.0) / 7)
    assert metrics["actor/pg_clipfrac_lower"] == 0.0


def test_it_leaves_positive_advantages_alone_under_the_dual_clip():
    logp, old_logp, _, mask = hand_batch()
    positive = torch.tensor([1.0, 1.0], dtype=torch.float64)
    with_dual, _ = policy_loss(logp, old_logp, positive, mask, **CLIP, clip_c=1.5)
    without, _ = policy_loss(logp, old_logp, positive, mask, **CLIP, clip_c=None)
    assert with_dual.item() == without.item()


def test_it_passes_gradient_only_through_unclipped_tokens():
    logp, old_logp, advantages, mask = hand_batch()
    logp.requires_grad_(True)
    loss, _ = policy_loss(logp, old_logp, advantages, mask, **CLIP)
    loss.backward()
    # d(−A·r)/d logp = −A·r on unclipped tokens, 0 on clipped, dual-clipped and padded ones
    expected = torch.tensor([[0.0, -0.5, -1.0, 0.0], [1.5, 0.0, 0.0, 1.0]], dtype=torch.float64) / 7
    torch.testing.assert_close(logp.grad, expected)


def test_it_clamps_the_log_ratio_to_twenty():
    old_logp = torch.zeros(1, 2, dtype=torch.float64)
    logp = torch.tensor([[30.0, -30.0]], dtype=torch.float64)
    loss, metrics = policy_loss(
        logp, old_logp, torch.tensor([-1.0], dtype=torch.float64), torch.tensor([[1, 0]]), **CLIP, clip_c=None
    )
    assert loss.item() == pytest.approx(math.exp(20.0))
    assert metrics["actor/ppo_kl"] == pytest.approx(-20.0)


def test_it_broadcasts_sequence_advantages_to_tokens():
    logp, old_logp, advantages, mask = hand_batch()
    per_token = advantages.unsqueeze(-1).expand(-1, 4)
    loss_b, metrics_b = policy_loss(logp, old_logp, advantages, mask, **CLIP)
    loss_bt, metrics_bt = policy_loss(logp, old_logp, per_token, mask, **CLIP)
    assert loss_b.item() == loss_bt.item()
    assert metrics_b == metrics_bt


def slow_policy_loss(logp, old_logp, advantages, mask, clip_low, clip_high, clip_c, agg):
    """Per-token Python loop over §2, then the aggregation mode, written independently."""
    rows = []
    for b in range(logp.shape[0]):
        row = []
        for t in range(logp.shape[1]):
            if not mask[b][t]:
                continue
            adv = float(advantages[b])
            d = min(max(float(logp[b][t] - old_logp[b][t]), -20.0), 20.0)
            ratio = math.exp(d)
            pg1 = -adv * ratio
            pg2 = -adv * min(max(ratio, 1 - clip_low), 1 + clip_high)
            value = max(pg1, pg2)
            if clip_c is not None and adv < 0:
                value = min(-adv * clip_c, value)
            row.append(value)
        rows.append(row)
    nonempty = [row for row in rows if row]
    if agg == "token-mean":
        return sum(map(sum, rows)) / sum(map(len, rows))
    if agg == "seq-mean-token-mean":
        return sum(sum(row) / len(row) for row in nonempty) / len(nonempty)
    if agg == "seq-mean-token-sum":
        return sum(map(sum, rows)) / len(nonempty)
    return sum(map(sum, rows)) / (len(nonempty) * logp.shape[1])


def random_batch(seed, batch=6, length=7):
    generator = torch.Generator().manual_seed(seed)
    old_logp = -torch.rand(batch, length, generator=generator, dtype=torch.float64) * 3
    logp = old_logp + torch.randn(batch, length, generator=generator, dtype=torch.float64) * 0.6
    advantages = torch.randn(batch, generator=generator, dtype=torch.float64)
    lengths = torch.tensor([7, 3, 1, 5, 0, 6])  # row 4 fully masked, as overlong filtering does
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).long()
    return logp, old_logp, advantages, mask


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("clip_c", [3.0, None])
def test_it_matches_a_slow_per_token_loop(agg, clip_c):
    for seed in range(3):
        batch = random_batch(seed)
        loss, _ = policy_loss(*batch, **CLIP, clip_c=clip_c, agg=agg)
        expected = slow_policy_loss(*batch, **CLIP, clip_c=clip_c, agg=agg)
        assert loss.item() == pytest.approx(expected, rel=1e-10)


MICRO_BATCHES = [(0, 2), (2, 3), (3, 5), (5, 6)]


@pytest.mark.parametrize("agg", AGG_MODES)
def test_it_sums_micro_batch_losses_and_gradients_to_the_full_batch(agg):
    logp, old_logp, advantages, mask = random_batch(seed=7)
    full_logp = logp.clone().requires_grad_(True)
    full_loss, _ = policy_loss(full_logp, old_logp, advantages, mask, **CLIP, clip_c=3.0, agg=agg)
    full_loss.backward()

    global_counts = {"num_tokens": int(mask.sum()), "num_seqs": count_seqs(mask), "max_len": mask.shape[1]}
    micro_logp = logp.clone().requires_grad_(True)
    total = 0.0
    for start, stop in MICRO_BATCHES:
        # each micro-batch is padded only to its own longest response, as a collator would
        width = max(int(mask[start:stop].sum(dim=1).max()), 1)
        loss, _ = policy_loss(
            micro_logp[start:stop, :width],
            old_logp[start:stop, :width],
            advantages[start:stop],
            mask[start:stop, :width],
            **CLIP,
            clip_c=3.0,
            agg=agg,
            **global_counts,
        )
        loss.backward()  # gradient accumulation
        total += loss.item()

    assert total == pytest.approx(full_loss.item(), rel=1e-12)
    torch.testing.assert_close(micro_logp.grad, full_logp.grad, rtol=1e-12, atol=1e-15)


def test_it_is_not_exact_with_local_micro_batch_means():
    # the reason num_tokens exists: averaging micro-batch means weights tokens unequally
    logp, old_logp, advantages, mask = random_batch(seed=7)
    full_loss, _ = policy_loss(logp, old_logp, advantages, mask, **CLIP)
    local = [
        policy_loss(logp[a:b], old_logp[a:b], advantages[a:b], mask[a:b], **CLIP)[0].item()
        for a, b in MICRO_BATCHES
    ]
    assert sum(local) / len(local) != pytest.approx(full_loss.item(), rel=1e-3)


def test_it_gives_zero_loss_and_gradient_for_a_fully_masked_micro_batch():
    logp, old_logp, advantages, _ = random_batch(seed=1)
    logp.requires_grad_(True)
    for agg in AGG_MODES:
        loss, metrics = policy_loss(
            logp, old_logp, advantages, torch.zeros(6, 7), **CLIP, agg=agg, num_tokens=10, num_seqs=3
        )
        loss.backward()
        assert loss.item() == 0.0
        assert metrics["actor/pg_clipfrac"] == 0.0
    assert torch.count_nonzero(logp.grad) == 0


def test_it_aggregates_given_values_with_explicit_normalisers():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 100.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    assert aggregate(values, mask, "token-mean").item() == pytest.approx(15 / 5)
    assert aggregate(values, mask, "token-mean", num_tokens=10).item() == pytest.approx(15 / 10)
    assert aggregate(values, mask, "seq-mean-token-mean").item() == pytest.approx((2.0 + 4.5) / 2)
    assert aggregate(values, mask, "seq-mean-token-mean", num_seqs=4).item() == pytest.approx(6.5 / 4)
    assert aggregate(values, mask, "seq-mean-token-sum").item() == pytest.approx(15 / 2)
    assert aggregate(values, mask, "seq-mean-token-sum-norm").item() == pytest.approx(15 / 6)
    assert aggregate(values, mask, "seq-mean-token-sum-norm", num_seqs=4, max_len=5).item() == pytest.approx(
        15 / 20
    )


def test_it_rejects_an_unknown_aggregation_mode_listing_the_valid_ones():
    with pytest.raises(ValueError, match="seq-mean-token-sum-norm"):
        aggregate(torch.ones(1, 1), torch.ones(1, 1), "sequence-mean")
    with pytest.raises(ValueError, match="token-mean"):
        policy_loss(*hand_batch(), **CLIP, agg="mean")


def test_it_rejects_a_dual_clip_constant_not_above_one():
    with pytest.raises(ValueError, match="clip_c"):
        policy_loss(*hand_batch(), **CLIP, clip_c=1.0)


def test_it_counts_only_sequences_with_valid_tokens():
    assert count_seqs(torch.tensor([[1, 0], [0, 0], [1, 1]])) == 2


def test_it_takes_a_masked_mean_and_is_zero_on_an_empty_mask():
    x = torch.tensor([[1.0, 2.0], [3.0, 50.0]])
    assert masked_mean(x, torch.tensor([[1, 1], [1, 0]])).item() == pytest.approx(2.0)
    assert masked_mean(x, torch.zeros(2, 2)).item() == 0.0


def test_it_computes_entropy_from_logits():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [2.0, 0.0, -1.0, 0.5]]], dtype=torch.float64)  # (1, 2, 4)
    entropy = entropy_from_logits(logits)
    assert entropy.shape == (1, 2)
    probs = torch.softmax(logits[0, 1], dim=-1).tolist()
    assert entropy[0, 0].item() == pytest.approx(math.log(4))
    assert entropy[0, 1].item() == pytest.approx(-sum(p * math.log(p) for p in probs))


def test_it_looks_up_the_policy_loss_by_name():
    assert get_policy_loss("dapo") is policy_loss
    with pytest.raises(ValueError, match="dapo"):
        get_policy_loss("ppo-kl")


def test_the_config_offers_exactly_the_registered_policy_losses():
    """algorithm.policy_loss selects from POLICY_LOSSES: a loss registered there must be a choice of the
    field (the web form and --help list the choices), and no choice may name a missing loss."""
    import typing

    from dapo.algo.loss import POLICY_LOSSES
    from dapo.runconfig import AlgorithmConfig

    choices = typing.get_args(typing.get_type_hints(AlgorithmConfig)["policy_loss"])
    assert set(choices) == set(POLICY_LOSSES)
    assert AlgorithmConfig().policy_loss in POLICY_LOSSES
