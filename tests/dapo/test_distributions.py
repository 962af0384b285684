"""Per-step distributions: the quantiles a real step records equal numpy's over the same values, and
learners' ratio sketches pool to the quantiles of all their tokens."""

from __future__ import annotations

import numpy as np
import pytest

from dapo import rewards as reward
from dapo.cluster.ray_shards import merge_updates
from dapo.loop.distributions import LEVELS, SKETCH, merge_sketches, pop_ratio_sketch, quantiles, ratio_sketch
from dapo.loop.report import Sink
from dapo.loop.runner import run
from dapo.loop.sinks import JsonlSink, read_jsonl


class LengthParityReward:
    """Correct iff the response length is even: groups of a random model's samples vary, so some train."""

    def __call__(self, response: str, ground_truth: str) -> reward.MathResult:
        ok = len(response) % 2 == 0
        return reward.MathResult(score=1.0 if ok else -1.0, acc=ok, pred=str(len(response)))


class Reports(Sink):
    def __init__(self):
        self.reports = []

    def on_step(self, report):
        self.reports.append(report)


def test_a_steps_quantiles_equal_numpys_over_its_samples(tiny_config, tmp_path, monkeypatch):
    monkeypatch.setitem(reward.REWARD_FUNCTIONS, "length_parity", LengthParityReward)
    # every sample handed out whole, with its per-token entropies and ratios: the known batch to check
    config = tiny_config.with_overrides(
        {
            "optim.total_steps": 1,
            "data.reward_fn": "length_parity",
            "logging.token_data_samples_per_step": 1000,
            "checkpoint.every_n_steps": 0,
        }
    )
    rec = Reports()
    result = run(config, out_dir=tmp_path, sinks=[rec, JsonlSink(tmp_path)])
    assert result.status == "succeeded", result.error
    report = rec.reports[-1]
    samples = report.samples
    trained = [s for s in samples if s.kept]
    assert len(trained) == 16  # 4 groups of 4, over two mini-batches
    expected = {
        "reward": [s.reward for s in samples],
        "length": [s.length for s in samples],
        "advantage": [s.advantage for s in trained],
        "entropy": [v for s in trained for v in s.token_entropy],
        # overlong filtering takes truncated samples out of the loss: their tokens are not trained
        "ratio": [v for s in trained if not s.truncated for v in s.token_ratio],
    }
    dist = report.distributions
    assert sorted(dist) == sorted(expected)
    for name, values in expected.items():
        assert len(dist[name]) == len(LEVELS) == 21
        want = np.percentile(np.asarray(values, dtype=np.float64), LEVELS)
        assert dist[name] == pytest.approx(want, rel=1e-5, abs=1e-6), name
    assert not any(k.startswith(SKETCH) for k in report.metrics)  # the sketch is no metric
    (row,) = read_jsonl(tmp_path / "distributions.jsonl")
    assert row["step"] == 1 and row["levels"] == list(LEVELS) and row["quantiles"] == dist


def test_quantiles_drop_non_finite_values_and_say_none_for_nothing():
    assert quantiles([]) is None
    assert quantiles([float("nan")]) is None
    assert quantiles([1.0, float("inf"), 3.0], [0, 50, 100]) == [1.0, 2.0, 3.0]


def test_one_learners_sketch_is_exact_and_several_pool_within_a_percentile():
    rng = np.random.default_rng(0)
    a = rng.lognormal(0.0, 0.05, 5000)
    b = rng.lognormal(0.1, 0.2, 15000)
    one = dict(ratio_sketch(a))
    assert pop_ratio_sketch(one) == pytest.approx(np.percentile(a, LEVELS))
    assert one == {}  # popped whole
    merged = merge_sketches([ratio_sketch(a), ratio_sketch(b), ratio_sketch(np.array([]))])
    assert merged[f"{SKETCH}count"] == 20000
    pooled = np.concatenate([a, b])
    got = pop_ratio_sketch(dict(merged))
    # each merged quantile lies between the pooled values one percentile rank either side
    for level, value in zip(LEVELS, got, strict=True):
        low, high = np.percentile(pooled, [max(0, level - 1), min(100, level + 1)])
        assert low - 1e-12 <= value <= high + 1e-12, level


def test_merge_updates_pools_the_learners_sketches_and_keeps_them_out_of_the_sums():
    rng = np.random.default_rng(1)
    parts = [rng.normal(1.0, 0.01, 300), rng.normal(1.0, 0.02, 100)]
    results = [({"actor/pg_loss": 1.0, **ratio_sketch(p)}, {}) for p in parts]
    metrics, _ = merge_updates(results, [[], []])
    assert metrics["actor/pg_loss"] == 2.0
    assert metrics[f"{SKETCH}count"] == 400  # not a sum of quantiles: a pooled sketch
    assert metrics[f"{SKETCH}q000"] == pytest.approx(min(p.min() for p in parts))
    assert metrics[f"{SKETCH}q100"] == pytest.approx(max(p.max() for p in parts))
