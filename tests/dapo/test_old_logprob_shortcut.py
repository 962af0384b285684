"""Skipping the old-log-prob forward when the old policy is the current one (one step per update).

With one epoch over one mini-batch, π_old is the policy the update starts from, so the update's own
log-probs (detached) are the old ones: the loss, its gradient and the updated weights must equal those
of an update fed the recomputed log-probs, and the entropies it hands back must be the old policy's.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch

from dapo import rewards as reward
from dapo.learner.actor import PolicyActor, UpdateBatch
from dapo.loop.batching import old_policy_is_current
from dapo.loop.runner import run
from tests.dapo.test_trainer import LengthParityReward, Recorder


def actor_with(config, **optim) -> PolicyActor:
    return PolicyActor(replace(config, optim=replace(config.optim, **optim)))


def one_minibatch(actor: PolicyActor, *, recompute: bool) -> UpdateBatch:
    """12 rows in ONE mini-batch, prompts of 3-30 tokens, responses of 1-12, two rows loss-masked;
    old log-probs recomputed by ``actor`` (``recompute``) or left out for the update to stand in."""
    rng = random.Random(3)
    vocab = actor.model.config.vocab_size
    prompts = [[rng.randrange(3, vocab) for _ in range(rng.choice([3, 7, 30]))] for _ in range(12)]
    responses = [[rng.randrange(3, vocab) for _ in range(rng.choice([1, 2, 5, 12]))] for _ in range(12)]
    old = actor.compute_logprobs(prompts, responses)[0] if recompute else [[] for _ in prompts]
    loss_mask = [i not in (4, 9) for i in range(12)]
    return UpdateBatch(
        prompts=prompts,
        responses=responses,
        advantages=[rng.uniform(-1, 1) for _ in range(12)],
        old_logprobs=old,
        loss_mask=loss_mask,
        minibatch=[0] * 12,
        minibatch_tokens={0: sum(len(r) for r, k in zip(responses, loss_mask, strict=True) if k)},
        minibatch_seqs={0: sum(loss_mask)},
        ratio_rows=[0, 4, 7],
        old_is_current=not recompute,
    )


def test_the_shortcut_gives_the_recomputed_loss_gradients_and_weights(tiny_config):
    # the reference scores old log-probs in one micro-batch; the shortcut splits the update in rows of 3,
    # so the exact global token mean over micro-batches is under test too
    reference = actor_with(tiny_config, micro_batch_size=64, grad_clip=1e6)
    shortcut = actor_with(tiny_config, micro_batch_size=3, grad_clip=1e6)
    want_lp, want_ent = reference.compute_logprobs(*_rows(one_minibatch(reference, recompute=False)))
    want, want_ratios, none, want_new = reference.update(one_minibatch(reference, recompute=True))
    got, got_ratios, got_ent, got_new = shortcut.update(one_minibatch(shortcut, recompute=False))
    assert none == {}  # entropies come back only when the old forward was skipped
    assert want["actor/pg_loss"] != 0.0
    for key in ("actor/pg_loss", "actor/entropy_update", "actor/grad_norm"):
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), key
    # old = current exactly: no clipping, no KL, every ratio 1 (the recomputed ones are 1 up to float noise)
    assert got["actor/pg_clipfrac"] == 0.0 and got["actor/ppo_kl"] == 0.0
    assert sorted(got_ratios) == [0, 4, 7]
    for row, ratio in got_ratios.items():
        assert ratio == [1.0] * len(want_lp[row])
        assert want_ratios[row] == pytest.approx(ratio, abs=1e-5)
        # the new log-probs handed back for the token view are the old policy's, as the loss saw them
        assert got_new[row] == pytest.approx(want_lp[row], abs=1e-5) == want_new[row]
    # the entropies handed back are the old policy's, for every row, at the response's length
    assert sorted(got_ent) == list(range(12))
    for row, ent in got_ent.items():
        assert ent == pytest.approx(want_ent[row], abs=1e-5)
    for (name, p), q in zip(reference.model.named_parameters(), shortcut.model.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=f"{name}.grad")
        torch.testing.assert_close(q, p, rtol=0, atol=5e-5, msg=name)
    start = PolicyActor(tiny_config)
    pairs = zip(start.model.parameters(), shortcut.model.parameters(), strict=True)
    assert max(float((p - q).detach().abs().max()) for p, q in pairs) > 1e-3  # the weights moved


def _rows(batch: UpdateBatch) -> tuple[list[list[int]], list[list[int]]]:
    return batch.prompts, batch.responses


def test_the_shortcut_applies_to_one_step_from_the_sampling_policy_only(tiny_config):
    c = tiny_config.with_overrides({"optim.mini_batch_size": 4})  # 4 prompts x 4 samples: one mini-batch
    assert old_policy_is_current(16, c)
    assert old_policy_is_current(10, c)  # a short batch (generation round limit) is still one mini-batch
    assert not old_policy_is_current(17, c)  # two mini-batches: the second starts from moved weights
    assert not old_policy_is_current(16, c.with_overrides({"optim.epochs": 2}))
    assert not old_policy_is_current(16, c, stale=True)  # sampled by the previous step's weights
    assert not old_policy_is_current(0, c)
    assert not old_policy_is_current(16, tiny_config)  # mini_batch_size 2: two optimiser steps


def test_a_run_with_one_step_per_update_skips_the_forward_and_still_logs_entropy(
    tiny_config, monkeypatch, tmp_path
):
    monkeypatch.setitem(reward.REWARD_FUNCTIONS, "length_parity", LengthParityReward)
    config = tiny_config.with_overrides(
        {"data.reward_fn": "length_parity", "optim.total_steps": 1, "optim.mini_batch_size": 4}
    )
    rec = Recorder()
    assert run(config, out_dir=tmp_path, sinks=[rec]).status == "succeeded"
    m = rec.reports[0].metrics
    assert m["actor/old_logprob_reused"] == 1.0
    assert m["actor/ppo_kl"] == 0.0 and m["actor/pg_clipfrac"] == 0.0
    assert 0.0 < m["actor/entropy"] < 10.0
    kept = [s for s in rec.reports[0].samples if s.kept]
    with_tokens = [s for s in kept if s.tokens is not None]
    assert with_tokens and all(s.token_ratio == [1.0] * s.length for s in with_tokens)
    assert all(s.token_entropy is not None and len(s.token_entropy) == s.length for s in with_tokens)
