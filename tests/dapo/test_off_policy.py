"""One-step off-policy generation (rollout.one_step_off_policy, docs/dapo.md §1).

Step k+1's batch is sampled in a background thread by a copy of the policy from before step k's update:
the staleness is 0 at the first step and exactly 1 after, the loss uses the generator's log-probs (the
old-log-prob shortcut never applies to a stale batch), a resumed run trains on the batch its checkpoint
saved and follows the uninterrupted curves, and with the option off nothing of it runs.
"""

from __future__ import annotations

import math

import pytest
import torch

from dapo import rewards as reward
from dapo.cluster.backends import LocalBackend
from dapo.learner import checkpoint as ckpt
from dapo.learner.actor import PolicyActor
from dapo.loop.trainer import Trainer
from dapo.runconfig import ConfigError
from tests.dapo.test_trainer import LengthParityReward, Recorder, straight_and_resumed


@pytest.fixture
def parity_reward(monkeypatch):
    monkeypatch.setitem(reward.REWARD_FUNCTIONS, "length_parity", LengthParityReward)
    return "length_parity"


@pytest.fixture
def off_policy(tiny_config, parity_reward):
    """One mini-batch a step (the old-log-prob shortcut's case), lr high enough to move the weights."""
    return tiny_config.with_overrides(
        {
            "data.reward_fn": parity_reward,
            "rollout.one_step_off_policy": True,
            "optim.mini_batch_size": 4,
            "optim.total_steps": 3,
            "optim.lr": 5e-3,
            "checkpoint.every_n_steps": 0,
        }
    )


class SpyBackend(LocalBackend):
    """The local backend, recording what each update was given and which weights sampled."""

    def __init__(self, config):
        super().__init__(config)
        self.updates, self.results, self.threads = [], [], set()

    def update(self, batch):
        self.updates.append(batch)
        self.results.append(super().update(batch))
        return self.results[-1]

    def generate_stale(self, prompts, params):
        import threading

        self.threads.add(threading.current_thread().name)
        return super().generate_stale(prompts, params)


def test_the_first_batch_is_on_policy_and_every_later_one_exactly_one_step_stale(off_policy, tmp_path):
    rec = Recorder()
    backend = SpyBackend(off_policy)
    result = Trainer(off_policy, tmp_path, [rec], backend=backend).fit()
    assert result.status == "succeeded", result.error
    assert [r.metrics["rollout/staleness"] for r in rec.reports] == [0.0, 1.0, 1.0]
    assert all(s.step == r.step for r in rec.reports for s in r.samples)  # a batch is its step's
    assert backend.threads and all(name.startswith("dapo-rollout") for name in backend.threads)
    # the shortcut applies to the fresh first batch only; stale ones bring the generator's log-probs
    assert [u.old_is_current for u in backend.updates] == [True, False, False]
    assert [r.metrics["actor/old_logprob_reused"] for r in rec.reports] == [1.0, 0.0, 0.0]
    assert all(u.return_entropy for u in backend.updates)
    for r in rec.reports:
        assert 0.0 < r.metrics["actor/entropy"] < 10.0
        assert r.metrics["timing_s/gen"] > 0.0 and "timing_s/wait_gen" in r.metrics
    assert (tmp_path / "checkpoints" / "step_000003").is_dir()  # the last step makes no next batch
    assert ckpt.load_pending(tmp_path / "checkpoints" / "step_000003") is None


def test_a_stale_batch_is_trained_against_the_log_probs_of_the_weights_that_sampled_it(off_policy, tmp_path):
    config = off_policy.with_overrides({"optim.total_steps": 2, "checkpoint.every_n_steps": 1})
    backend = SpyBackend(config)
    assert Trainer(config, tmp_path, [Recorder()], backend=backend).fit().status == "succeeded"
    stale = backend.updates[1]
    assert not stale.old_is_current and all(
        len(o) == len(r) for o, r in zip(stale.old_logprobs, stale.responses, strict=True)
    )
    # sampled by the initial weights (step 0), trained by step 1's: the old log-probs are step 0's policy's
    before = PolicyActor(config)
    after = PolicyActor(config)
    after.load_state_dict(
        torch.load(tmp_path / "checkpoints" / "step_000001" / "state.pt", weights_only=True)
    )
    want = before.compute_logprobs(stale.prompts, stale.responses)[0]
    moved = after.compute_logprobs(stale.prompts, stale.responses)[0]
    flat = [v for row in stale.old_logprobs for v in row]
    assert flat == pytest.approx([v for row in want for v in row], abs=2e-4)
    assert max(abs(a - b) for a, b in zip(flat, [v for row in moved for v in row], strict=True)) > 1e-3
    # and the ratios the update reports are π_step1 / π_step0 per token, not 1
    ratios = backend.results[1][1]
    assert ratios and sorted(ratios) == stale.ratio_rows
    for row, values in ratios.items():
        expected = [math.exp(a - b) for a, b in zip(moved[row], stale.old_logprobs[row], strict=True)]
        assert values == pytest.approx(expected, rel=1e-3)
    assert any(abs(v - 1.0) > 1e-4 for values in ratios.values() for v in values)


def test_a_resumed_run_trains_on_the_saved_batch_and_follows_the_same_curves(off_policy, tmp_path):
    config = off_policy.with_overrides({"optim.total_steps": 4, "checkpoint.every_n_steps": 2})

    def the_next_batch_is_saved():
        pending = ckpt.load_pending(tmp_path / "b" / "checkpoints" / "step_000002")
        assert pending is not None and pending["step"] == 3 and pending["version"] == 1

    straight, second = straight_and_resumed(config, tmp_path, stop_after=2, between=the_next_batch_is_saved)
    assert [r.step for r in second.reports] == [3, 4]
    for want, got in zip(straight.reports[2:], second.reports, strict=True):
        assert got.metrics["rollout/staleness"] == 1.0
        for name in [
            "critic/score/mean",
            "actor/pg_loss",
            "actor/entropy",
            "actor/ppo_kl",
            "actor/grad_norm",
        ]:
            assert got.metrics[name] == pytest.approx(want.metrics[name], rel=1e-5, abs=1e-7), name
        assert [s.response for s in got.samples] == [s.response for s in want.samples]


def test_with_the_option_off_no_behaviour_copy_or_thread_exists(tiny_config, parity_reward, tmp_path):
    config = tiny_config.with_overrides({"data.reward_fn": parity_reward, "optim.total_steps": 1})
    backend = SpyBackend(config)
    rec = Recorder()
    assert Trainer(config, tmp_path, [rec], backend=backend).fit().status == "succeeded"
    assert backend._behaviour is None and not backend.threads
    assert "rollout/staleness" not in rec.reports[0].metrics
    assert not any(u.return_entropy for u in backend.updates)


def test_the_option_needs_a_separate_copy_of_the_weights(tiny_config):
    with pytest.raises(ConfigError) as e:
        tiny_config.with_overrides({"rollout.one_step_off_policy": True, "execution.backend": "ray"})
    assert "colocate" in e.value.errors["rollout.one_step_off_policy"]
    with pytest.raises(ConfigError) as e:
        tiny_config.with_overrides({"rollout.one_step_off_policy": True, "rollout.engine": "vllm"})
    assert "hf engine" in e.value.errors["rollout.one_step_off_policy"]
    tiny_config.with_overrides(
        {"rollout.one_step_off_policy": True, "execution.backend": "ray", "execution.colocate": False}
    )
