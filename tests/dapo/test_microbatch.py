"""Micro-batch plans by rows and by token budget, the padding count, and the actor's update under a token
budget: the same loss, gradients and weights as one big micro-batch (the exact global token mean)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch

from dapo.cluster.ray_shards import merge_updates
from dapo.learner.actor import PolicyActor, UpdateBatch
from dapo.learner.microbatch import PaddingCount, padded_width, plan_micro_batches, split_to_count
from dapo.runconfig import ConfigError


def test_row_plans_are_consecutive_runs_of_micro_batch_size():
    assert plan_micro_batches([1] * 7, [2] * 7, max_rows=3) == [[0, 1, 2], [3, 4, 5], [6]]


def test_a_token_budget_groups_sorted_lengths_greedily():
    # totals 15, 7, 35, 8 -> order 1, 3, 0, 2; widths 7, 8 (2 x 8 = 16 fits), then 15 (3 x 15 = 45 > 40)
    # and 35 (2 x 35 = 70 > 40)
    assert plan_micro_batches([5, 5, 5, 5], [10, 2, 30, 3], max_rows=1, max_tokens=40) == [[1, 3], [0], [2]]


def test_a_sequence_longer_than_the_budget_is_its_own_micro_batch():
    plan = plan_micro_batches([4, 4, 4], [3, 90, 2], max_rows=1, max_tokens=20)
    assert plan == [[2, 0], [1]]


def test_budget_plans_cover_each_row_once_within_the_budget_and_pad_less_than_rows():
    rng = random.Random(0)
    prompts = [rng.randint(10, 60) for _ in range(64)]
    responses = [min(int(rng.expovariate(1 / 80)) + 1, 512) for _ in range(64)]  # long-tailed
    budget = 60 + 512
    plan = plan_micro_batches(prompts, responses, max_rows=8, max_tokens=budget)
    assert sorted(i for mb in plan for i in mb) == list(range(64))
    for mb in plan:
        width = padded_width([prompts[i] for i in mb], [responses[i] for i in mb])
        assert len(mb) * width <= budget or len(mb) == 1
    by_rows, by_tokens = PaddingCount(), PaddingCount()
    for plan_, count in ((plan_micro_batches(prompts, responses, max_rows=8), by_rows), (plan, by_tokens)):
        for mb in plan_:
            count.add([prompts[i] for i in mb], [responses[i] for i in mb])
    assert by_tokens.tokens == by_rows.tokens == sum(prompts) + sum(responses)
    assert by_tokens.fraction < by_rows.fraction / 2


def test_the_padding_fraction_counts_padded_slots():
    count = PaddingCount()
    count.add([3, 1], [2, 4])  # width 3 + 4 = 7, 14 slots, 10 tokens
    count.add([2], [0])  # width 2 + 1 (one response column at least), 3 slots, 2 tokens
    assert (count.slots, count.tokens) == (17, 12)
    assert count.fraction == pytest.approx(5 / 17)
    assert PaddingCount().fraction == 0.0


def test_split_to_count_halves_the_largest_micro_batch():
    assert split_to_count([[0, 1, 2, 3], [4]], 3) == [[0, 1], [2, 3], [4]]
    assert split_to_count([[0, 1, 2], [3, 4]], 4) == [[0], [1], [2], [3, 4]]  # first of the largest
    assert split_to_count([[0]], 1) == [[0]]
    with pytest.raises(ValueError, match="cannot cut 2 rows into 3"):
        split_to_count([[0, 1]], 3)


def test_learners_padding_fractions_are_averaged_not_summed():
    results = [
        ({"actor/pg_loss": 0.25, "perf/padding_frac": 0.2}, {}),
        ({"actor/pg_loss": 0.5, "perf/padding_frac": 0.4}, {}),
    ]
    metrics, _ = merge_updates(results, [[], []])
    assert metrics == {"actor/pg_loss": pytest.approx(0.75), "perf/padding_frac": pytest.approx(0.3)}


def test_the_budget_must_hold_the_longest_prompt_and_response(tiny_config):
    with pytest.raises(ConfigError) as err:
        tiny_config.with_overrides({"optim.micro_batch_max_tokens": 75})  # 64 + 12 = 76
    assert "optim.micro_batch_max_tokens" in err.value.errors
    assert "76" in err.value.errors["optim.micro_batch_max_tokens"]
    assert tiny_config.with_overrides({"optim.micro_batch_max_tokens": 76}).optim.micro_batch_max_tokens == 76
    with pytest.raises(ConfigError, match="micro_batch_max_tokens"):
        tiny_config.with_overrides({"optim.micro_batch_max_tokens": -1})


# ---- the actor ------------------------------------------------------------------------------------


def update_batch(actor: PolicyActor, seed: int = 0) -> UpdateBatch:
    """Two mini-batches of 8 rows: prompts of 3-30 tokens, responses of 1-12 (long and short mixed)."""
    rng = random.Random(seed)
    vocab = actor.model.config.vocab_size
    prompts = [[rng.randrange(3, vocab) for _ in range(rng.randint(3, 30))] for _ in range(16)]
    responses = [[rng.randrange(3, vocab) for _ in range(rng.choice([1, 2, 3, 12]))] for _ in range(16)]
    old, _ = actor.compute_logprobs(prompts, responses)
    loss_mask = [i % 5 != 4 for i in range(16)]  # a few overlong-filtered rows
    minibatch = [i // 8 for i in range(16)]
    tokens = {
        m: sum(len(r) for r, k, mb in zip(responses, loss_mask, minibatch, strict=True) if k and mb == m)
        for m in (0, 1)
    }
    seqs = {m: sum(1 for k, mb in zip(loss_mask, minibatch, strict=True) if k and mb == m) for m in (0, 1)}
    return UpdateBatch(
        prompts=prompts,
        responses=responses,
        advantages=[rng.uniform(-1, 1) for _ in range(16)],
        old_logprobs=[[x + rng.uniform(-0.1, 0.1) for x in row] for row in old],
        loss_mask=loss_mask,
        minibatch=minibatch,
        minibatch_tokens=tokens,
        minibatch_seqs=seqs,
        ratio_rows=[0, 5, 9],
    )


def actor_with(config, **optim) -> PolicyActor:
    return PolicyActor(replace(config, optim=replace(config.optim, **optim)))


def test_log_probs_under_a_token_budget_come_back_in_row_order(tiny_config):
    whole = actor_with(tiny_config, micro_batch_size=64)
    budget = actor_with(tiny_config, micro_batch_max_tokens=76)
    batch = update_batch(whole)
    want_lp, want_ent = whole.compute_logprobs(batch.prompts, batch.responses)
    got_lp, got_ent = budget.compute_logprobs(batch.prompts, batch.responses)
    assert [len(r) for r in got_lp] == [len(r) for r in batch.responses]
    for got, want in ((got_lp, want_lp), (got_ent, want_ent)):
        for g, w in zip(got, want, strict=True):
            assert g == pytest.approx(w, abs=1e-5)


def test_a_token_budget_update_equals_one_big_micro_batch(tiny_config):
    """Same loss, metrics, ratios and updated weights as one micro-batch holding each mini-batch whole,
    and less padding than micro-batches of 3 rows."""
    whole = actor_with(tiny_config, micro_batch_size=64, weight_decay=0.0)
    budget = actor_with(tiny_config, micro_batch_max_tokens=76, weight_decay=0.0)
    rows = actor_with(tiny_config, micro_batch_size=3, weight_decay=0.0)
    batch = update_batch(whole)
    (want, want_ratios, _, _), (got, got_ratios, _, _), (by_rows, _, _, _) = (
        a.update(batch) for a in (whole, budget, rows)
    )
    for key in (
        "actor/pg_loss",
        "actor/entropy_update",
        "actor/grad_norm",
        "actor/pg_clipfrac",
        "actor/ppo_kl",
    ):
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), key
    assert set(got_ratios) == {0, 5, 9}
    for row in got_ratios:
        assert got_ratios[row] == pytest.approx(want_ratios[row], abs=1e-5)
    for (name, p), q in zip(whole.model.named_parameters(), budget.model.parameters(), strict=True):
        # .grad holds the last mini-batch's gradient. AdamW's first steps move each weight by about
        # lr = 1e-3 whatever the gradient's size, so float noise in a ~0 gradient shows as up to ~1e-5.
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=f"{name}.grad")
        torch.testing.assert_close(q, p, rtol=0, atol=5e-5, msg=name)
    assert 0.0 <= got["perf/padding_frac"] < by_rows["perf/padding_frac"] < want["perf/padding_frac"]
    # the weights moved: a test of equal updates must not pass with no update at all
    start = PolicyActor(tiny_config)
    pairs = zip(start.model.parameters(), budget.model.parameters(), strict=True)
    assert max(float((p - q).abs().max()) for p, q in pairs) > 1e-3


def test_the_update_uses_the_policy_loss_the_config_names(tiny_config, monkeypatch):
    """The learner looks ``algorithm.policy_loss`` up in POLICY_LOSSES: a loss registered there is the one
    that runs (so a loss added as CONTRIBUTING.md says can be chosen)."""
    from dapo.algo import loss as loss_module

    calls: list[int] = []

    def counting(*args, **kwargs):
        calls.append(1)
        return loss_module.policy_loss(*args, **kwargs)

    monkeypatch.setitem(loss_module.POLICY_LOSSES, "dapo", counting)
    actor = actor_with(tiny_config)
    assert actor.policy_loss is counting
    actor.update(update_batch(actor))
    assert calls, "the update did not call the registered loss"
