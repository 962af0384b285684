"""Rounds sized to what is missing (algorithm.adaptive_gen_batch, dapo.algo.sampling.RoundSizer).

A sized round draws ceil(missing / p + margin * sd / p) prompts, at most gen_batch_size, p being the
recent kept fraction. The trained batch stays the first train_batch_size groups that pass the filter; the
tests check the arithmetic, that the trainer draws fewer prompts for the same full batch, that the
round limit counts prompts, and that a resumed run sizes its rounds as the uninterrupted one did.
"""

from __future__ import annotations

import math
import random

import pytest

from dapo import rewards as reward
from dapo.algo.sampling import GroupBatchFiller, RoundSizer
from dapo.cluster.backends import LocalBackend
from dapo.loop.trainer import Trainer
from tests.dapo.test_trainer import LengthParityReward, Recorder, straight_and_resumed


def test_with_no_history_a_round_asks_for_exactly_what_is_missing():
    sizer = RoundSizer(cap=24)
    assert sizer.keep_rate == 1.0
    assert [sizer.size(m) for m in (1, 5, 16)] == [1, 5, 16]
    assert sizer.size(30) == 24  # never more than gen_batch_size


def test_the_size_follows_the_kept_fraction_with_a_half_sigma_cushion():
    sizer = RoundSizer(cap=100, decay=1.0)
    sizer.observe(kept=59, generated=79)  # p = 60 / 80 = 0.75 with the prior
    p = 0.75
    for missing in (1, 3, 8):
        want = math.ceil(missing / p + 0.5 * math.sqrt(missing * (1 - p)) / p)
        assert sizer.size(missing) == want
    assert sizer.size(8) == 12  # 10.67 + 0.5 * 1.41 / 0.75 = 11.61 -> 12
    starved = RoundSizer(cap=10, decay=1.0)
    starved.observe(kept=0, generated=50)
    assert starved.size(1) == 10  # p = 1/51: capped


def test_old_rounds_fade_so_the_estimate_follows_a_policy_that_changes():
    sizer = RoundSizer(cap=100, decay=0.5)
    for _ in range(20):
        sizer.observe(kept=8, generated=8)
    for _ in range(20):
        sizer.observe(kept=2, generated=8)
    assert sizer.keep_rate == pytest.approx(0.25, abs=0.1)


def test_the_state_round_trips():
    a = RoundSizer(cap=8)
    a.observe(3, 8)
    b = RoundSizer(cap=8)
    b.load_state_dict(a.state_dict())
    assert (b.kept, b.generated, b.size(5)) == (a.kept, a.generated, a.size(5))


def test_the_filler_stops_at_its_group_limit_and_trains_on_what_it_has(caplog):
    filler: GroupBatchFiller[int] = GroupBatchFiller(4, 2, max_num_groups=5)
    filler.add([0, 1, 2, 3, 4, 5], [True, False, False], acc=[True, False, True, True, False, False])
    assert filler.may_generate_more
    filler.add([6, 7, 8, 9], [False, True], acc=[True, True, True, False])
    assert filler.limit_hit and not filler.may_generate_more
    assert filler.batch() == [0, 1, 8, 9]
    assert "5 groups, max_num_gen_batches x gen_batch_size" in caplog.text


def _simulate(p: float, sized: bool, rng: random.Random, batch: int = 8, cap: int = 8) -> tuple[int, int]:
    """Prompts and rounds one step draws when each group passes the filter with probability p."""
    sizer = RoundSizer(cap=cap)
    kept = prompts = rounds = 0
    for _ in range(30):  # warm the estimate over earlier steps, then count one step
        kept = prompts = rounds = 0
        while kept < batch:
            m = sizer.size(batch - kept) if sized else cap
            passed = sum(rng.random() < p for _ in range(m))
            sizer.observe(passed, m)
            kept, prompts, rounds = kept + passed, prompts + m, rounds + 1
    return prompts, rounds


def test_sized_rounds_draw_fewer_prompts_than_fixed_ones_for_a_full_batch():
    rng = random.Random(0)
    fixed = sum(_simulate(0.75, False, rng)[0] for _ in range(200))
    sized = sum(_simulate(0.75, True, rng)[0] for _ in range(200))
    assert sized < 0.9 * fixed  # ~10.8 against ~13.5 prompts per step at this keep rate


@pytest.fixture
def sized(tiny_config, monkeypatch):
    """Sized rounds on a reward a random model passes about half the time (length parity)."""
    monkeypatch.setitem(reward.REWARD_FUNCTIONS, "length_parity", LengthParityReward)
    return tiny_config.with_overrides(
        {
            "data.reward_fn": "length_parity",
            "logging.samples_per_step": -1,  # every group, in generation order
            "algorithm.adaptive_gen_batch": True,
            "data.train_batch_size": 4,
            "data.gen_batch_size": 8,
            "algorithm.max_num_gen_batches": 3,
            "optim.total_steps": 3,
            "checkpoint.every_n_steps": 0,
        }
    )


class RoundSpy(LocalBackend):
    """The local backend, recording how many prompts each generation round drew."""

    def __init__(self, config):
        super().__init__(config)
        self.rounds: list[int] = []

    def generate(self, prompts, params):
        self.rounds.append(len(prompts))
        return super().generate(prompts, params)


def test_the_trainer_fills_the_batch_from_rounds_sized_to_what_is_missing(sized, tmp_path):
    rec, backend = Recorder(), RoundSpy(sized)
    trainer = Trainer(sized, tmp_path, [rec], backend=backend)
    assert trainer.fit().status == "succeeded"
    assert backend.rounds[0] == 4  # no history yet: the 4 missing groups, not gen_batch_size = 8
    assert sum(backend.rounds) == sum(r.metrics["train/num_prompts_generated"] for r in rec.reports)
    replay = RoundSizer(cap=8)  # the same arithmetic, replayed from what each round kept
    at = 0
    for report in rec.reports:
        m = report.metrics
        assert m["train/num_prompts_generated"] <= 3 * 8  # the limit: 3 rounds' worth of prompts
        groups = [report.samples[g * 4 : (g + 1) * 4] for g in range(len(report.samples) // 4)]
        dropped = ("all_correct", "all_wrong", "no_variance")  # the filter's; "overlong" is per sample
        passed = [all(s.discard_reason not in dropped for s in g) for g in groups]
        kept = 0
        for size in backend.rounds[at : at + int(m["train/num_gen_batches"])]:
            assert size == replay.size(4 - kept)
            replay.observe(sum(passed[:size]), size)
            kept, passed = kept + sum(passed[:size]), passed[size:]
        at += int(m["train/num_gen_batches"])
        if not m["train/gen_limit_hit"]:
            assert sum(s.kept for s in report.samples) == 4 * sized.rollout.n
    assert at == len(backend.rounds) and any(size != 4 for size in backend.rounds)


def test_fixed_rounds_are_unchanged_when_the_option_is_off(tiny_config, tmp_path):
    config = tiny_config.with_overrides(
        {"algorithm.adaptive_gen_batch": False, "data.gen_batch_size": 6, "optim.total_steps": 1}
    )
    rec = Recorder()
    trainer = Trainer(config, tmp_path, [rec])
    assert trainer.fit().status == "succeeded"
    assert trainer.round_sizer is None
    m = rec.reports[0].metrics
    assert m["train/num_prompts_generated"] == 6 * m["train/num_gen_batches"]


def test_a_resumed_run_sizes_its_rounds_as_the_uninterrupted_one(sized, tmp_path):
    config = sized.with_overrides({"optim.total_steps": 4, "checkpoint.every_n_steps": 2})
    straight, second = straight_and_resumed(config, tmp_path, stop_after=2)
    for want, got in zip(straight.reports[2:], second.reports, strict=True):
        for name in ("train/num_prompts_generated", "train/num_gen_batches", "critic/score/mean"):
            assert got.metrics[name] == want.metrics[name], name
