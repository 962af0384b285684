"""Reading a run's curves and newest samples for pages, the API and websocket snapshots."""

from __future__ import annotations

from typing import Any

from runs.models import MetricPoint, Run, Sample

PAGE_MAX_POINTS = 1000
"""Points per metric a page or a snapshot starts with; live steps extend the curves at full resolution."""
LIVE_SAMPLES = 24
"""Samples of the newest step shown on the run page and carried by a live event."""


def downsample_indices(n: int, max_points: int | None) -> list[int]:
    """At most ``max_points`` indices of ``n`` points, evenly spread, always the first and the last."""
    if max_points is None or n <= max_points:
        return list(range(n))
    if max_points <= 1:
        return [n - 1]
    picked = {round(i * (n - 1) / (max_points - 1)) for i in range(max_points)}
    return sorted(picked)


def metric_series(
    run: Run,
    names: list[str] | None = None,
    min_step: int | None = None,
    max_step: int | None = None,
    max_points: int | None = None,
) -> dict[str, dict[str, list[Any]]]:
    """{name: {"steps": [...], "values": [...]}} in step order, each downsampled to ``max_points``."""
    qs = MetricPoint.objects.filter(run=run)
    if names:
        qs = qs.filter(name__in=names)
    if min_step is not None:
        qs = qs.filter(step__gte=min_step)
    if max_step is not None:
        qs = qs.filter(step__lte=max_step)
    raw: dict[str, tuple[list[int], list[float | None]]] = {}
    for name, step, value in qs.order_by("name", "step").values_list("name", "step", "value").iterator(2000):
        steps, values = raw.setdefault(name, ([], []))
        steps.append(step)
        values.append(value)
    out = {}
    for name, (steps, values) in raw.items():
        keep = downsample_indices(len(steps), max_points)
        if len(keep) == len(steps):
            out[name] = {"steps": steps, "values": values}
        else:
            out[name] = {"steps": [steps[i] for i in keep], "values": [values[i] for i in keep]}
    return out


def newest_samples(run: Run, limit: int = LIVE_SAMPLES) -> list[dict[str, Any]]:
    """Summaries of the newest step's training samples (validation ones when no training step yet)."""
    for split in ("train", "val"):
        last = (
            Sample.objects.filter(run=run, split=split).order_by("-step").values_list("step", flat=True)[:1]
        )
        if last:
            rows = Sample.objects.filter(run=run, split=split, step=last[0]).order_by("sample_index")[:limit]
            return [s.summary() for s in rows]
    return []


def snapshot(run: Run, after_step: int | None = None) -> dict[str, Any]:
    """What a client needs to draw the run: its state, the curves (after ``after_step`` when catching up,
    else downsampled from the start) and the newest samples."""
    run.refresh_from_db()
    if after_step is None:
        metrics = metric_series(run, max_points=PAGE_MAX_POINTS)
    else:
        metrics = metric_series(run, min_step=after_step + 1)
    return {"run": run.state(), "metrics": metrics, "samples": newest_samples(run), "after_step": after_step}


SPARK_METRIC = "critic/score/mean"
KEY_METRICS = {
    "reward": "critic/score/mean",
    "train_acc": "train/acc/mean",
    "entropy": "actor/entropy",
    "response_length": "response_length/mean",
}


def val_acc(latest: dict[str, Any]) -> float | None:
    """The run's validation accuracy (val/acc/mean@k, whatever k)."""
    for name, value in latest.items():
        if name.startswith("val/acc/mean@"):
            return value
    return None


def list_row(run: Run) -> dict[str, Any]:
    """A row of the runs list: state, key metrics and a sparkline of the reward."""
    latest = run.latest_metrics or {}
    spark = metric_series(run, names=[SPARK_METRIC], max_points=60).get(SPARK_METRIC)
    return {
        **run.state(),
        "owner": run.owner.get_username(),
        "preset": run.preset,
        "key_metrics": {
            **{k: latest.get(name) for k, name in KEY_METRICS.items()},
            "val_acc": val_acc(latest),
        },
        "sparkline": spark["values"] if spark else [],
        "latest_metrics": None,  # the list needs only the key metrics
    }
