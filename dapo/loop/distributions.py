"""Per-step distributions: a fixed set of quantiles of five quantities, recorded at every rollout step.

TensorBoard-style histograms need the shape of a step's values, not only their mean, but every token's
value is far too much to keep. A step records, for each quantity, its quantiles at the fixed levels
``LEVELS`` (0, 5, ..., 100 percent; numpy's default "linear" interpolation), 21 numbers, in
``StepReport.distributions``:

    reward      the sequence reward (score + overlong penalty) of every sample generated in the step
    length      the response length in tokens of every sample generated in the step
    advantage   the advantage of every sample of the trained batch (one value per sequence)
    entropy     the old policy's entropy at every response token of the trained batch
    ratio       the importance ratio pi_theta / pi_old of every trained token (loss mask on) at the first
                optimiser step that used it (the learners compute it; see ``ratio_sketch``)

Learners on Ray each hold a shard of the tokens. Each learner summarises its ratios as a sketch, its
percentiles at 0, 1, ..., 100 and its token count, carried in the update's metrics under ``SKETCH``;
``merge_sketches`` pools the sketches (each percentile standing for a 101st of its learner's tokens) and
reads the levels off the pooled, weighted values: exact for one learner, within about one percentile rank
for several. Everything here is numpy on flat arrays; docs/metrics.md lists the names.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any

import numpy as np

LEVELS: tuple[int, ...] = tuple(range(0, 101, 5))
"""Percent levels recorded per quantity (21 values)."""
NAMES = ("reward", "length", "advantage", "entropy", "ratio")
SKETCH = "dist_sketch/ratio/"
"""Prefix of the ratio sketch in an update's metrics: ``q000`` ... ``q100`` and ``count``."""
SKETCH_LEVELS = tuple(range(101))


def quantiles(values: Iterable[float] | np.ndarray, levels: Sequence[int] = LEVELS) -> list[float] | None:
    """The ``levels`` (percent) quantiles of ``values``, linear interpolation between order statistics
    (numpy.percentile's default); non-finite values are dropped; None when nothing is left."""
    array = values if isinstance(values, np.ndarray) else np.fromiter(values, dtype=np.float64)
    array = array[np.isfinite(array)]
    if array.size == 0:
        return None
    return [float(v) for v in np.percentile(array.astype(np.float64, copy=False), levels)]


def ratio_sketch(ratios: np.ndarray) -> dict[str, float]:
    """A learner's ratios (flat, the trained tokens) as sketch metrics; {} when it trained no token."""
    values = quantiles(ratios, SKETCH_LEVELS)
    if values is None:
        return {}
    out = {f"{SKETCH}q{level:03d}": v for level, v in zip(SKETCH_LEVELS, values, strict=True)}
    out[f"{SKETCH}count"] = float(np.isfinite(ratios).sum())
    return out


def merge_sketches(parts: Sequence[dict[str, float]]) -> dict[str, float]:
    """One sketch from several learners' (each a dict as ``ratio_sketch`` returns; empty ones skipped)."""
    parts = [p for p in parts if p.get(f"{SKETCH}count")]
    if len(parts) <= 1:
        return dict(parts[0]) if parts else {}
    values = np.array([[p[f"{SKETCH}q{level:03d}"] for level in SKETCH_LEVELS] for p in parts])  # (W, 101)
    counts = np.array([p[f"{SKETCH}count"] for p in parts])  # (W,)
    weights = np.repeat(counts / len(SKETCH_LEVELS), len(SKETCH_LEVELS))
    merged = _weighted_quantiles(values.ravel(), weights, SKETCH_LEVELS)
    out = {f"{SKETCH}q{level:03d}": v for level, v in zip(SKETCH_LEVELS, merged, strict=True)}
    out[f"{SKETCH}count"] = float(counts.sum())
    return out


def _weighted_quantiles(values: np.ndarray, weights: np.ndarray, levels: Sequence[int]) -> list[float]:
    """Quantiles of weighted points: each point sits at the middle of its share of the cumulative weight."""
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    cum = np.cumsum(w)
    centre = (cum - w / 2) / cum[-1]
    return [float(x) for x in np.interp(np.asarray(levels) / 100.0, centre, v)]


def pop_ratio_sketch(metrics: dict[str, float]) -> list[float] | None:
    """Take the ratio sketch out of an update's metrics (it is no metric); its ``LEVELS`` quantiles."""
    sketch = {k: metrics.pop(k) for k in [k for k in metrics if k.startswith(SKETCH)]}
    if not sketch.get(f"{SKETCH}count"):
        return None
    return [sketch[f"{SKETCH}q{level:03d}"] for level in LEVELS]


def step_distributions(rollouts: Sequence[Any], batch: Sequence[Any], ratio: list[float] | None) -> dict:
    """{name: the ``LEVELS`` quantiles} of a step (see the module docstring); a quantity without values
    (no trained batch, no entropies yet) is left out. ``rollouts``/``batch``: dapo.loop.batching.Rollout."""
    out: dict[str, list[float] | None] = {
        "reward": quantiles(np.fromiter((r.reward for r in rollouts), dtype=np.float64)),
        "length": quantiles(np.fromiter((len(r.response_ids) for r in rollouts), dtype=np.float64)),
        "advantage": quantiles(np.fromiter((r.advantage for r in batch), dtype=np.float64)),
        "entropy": quantiles(
            np.fromiter(chain.from_iterable(r.entropy or () for r in batch), dtype=np.float64)
        ),
        "ratio": ratio,
    }
    return {name: values for name, values in out.items() if values is not None}
