"""Discarded rollouts and the objective explainer on a real tiny run: every generated group is reported
with the reason it was not trained on, the counts per reason equal the step's logged metrics, and the
explainer's per-token shares, from the recorded old and new log-probs, add up to the logged loss."""

from __future__ import annotations

from collections import Counter

import pytest

from dapo import rewards as reward
from dapo.algo.explain import explain_sample
from dapo.data.problems import Problem
from dapo.loop.batching import Rollout
from dapo.loop.runner import run
from dapo.loop.trainer import reported
from tests.dapo.test_trainer import LengthParityReward, Recorder


@pytest.fixture
def parity(monkeypatch) -> str:
    monkeypatch.setitem(reward.REWARD_FUNCTIONS, "length_parity", LengthParityReward)
    return "length_parity"


def test_every_group_is_reported_with_its_reason_and_the_counts_match_the_metrics(
    tiny_config, parity, tmp_path
):
    config = tiny_config.with_overrides(
        {
            "data.reward_fn": parity,
            "data.gen_batch_size": 6,  # more prompts a round than the batch needs: surplus groups
            "algorithm.overlong_filtering": True,
            "logging.token_data_samples_per_step": 64,  # every trained sample: the whole loss is checked
        }
    )
    rec = Recorder()
    result = run(config, out_dir=tmp_path, sinks=[rec])
    assert result.status == "succeeded", result.error
    G = config.rollout.n
    seen: Counter[str] = Counter()
    for report in rec.reports:
        m, samples = report.metrics, report.samples
        assert len(samples) == m["train/num_prompts_generated"] * G  # every generated group is reported
        groups: dict[int, list] = {}
        for s in samples:
            groups.setdefault(s.group, []).append(s)
        reasons: Counter[str] = Counter()
        for members in groups.values():
            group_reasons = {s.discard_reason for s in members} - {"overlong"}
            assert len(group_reasons) <= 1  # none: a trained group whose every sample is overlong
            reason = group_reasons.pop() if group_reasons else ""
            reasons[reason] += 1
            assert all(s.kept == (reason == "") for s in members)
            if reason in ("all_correct", "all_wrong"):
                assert {s.acc for s in members} == {reason == "all_correct"}
        for name in ("all_correct", "all_wrong", "no_variance", "surplus"):
            assert reasons[name] == m[f"train/discarded_groups/{name}"], name
        # the reasons agree with the metrics logged before them (filter on acc: dropped = all-same acc)
        generated = m["train/num_prompts_generated"]
        assert reasons["all_correct"] == pytest.approx(m["train/frac_all_correct"] * generated)
        assert reasons["all_wrong"] == pytest.approx(m["train/frac_all_wrong"] * generated)
        assert reasons[""] * G == m["train/num_samples_trained"]
        assert reasons[""] == m["train/num_prompts_kept"]  # one meaning: the groups trained on
        assert reasons["surplus"] == m["train/num_prompts_surplus"] == m["train/discarded_groups/surplus"]
        overlong = [s for s in samples if s.discard_reason == "overlong"]
        assert len(overlong) == m["train/discarded_samples/overlong"]
        assert all(s.truncated and s.kept and not s.update_info["in_loss"] for s in overlong)
        seen.update(reasons)
        seen["overlong"] += len(overlong)
        _check_the_explainer(report, config)
    assert seen[""] and seen["surplus"] and seen["overlong"], seen  # the run exercised the reasons


def _check_the_explainer(report, config) -> None:
    """Σ over every trained token of weight·L (from the recorded log-probs) is the step's actor/pg_loss,
    and the ratios are the learner's."""
    a = config.algorithm
    total = 0.0
    for s in report.samples:
        if not s.kept:
            assert s.update_info is None and s.token_new_logprobs is None
            continue
        info = s.update_info
        assert s.token_new_logprobs is not None and len(s.token_old_logprobs) == s.length
        terms = explain_sample(
            s.token_old_logprobs,
            s.token_new_logprobs,
            s.advantage,
            clip_low=a.clip_low,
            clip_high=a.clip_high,
            clip_c=a.clip_c,
            mode=a.loss_agg_mode,
            in_loss=info["in_loss"],
            minibatch_tokens=info["minibatch_tokens"],
            minibatch_seqs=info["minibatch_seqs"],
            max_len=config.rollout.max_response_length,
        )
        assert [t.ratio for t in terms] == pytest.approx(s.token_ratio, rel=1e-5)
        total += sum(t.share for t in terms)
    assert total == pytest.approx(report.metrics["actor/pg_loss"], rel=1e-4, abs=1e-6)


def _rollout(group: int, kept: bool) -> Rollout:
    return Rollout(
        step=1,
        group=group,
        sample_index=group,
        problem=Problem(0, [], "1"),
        prompt_ids=[1],
        response_ids=[2],
        sampling_logprobs=[-1.0],
        truncated=False,
        response="r",
        pred="1",
        score=1.0,
        acc=True,
        overlong_penalty=0.0,
        reward=1.0,
        kept=kept,
    )


def test_a_capped_step_keeps_whole_groups_the_trained_ones_first(tiny_config):
    rollouts = [_rollout(g, kept) for g in range(4) for kept in [g in (1, 3)] * 4]  # G = 4
    capped = tiny_config.with_overrides({"logging.samples_per_step": 11})
    assert [r.group for r in reported(rollouts, capped)] == [1] * 4 + [3] * 4  # 11 samples: 2 groups
    capped = tiny_config.with_overrides({"logging.samples_per_step": 12})
    assert [r.group for r in reported(rollouts, capped)] == [1] * 4 + [3] * 4 + [0] * 4
    assert reported(rollouts, tiny_config) == rollouts  # -1: all
