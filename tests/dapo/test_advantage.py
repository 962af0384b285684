"""Tests of the group-relative advantage (docs/dapo.md §3)."""

import math
import statistics

import pytest
import torch

from dapo.algo.advantage import ADVANTAGE_ESTIMATORS, get_advantage_estimator, group_advantages

EPS = 1e-6


def test_it_normalises_by_the_sample_std():
    # mean 0.5; deviations 0.5, 0.5, 0.5, −1.5; sample variance (3·0.25 + 2.25) / 3 = 1
    advantages = group_advantages(torch.tensor([1.0, 1.0, 1.0, -1.0]), group_size=4)
    expected = torch.tensor([0.5, 0.5, 0.5, -1.5]) / (1.0 + EPS)
    torch.testing.assert_close(advantages, expected)


def test_it_uses_ddof_one_not_the_population_std():
    # population std is 1, sample std is sqrt(4/3)
    advantages = group_advantages(torch.tensor([1.0, -1.0, 1.0, -1.0]), group_size=4)
    expected = torch.tensor([1.0, -1.0, 1.0, -1.0]) / (math.sqrt(4 / 3) + EPS)
    torch.testing.assert_close(advantages, expected)


def test_it_keeps_groups_contiguous_and_independent():
    scores = torch.tensor([1.0, -1.0, 1.0, 1.0, 0.0, 2.0])
    advantages = group_advantages(scores, group_size=2)
    a = 1.0 / (math.sqrt(2.0) + EPS)
    torch.testing.assert_close(advantages, torch.tensor([a, -a, 0.0, 0.0, -a, a]))


def test_it_gives_exact_zeros_to_a_constant_group():
    # 0.1 is not exact in binary: mean() differs from the values by rounding, the advantage must not
    scores = torch.tensor([0.1, 0.1, 0.1, 0.7, 0.7, 0.7], dtype=torch.float64)
    advantages = group_advantages(scores, group_size=3)
    assert torch.equal(advantages, torch.zeros(6, dtype=torch.float64))


def test_it_treats_a_singleton_group_with_mean_zero_and_std_one():
    scores = torch.tensor([0.5, -1.0])
    torch.testing.assert_close(group_advantages(scores, group_size=1), scores / (1.0 + EPS))
    torch.testing.assert_close(group_advantages(scores, group_size=1, norm_by_std=False), scores)


def test_it_only_centres_without_std_normalisation_like_dr_grpo():
    scores = torch.tensor([1.0, 1.0, 1.0, -1.0, 3.0, 1.0, 1.0, 1.0])
    advantages = group_advantages(scores, group_size=4, norm_by_std=False)
    torch.testing.assert_close(advantages, torch.tensor([0.5, 0.5, 0.5, -1.5, 1.5, -0.5, -0.5, -0.5]))


def test_it_matches_a_slow_loop_over_groups():
    generator = torch.Generator().manual_seed(0)
    group_size = 5
    scores = torch.randn(8 * group_size, generator=generator, dtype=torch.float64)
    expected = []
    for start in range(0, len(scores), group_size):
        group = scores[start : start + group_size].tolist()
        mean, std = statistics.mean(group), statistics.stdev(group)
        expected += [(s - mean) / (std + EPS) for s in group]
    advantages = group_advantages(scores, group_size=group_size)
    torch.testing.assert_close(advantages, torch.tensor(expected, dtype=torch.float64))


def test_it_accepts_integer_scores():
    advantages = group_advantages(torch.tensor([1, 0]), group_size=2)
    assert advantages.dtype == torch.float32
    a = 0.5 / (math.sqrt(0.5) + EPS)
    torch.testing.assert_close(advantages, torch.tensor([a, -a]))


def test_it_rejects_scores_that_do_not_split_into_groups():
    with pytest.raises(ValueError, match="group_size=4"):
        group_advantages(torch.zeros(6), group_size=4)


def test_it_looks_up_estimators_by_name():
    assert get_advantage_estimator("grpo") is group_advantages
    assert list(ADVANTAGE_ESTIMATORS) == ["grpo"]
    with pytest.raises(ValueError, match="grpo"):
        get_advantage_estimator("gae")


def test_the_config_offers_exactly_the_registered_advantage_estimators():
    import typing

    from dapo.runconfig import AlgorithmConfig

    choices = typing.get_args(typing.get_type_hints(AlgorithmConfig)["advantage_estimator"])
    assert set(choices) == set(ADVANTAGE_ESTIMATORS)
