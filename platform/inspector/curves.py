"""The inspector's way between curves and samples: the run's key curves drawn beside the samples (mean
reward, accuracy, response length; train and validation), and the step a click on any curve lands on.

A chart point is a step where a metric was logged; samples exist only at some steps (validation every N
steps, a resumed run's gap). ``nearest_step`` picks the step with samples closest to the one clicked, so a
click always lands on samples, and the page says when it moved.
"""

from __future__ import annotations

import bisect
from typing import Any

from runs.models import Run
from runs.series import PAGE_MAX_POINTS, metric_series

DEFAULT_VAL_N = 4
"""validation.n_samples when the run's stored config lacks it (ValidationConfig's default)."""


def key_curve_specs(run: Run) -> list[dict[str, Any]]:
    """The charts: a title, and for each split the metric drawn (validation's at the run's n)."""
    block = run.config.get("validation") if isinstance(run.config, dict) else None
    n = block.get("n_samples", DEFAULT_VAL_N) if isinstance(block, dict) else DEFAULT_VAL_N
    return [
        {"title": "Mean reward", "train": "critic/score/mean", "val": f"val/reward/mean@{n}"},
        {"title": "Accuracy", "train": "train/acc/mean", "val": f"val/acc/mean@{n}"},
        {"title": "Response length", "train": "response_length/mean", "val": "val/response_length/mean"},
    ]


def key_curves(run: Run) -> list[dict[str, Any]]:
    """Each chart with its curves: {"title", "metrics": {split: name}, "series": [{"split", "metric",
    "steps", "values"}]} (a split whose metric was never logged has no series yet), at most PAGE_MAX_POINTS
    points a curve."""
    specs = key_curve_specs(run)
    names = [spec[split] for spec in specs for split in ("train", "val")]
    data = metric_series(run, names=names, max_points=PAGE_MAX_POINTS)
    return [
        {
            "title": spec["title"],
            "metrics": {"train": spec["train"], "val": spec["val"]},
            "series": [
                {"split": split, "metric": spec[split], **data[spec[split]]}
                for split in ("train", "val")
                if spec[split] in data
            ],
        }
        for spec in specs
    ]


def nearest_step(steps: list[int], step: int) -> int | None:
    """The step of ``steps`` (ascending) closest to ``step``; a tie goes to the earlier one; None if none."""
    if not steps:
        return None
    i = bisect.bisect_left(steps, step)
    if i < len(steps) and steps[i] == step:
        return step
    candidates = [
        s for s in (steps[i - 1] if i else None, steps[i] if i < len(steps) else None) if s is not None
    ]
    return min(candidates, key=lambda s: (abs(s - step), s))
