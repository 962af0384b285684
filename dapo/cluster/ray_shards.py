"""How the Ray backend splits a step's work over workers and merges the results (pure; no Ray, no torch).

* Prompts and log-prob rows: contiguous, near-equal shards (``split_evenly``), results concatenated in order,
  so the G samples of a prompt stay contiguous (the group invariant). FSDP learners score equally long
  shards (``logprob_shards``): their forwards gather weights together.
* Sampling seeds: shard i of W gets ``shard_seed(seed, i, W)``; one shard keeps the seed itself.
* The update: every mini-batch is cut into W shards, one per learner, contiguous in arrival order, or,
  with ``balance`` (the trainer sets it under a token budget), of balanced token totals (``balanced_split``,
  verl's ``balance_batch`` within a mini-batch: bench/README.md "Balanced shards"); shorter shards are padded
  with loss-masked copies of a row, so every learner runs the same number of micro-batches (and so the same
  number of DDP gradient all-reduces: a learner with fewer would leave the others waiting forever). Masked
  rows add exactly zero to the loss and gradient. Each shard carries the mini-batch's GLOBAL token and
  sequence counts, so the sum over learners of their losses is the one-process loss (exact token mean).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dapo.learner.actor import UpdateBatch
from dapo.loop.distributions import SKETCH, merge_sketches

SEED_STRIDE = 104_729
"""A prime: shard seeds of one call never collide with the trainer's seeds of other steps or rounds."""
REPLICATED_METRICS = ("actor/grad_norm", "actor/lr")
"""Metrics every learner computes identically (after DDP's all-reduce): taken from rank 0, not summed."""
AVERAGED_METRICS = ("perf/padding_frac",)
"""Per-learner fractions of the learner's own work: averaged over the learners, not summed."""


def split_evenly(n: int, parts: int) -> list[range]:
    """``parts`` contiguous ranges covering range(n); sizes differ by at most one, the larger come first."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        size = base + (i < extra)
        out.append(range(start, start + size))
        start += size
    return out


def logprob_shards(n: int, parts: int, *, even: bool = False) -> list[tuple[list[int], int]]:
    """(rows, real) for each learner scoring log-probs of n rows: contiguous near-equal shards, the empty
    ones left out. ``even`` (FSDP, where each forward is a collective): one shard per learner, all as long
    as the longest, topped up with copies of row 0 after the ``real`` rows, whose results are dropped."""
    shards = [list(r) for r in split_evenly(n, parts)]
    if not even:
        return [(rows, len(rows)) for rows in shards if rows]
    width = max(1, len(shards[0]))
    return [(rows + [0] * (width - len(rows)), len(rows)) for rows in shards]


def shard_seed(seed: int | None, index: int, shards: int) -> int | None:
    """Sampling seed of shard ``index`` of ``shards``: the seed itself for a single shard (so one worker
    draws what one process draws), else a distinct seed per shard (deterministic for a fixed count)."""
    if seed is None or shards == 1:
        return seed
    return (seed + SEED_STRIDE * (index + 1)) % (2**31)


def balanced_split(rows: list[int], sizes: list[int], parts: int) -> list[list[int]]:
    """``rows`` in ``parts`` pieces with as many rows as ``split_evenly`` gives (the larger first) and
    balanced totals of ``sizes`` (a row's tokens): the longest row first, each to the lightest piece with
    room; each piece keeps arrival order."""
    counts = [len(r) for r in split_evenly(len(rows), parts)]
    pieces: list[list[int]] = [[] for _ in range(parts)]
    load = [0] * parts
    for j in sorted(range(len(rows)), key=lambda j: (-sizes[j], j)):
        k = min((k for k in range(parts) if len(pieces[k]) < counts[k]), key=lambda k: (load[k], k))
        pieces[k].append(rows[j])
        load[k] += sizes[j]
    return [sorted(piece) for piece in pieces]


def shard_update(
    batch: UpdateBatch, parts: int, *, balance: bool = False
) -> list[tuple[UpdateBatch, list[int]]]:
    """One (UpdateBatch, global row of each shard row, -1 for padding) per learner; see the module doc.
    ``balance``: shards of balanced token totals instead of contiguous ones (the same loss and gradient:
    which learner computes a row changes only the order of float sums)."""
    if parts == 1:
        return [(batch, list(range(len(batch.prompts))))]
    sources: list[list[int]] = [[] for _ in range(parts)]  # the global row each shard row copies
    real: list[list[bool]] = [[] for _ in range(parts)]  # False: a loss-masked padding row
    for mb in sorted(set(batch.minibatch)):
        rows = [i for i, m in enumerate(batch.minibatch) if m == mb]
        if balance:
            sizes = [len(batch.prompts[i]) + len(batch.responses[i]) for i in rows]
            pieces = balanced_split(rows, sizes, parts)
        else:
            pieces = [rows[r.start : r.stop] for r in split_evenly(len(rows), parts)]
        width = len(pieces[0])
        for src, ok, piece in zip(sources, real, pieces, strict=True):
            src.extend(piece + [rows[0]] * (width - len(piece)))
            ok.extend([True] * len(piece) + [False] * (width - len(piece)))
    return [
        (_take(batch, src, ok), [i if keep else -1 for i, keep in zip(src, ok, strict=True)])
        for src, ok in zip(sources, real, strict=True)
    ]


def _take(batch: UpdateBatch, src: list[int], real: list[bool]) -> UpdateBatch:
    wanted = set(batch.ratio_rows)
    return UpdateBatch(
        prompts=[batch.prompts[i] for i in src],
        responses=[batch.responses[i] for i in src],
        advantages=[batch.advantages[i] if ok else 0.0 for i, ok in zip(src, real, strict=True)],
        old_logprobs=[batch.old_logprobs[i] for i in src],
        loss_mask=[batch.loss_mask[i] and ok for i, ok in zip(src, real, strict=True)],
        minibatch=[batch.minibatch[i] for i in src],
        minibatch_tokens=dict(batch.minibatch_tokens),
        minibatch_seqs=dict(batch.minibatch_seqs),
        ratio_rows=[j for j, (i, ok) in enumerate(zip(src, real, strict=True)) if ok and i in wanted],
        old_is_current=batch.old_is_current,
        return_entropy=batch.return_entropy,
    )


def merge_updates(results: Sequence[tuple[Any, ...]], rows: list[list[int]]) -> tuple[Any, ...]:
    """Combine the learners' (metrics, ratios, entropies, log-probs) into the one-process result (any
    number of per-row maps after the metrics: the result has as many).

    Each learner's metrics are its micro-batches' shares of the global mini-batch mean (losses divided by
    the global counts, token metrics weighted by their share of the global tokens), so they add up;
    grad norm and lr are the same on every learner; the ratio sketches are pooled (``merge_sketches``).
    Per-row values are keyed back to global rows; those of
    padding rows (-1) are dropped.
    """
    metrics: dict[str, float] = {}
    for key in results[0][0]:
        if key.startswith(SKETCH):
            continue
        values = [r[0].get(key, 0.0) for r in results]
        if key in REPLICATED_METRICS:
            metrics[key] = values[0]
        else:
            metrics[key] = sum(values) / (len(values) if key in AVERAGED_METRICS else 1)
    metrics.update(merge_sketches([{k: v for k, v in r[0].items() if k.startswith(SKETCH)} for r in results]))
    merged: list[dict[int, list[float]]] = [{} for _ in results[0][1:]]
    for result, shard_rows in zip(results, rows, strict=True):
        for into, part in zip(merged, result[1:], strict=True):
            for local, values in part.items():
                if shard_rows[local] >= 0:
                    into[shard_rows[local]] = values
    return (metrics, *merged)
