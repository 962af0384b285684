"""Tests of dynamic sampling: group filtering and the batch filler across rounds (docs/dapo.md §4)."""

import logging

import pytest
import torch

from dapo.algo.sampling import FILTER_METRICS, GroupBatchFiller, keep_groups


def make_round(round_index, num_groups, group_size):
    """Records named (round, group, sample) so a batch can be checked record by record."""
    return [(round_index, g, s) for g in range(num_groups) for s in range(group_size)]


def test_it_keeps_only_groups_whose_values_differ():
    values = torch.tensor([1.0, 1.0, 1.0, -1.0, -1.0, -1.0, 0.5, 0.25])
    assert keep_groups(values, group_size=2).tolist() == [False, True, False, True]


def test_it_keeps_groups_of_booleans_and_python_lists():
    assert keep_groups([True, True, True, True, False, False], group_size=3).tolist() == [False, True]
    assert keep_groups([1.0, -0.75, 1.0, 1.0], group_size=2).tolist() == [True, False]


def test_it_never_keeps_a_group_of_one():
    assert keep_groups(torch.tensor([1.0, 0.0, -1.0]), group_size=1).tolist() == [False, False, False]


def test_it_rejects_values_that_do_not_split_into_groups():
    with pytest.raises(ValueError, match="group_size=4"):
        keep_groups(torch.zeros(6), group_size=4)


def test_it_names_the_filter_metrics():
    assert FILTER_METRICS == ("acc", "score", "seq_reward")


def test_it_accumulates_across_rounds_and_truncates_at_a_group_boundary():
    filler = GroupBatchFiller(train_batch_size=3, group_size=2, max_num_gen_batches=0)
    filler.add(make_round(0, 4, 2), [True, False, True, False], acc=[True, False] * 4)
    assert (filler.num_kept, filler.done, filler.may_generate_more) == (2, False, True)

    filler.add(make_round(1, 3, 2), torch.tensor([False, True, True]), acc=[False, True] * 3)
    assert (filler.num_kept, filler.done, filler.may_generate_more) == (4, True, False)

    # groups 0 and 2 of round 0, then group 1 of round 1; group 2 of round 1 is surplus
    assert filler.batch() == [(0, 0, 0), (0, 0, 1), (0, 2, 0), (0, 2, 1), (1, 1, 0), (1, 1, 1)]


def test_it_reports_the_step_stats():
    filler = GroupBatchFiller(train_batch_size=2, group_size=2, max_num_gen_batches=5)
    # groups: all-correct, all-wrong, mixed, all-wrong
    acc_round_0 = [True, True, False, False, True, False, False, False]
    filler.add(make_round(0, 4, 2), [False, False, True, False], acc=acc_round_0)
    acc_round_1 = [True, False, True, True]  # mixed, all-correct
    filler.add(make_round(1, 2, 2), [True, False], acc=acc_round_1)
    assert filler.metrics() == {
        "train/num_gen_batches": 2.0,
        "train/num_prompts_generated": 6.0,
        "train/num_prompts_kept": 2.0,
        "train/num_prompts_surplus": 0.0,
        "train/frac_all_correct": pytest.approx(2 / 6),
        "train/frac_all_wrong": pytest.approx(2 / 6),
        "train/gen_limit_hit": 0.0,
        "train/discarded_groups/all_correct": 2.0,
        "train/discarded_groups/all_wrong": 2.0,
        "train/discarded_groups/no_variance": 0.0,
        "train/discarded_groups/surplus": 0.0,
    }


def test_it_trains_on_what_it_has_when_the_round_limit_is_hit(caplog):
    filler = GroupBatchFiller(train_batch_size=4, group_size=2, max_num_gen_batches=2)
    filler.add(make_round(0, 3, 2), [False, True, False], acc=[True, False] * 3)
    assert filler.may_generate_more
    filler.add(make_round(1, 3, 2), [False, False, True], acc=[True, False] * 3)
    assert (filler.done, filler.limit_hit, filler.may_generate_more) == (False, True, False)

    with caplog.at_level(logging.WARNING, logger="dapo.algo.sampling"):
        batch = filler.batch()
    assert batch == [(0, 1, 0), (0, 1, 1), (1, 2, 0), (1, 2, 1)]
    assert len(caplog.records) == 1
    assert caplog.records[0].levelno == logging.WARNING
    assert "max_num_gen_batches=2" in caplog.messages[0]
    assert "2 of 4 groups" in caplog.messages[0]
    assert filler.metrics()["train/gen_limit_hit"] == 1.0


def test_it_returns_an_empty_batch_when_the_limit_is_hit_with_nothing_kept(caplog):
    filler = GroupBatchFiller(train_batch_size=2, group_size=2, max_num_gen_batches=1)
    filler.add(make_round(0, 2, 2), [False, False], acc=[True] * 4)
    with caplog.at_level(logging.WARNING, logger="dapo.algo.sampling"):
        assert filler.batch() == []
    assert "0 of 2 groups" in caplog.messages[0]
    assert filler.metrics()["train/frac_all_correct"] == 1.0


def test_it_does_not_warn_when_the_batch_fills_in_the_last_allowed_round(caplog):
    filler = GroupBatchFiller(train_batch_size=1, group_size=2, max_num_gen_batches=1)
    filler.add(make_round(0, 2, 2), [True, True], acc=[True, False] * 2)
    with caplog.at_level(logging.WARNING, logger="dapo.algo.sampling"):
        assert filler.batch() == [(0, 0, 0), (0, 0, 1)]
    assert caplog.records == []
    assert not filler.limit_hit


def test_it_generates_without_limit_when_max_rounds_is_not_positive():
    filler = GroupBatchFiller(train_batch_size=1, group_size=2, max_num_gen_batches=0)
    for round_index in range(50):
        filler.add(make_round(round_index, 1, 2), [False], acc=[True, True])
    assert filler.may_generate_more
    assert not filler.limit_hit


def test_it_keeps_every_group_when_dynamic_sampling_is_off():
    filler = GroupBatchFiller(train_batch_size=3, group_size=2, max_num_gen_batches=1)
    samples = make_round(0, 3, 2)
    filler.add(samples, [True] * 3, acc=[True] * 6)  # constant groups are kept too
    assert filler.done
    assert filler.batch() == samples


def test_it_drives_a_trainer_loop_to_exactly_the_train_batch_size():
    group_size, train_batch_size = 4, 5
    filler = GroupBatchFiller(train_batch_size, group_size, max_num_gen_batches=10)
    generator = torch.Generator().manual_seed(0)
    rounds = 0
    while filler.may_generate_more:
        acc = torch.rand(3 * group_size, generator=generator) < 0.5  # 3 prompts per round
        filler.add(make_round(rounds, 3, group_size), keep_groups(acc, group_size), acc=acc.tolist())
        rounds += 1
    batch = filler.batch()
    assert len(batch) == train_batch_size * group_size
    for start in range(0, len(batch), group_size):  # whole groups, in order
        group = batch[start : start + group_size]
        assert [record[2] for record in group] == list(range(group_size))
        assert len({record[:2] for record in group}) == 1
    assert filler.metrics()["train/num_gen_batches"] == rounds


def test_it_refuses_a_batch_while_more_rounds_are_needed():
    filler = GroupBatchFiller(train_batch_size=2, group_size=2, max_num_gen_batches=3)
    filler.add(make_round(0, 1, 2), [True], acc=[True, False])
    with pytest.raises(RuntimeError, match="may_generate_more"):
        filler.batch()


def test_it_rejects_a_round_whose_sizes_disagree():
    filler = GroupBatchFiller(train_batch_size=2, group_size=2)
    with pytest.raises(ValueError, match="3 samples for 2 groups"):
        filler.add([1, 2, 3], [True, True], acc=[True] * 3)
    with pytest.raises(ValueError, match="acc values"):
        filler.add([1, 2, 3, 4], [True, True], acc=[True] * 3)


def test_it_names_why_each_group_was_not_trained_and_counts_the_reasons():
    filler = GroupBatchFiller(train_batch_size=2, group_size=2)
    # round 1: mixed (kept), all right, all wrong; round 2: mixed twice (the second is surplus), mixed
    # acc but a constant filter metric (dropped with no variance)
    filler.add(
        ["a0", "a1", "b0", "b1", "c0", "c1"],
        [True, False, False],
        acc=[True, False, True, True, False, False],
    )
    filler.add(
        ["d0", "d1", "e0", "e1", "f0", "f1"], [True, True, False], acc=[True, False, False, True, True, False]
    )
    assert filler.batch() == ["a0", "a1", "d0", "d1"]
    assert filler.group_reasons() == ["", "all_correct", "all_wrong", "", "surplus", "no_variance"]
    m = filler.metrics()
    assert {k: v for k, v in m.items() if k.startswith("train/discarded_groups/")} == {
        "train/discarded_groups/all_correct": 1.0,
        "train/discarded_groups/all_wrong": 1.0,
        "train/discarded_groups/no_variance": 1.0,
        "train/discarded_groups/surplus": 1.0,
    }
    # kept = the groups trained on; the surplus is counted apart, and agrees with the reasons
    assert m["train/num_prompts_kept"] == 2
    assert m["train/num_prompts_surplus"] == m["train/discarded_groups/surplus"] == 1
    assert m["train/frac_all_correct"] * m["train/num_prompts_generated"] == 1.0
