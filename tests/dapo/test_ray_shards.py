"""How the Ray backend splits work over workers (dapo.cluster.ray_shards): pure, no Ray needed."""

from __future__ import annotations

import pytest

from dapo.cluster.ray_shards import merge_updates, shard_seed, shard_update, split_evenly
from dapo.learner.actor import UpdateBatch


def make_batch(minibatch: list[int]) -> UpdateBatch:
    rows = len(minibatch)
    return UpdateBatch(
        prompts=[[1, i] for i in range(rows)],
        responses=[[10 + i] * (1 + i % 3) for i in range(rows)],
        advantages=[float(i) + 0.5 for i in range(rows)],
        old_logprobs=[[-1.0] * (1 + i % 3) for i in range(rows)],
        loss_mask=[i != 1 for i in range(rows)],
        minibatch=minibatch,
        minibatch_tokens={m: 7 for m in set(minibatch)},
        minibatch_seqs={m: 3 for m in set(minibatch)},
        ratio_rows=[0, 1, 3],
    )


def test_split_evenly_covers_every_index_in_order_with_sizes_differing_by_at_most_one() -> None:
    for n in range(0, 12):
        for parts in range(1, 5):
            ranges = split_evenly(n, parts)
            assert [i for r in ranges for i in r] == list(range(n))
            sizes = [len(r) for r in ranges]
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_one_shard_keeps_the_seed_and_several_get_distinct_reproducible_seeds() -> None:
    assert shard_seed(1234, 0, 1) == 1234
    assert shard_seed(None, 2, 4) is None
    seeds = [shard_seed(1234, i, 4) for i in range(4)]
    assert len(set(seeds)) == 4 and seeds == [shard_seed(1234, i, 4) for i in range(4)]
    assert all(0 <= s < 2**31 for s in seeds)


def test_one_learner_gets_the_batch_unchanged() -> None:
    batch = make_batch([0, 0, 0, 1, 1])
    [(shard, rows)] = shard_update(batch, 1)
    assert shard is batch and rows == [0, 1, 2, 3, 4]


def test_uneven_minibatches_are_padded_with_masked_rows_so_every_learner_has_as_many_rows() -> None:
    batch = make_batch([0, 0, 0, 1, 1, 1, 1, 1])  # mini-batch 0: 3 rows, mini-batch 1: 5 rows
    shards = shard_update(batch, 2)
    (a, rows_a), (b, rows_b) = shards
    assert rows_a == [0, 1, 3, 4, 5] and rows_b == [2, -1, 6, 7, -1]
    assert a.minibatch == b.minibatch == [0, 0, 1, 1, 1]
    assert b.loss_mask == [True, False, True, True, False] and b.advantages[1] == 0.0
    assert a.loss_mask == [True, False, True, True, True]  # row 1 was masked in the batch itself
    for shard in (a, b):  # every learner sees the GLOBAL counts (exact token mean)
        assert (
            shard.minibatch_tokens == batch.minibatch_tokens and shard.minibatch_seqs == batch.minibatch_seqs
        )


def test_each_real_row_lands_in_exactly_one_shard_with_its_data() -> None:
    batch = make_batch([0] * 5 + [1] * 2 + [2] * 4)
    shards = shard_update(batch, 3)
    seen = sorted(i for _, rows in shards for i in rows if i >= 0)
    assert seen == list(range(11))
    for shard, rows in shards:
        for j, i in enumerate(rows):
            if i >= 0:
                assert shard.prompts[j] == batch.prompts[i] and shard.responses[j] == batch.responses[i]
                assert shard.old_logprobs[j] == batch.old_logprobs[i]
                assert shard.advantages[j] == batch.advantages[i]
    counts = [[s.minibatch.count(m) for m in range(3)] for s, _ in shards]
    assert counts[0] == counts[1] == counts[2]  # same micro-batch steps on every learner


def test_ratio_rows_are_asked_for_on_the_learner_that_holds_them_and_mapped_back() -> None:
    batch = make_batch([0, 0, 0, 0])
    shards = shard_update(batch, 2)
    asked = [[rows[j] for j in shard.ratio_rows] for shard, rows in shards]
    assert asked == [[0, 1], [3]]
    results = [
        ({"actor/pg_loss": 0.25, "actor/grad_norm": 2.0, "actor/lr": 0.1}, {0: [1.0], 1: [1.1]}),
        ({"actor/pg_loss": 0.5, "actor/grad_norm": 2.0, "actor/lr": 0.1}, {1: [0.9]}),
    ]
    metrics, ratios = merge_updates(results, [rows for _, rows in shards])
    assert ratios == {0: [1.0], 1: [1.1], 3: [0.9]}
    assert metrics == {"actor/pg_loss": pytest.approx(0.75), "actor/grad_norm": 2.0, "actor/lr": 0.1}


def test_balanced_shards_even_out_the_learners_tokens_and_merge_back_by_row() -> None:
    """verl's balance_batch within a mini-batch: as many rows per learner, token totals close, each
    learner's rows in arrival order; results still land on their global rows."""
    lengths = [9, 8, 7, 6, 1, 1, 1, 1, 5]  # the long rows arrive first: contiguous halves are lopsided
    batch = UpdateBatch(
        prompts=[[1, 2] for _ in lengths],
        responses=[[5] * n for n in lengths],
        advantages=[1.0] * len(lengths),
        old_logprobs=[[-1.0] * n for n in lengths],
        loss_mask=[True] * len(lengths),
        minibatch=[0] * 8 + [1],
        minibatch_tokens={0: 34, 1: 5},
        minibatch_seqs={0: 8, 1: 1},
        ratio_rows=[0, 5],
    )

    def tokens(shards) -> list[int]:
        return [sum(len(p) + len(r) for p, r in zip(s.prompts, s.responses, strict=True)) for s, _ in shards]

    contiguous, balanced = shard_update(batch, 2), shard_update(batch, 2, balance=True)
    # mini-batch 0 has 50 tokens; mini-batch 1's lone row (7) goes to one learner, a masked copy to the other
    assert tokens(contiguous) == [38 + 7, 12 + 7]
    assert tokens(balanced) == [25 + 7, 25 + 7]
    (a, rows_a), (b, rows_b) = balanced
    assert len(rows_a) == len(rows_b) == 5 and rows_b[-1] == -1  # padding as before
    assert sorted(r for r in rows_a + rows_b if r >= 0) == list(range(9))
    assert rows_a[:4] == sorted(rows_a[:4]) and rows_b[:4] == sorted(rows_b[:4])  # arrival order kept
    asked = {rows_a[j] for j in a.ratio_rows} | {rows_b[j] for j in b.ratio_rows}
    assert asked == {0, 5}
    per_row = [({j: [float(r)] for j, r in enumerate(rows)},) for rows in (rows_a, rows_b)]
    _, merged = merge_updates([({"actor/pg_loss": 0.0}, *p) for p in per_row], [rows_a, rows_b])
    assert merged == {i: [float(i)] for i in range(9)}
