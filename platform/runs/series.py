"""Reading a run's curves and newest samples for pages, the API and websocket snapshots."""

from __future__ import annotations

import json
from typing import Any

from django.db import connection, models

from runs.models import HardwareSample, MetricPoint, Run, Sample, StepDistribution
from runs.run_state import run_state

PAGE_MAX_POINTS = 500
"""Points per metric a page or a snapshot starts with; live steps extend the curves at full resolution."""
HARDWARE_MAX_SAMPLES = 1500
"""Hardware samples per worker a page or a snapshot starts with (live samples follow at full rate)."""
DISTRIBUTION_MAX_STEPS = 300
"""Steps per distribution a page or a snapshot starts with (a heatmap column each)."""
LIVE_SAMPLES = 24
"""Samples of the newest step shown on the run page and carried by a live event."""


def metric_series(
    run: Run,
    names: list[str] | None = None,
    min_step: int | None = None,
    max_step: int | None = None,
    max_points: int | None = None,
) -> dict[str, dict[str, list[Any]]]:
    """{name: {"steps": [...], "values": [...]}} in step order. With ``max_points``, a metric with more
    points keeps exactly ``max_points`` of them, evenly spaced by rank, its first and last among them (one
    point: the last). The database thins, one index range per metric (the covering index metric_curve), so
    a long run never loads every point into Python."""
    where, params = _filters(run, names, min_step, max_step)
    select = f"SELECT name, step, value FROM {MetricPoint._meta.db_table} WHERE {' AND '.join(where)}"
    if max_points is None:
        parts = [(select, params)]
    else:
        parts = _thinned_parts(select, where, params, max(1, max_points))
    out: dict[str, dict[str, list[Any]]] = {}
    with connection.cursor() as cursor:
        for i in range(0, len(parts), 100):  # SQLite allows 500 terms in a compound SELECT
            chunk = parts[i : i + 100]
            cursor.execute(" UNION ALL ".join(sql for sql, _ in chunk), [p for _, ps in chunk for p in ps])
            for name, step, value in cursor.fetchall():
                entry = out.get(name) or out.setdefault(name, {"steps": [], "values": []})
                entry["steps"].append(step)
                entry["values"].append(value)
    for entry in out.values():  # UNION ALL promises no order: sort each curve by step
        if any(a > b for a, b in zip(entry["steps"], entry["steps"][1:], strict=False)):
            pairs = sorted(zip(entry["steps"], entry["values"], strict=True))
            entry["steps"], entry["values"] = [s for s, _ in pairs], [v for _, v in pairs]
    return out


def _filters(
    run: Run, names: list[str] | None, min_step: int | None, max_step: int | None
) -> tuple[list[str], list[Any]]:
    where: list[str] = ["run_id = %s"]
    params: list[Any] = [run.pk]
    if names:
        where.append(f"name IN ({', '.join(['%s'] * len(names))})")
        params.extend(names)
    if min_step is not None:
        where.append("step >= %s")
        params.append(min_step)
    if max_step is not None:
        where.append("step <= %s")
        params.append(max_step)
    return where, params


def _thinned_parts(
    select: str, where: list[str], params: list[Any], max_points: int
) -> list[tuple[str, list]]:
    """One SELECT per metric that needs thinning (its first and last step, and the multiples of its
    stride between them), and one for all the metrics that fit whole."""
    table = MetricPoint._meta.db_table
    stats_sql = f"SELECT name, COUNT(*), MIN(step), MAX(step) FROM {table} WHERE {' AND '.join(where)}"
    with connection.cursor() as cursor:
        cursor.execute(stats_sql + " GROUP BY name", params)
        stats = cursor.fetchall()
    whole = [name for name, count, _, _ in stats if count <= max_points]
    parts = [(f"{select} AND name IN ({', '.join(['%s'] * len(whole))})", [*params, *whole])] if whole else []
    for name, count, first, last in stats:
        if count <= max_points:
            continue
        if max_points <= 2:
            ends = [last] if max_points == 1 else [first, last]
            parts.append(
                (
                    f"{select} AND name = %s AND step IN ({', '.join(['%s'] * len(ends))})",
                    [*params, name, *ends],
                )
            )
            continue
        # Ranks 0..count-1 fall into max_points - 1 equal buckets by rank * (max_points - 1) // (count - 1)
        # (integer division); the first rank of each bucket is kept: exactly max_points points, the first
        # and the last among them, evenly spaced (by step, when the steps have no gaps).
        ranked = select.replace("SELECT name, step, value", _RANKED, 1)
        sql = (
            f"SELECT name, step, value FROM ({ranked} AND name = %s) AS ranked WHERE rn = 0 "
            "OR (rn * %s) / %s <> ((rn - 1) * %s) / %s"
        )
        parts.append((sql, [*params, name, max_points - 1, count - 1, max_points - 1, count - 1]))
    return parts


_RANKED = "SELECT name, step, value, ROW_NUMBER() OVER (ORDER BY step) - 1 AS rn"


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


def distribution_series(
    run: Run, min_step: int | None = None, max_points: int | None = None
) -> dict[str, dict[str, list[Any]]]:
    """{name: {"steps": [...], "quantiles": [[21 values], ...]}} in step order (the quantities of
    dapo.loop.distributions); with ``max_points``, at most that many steps per quantity, evenly spaced, the
    last among them."""
    rows = StepDistribution.objects.filter(run=run)
    if min_step is not None:
        rows = rows.filter(step__gte=min_step)
    out: dict[str, dict[str, list[Any]]] = {}
    for name, step, quantiles in rows.order_by("name", "step").values_list("name", "step", "quantiles"):
        entry = out.setdefault(name, {"steps": [], "quantiles": []})
        entry["steps"].append(step)
        entry["quantiles"].append(quantiles)
    if max_points:
        for entry in out.values():
            count = len(entry["steps"])
            if count > max_points:
                keep = sorted({count - 1 - (i * (count - 1)) // (max_points - 1) for i in range(max_points)})
                entry["steps"] = [entry["steps"][i] for i in keep]
                entry["quantiles"] = [entry["quantiles"][i] for i in keep]
    return out


def hardware_series(run: Run, max_per_worker: int = HARDWARE_MAX_SAMPLES) -> list[dict[str, Any]]:
    """The run's hardware samples in time order, each worker's thinned to about ``max_per_worker`` (every
    k-th sample, the database counts and picks, so a long run never loads every row into Python)."""
    table = HardwareSample._meta.db_table
    counts = dict(
        HardwareSample.objects.filter(run=run).values_list("worker").annotate(n=models.Count("id")).order_by()
    )
    out: list[dict[str, Any]] = []
    for worker, count in counts.items():
        stride = max(1, -(-count // max_per_worker))
        sql = (
            f"SELECT time, data FROM (SELECT time, data, ROW_NUMBER() OVER (ORDER BY time, id) - 1 AS rn "
            f"FROM {table} WHERE run_id = %s AND worker = %s) AS ranked WHERE rn %% %s = 0 OR rn = %s"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [run.pk, worker, stride, count - 1])
            for time, data in cursor.fetchall():
                values = json.loads(data) if isinstance(data, str) else data
                out.append({"time": time, "worker": worker, "values": values})
    out.sort(key=lambda s: (s["time"], s["worker"]))
    return out


def snapshot(run: Run, after_step: int | None = None, *, hardware: bool = True) -> dict[str, Any]:
    """What a client needs to draw the run: its state, the curves and the per-step distributions (after
    ``after_step`` when catching up, else downsampled from the start), the hardware samples (thinned, all
    of them: they are keyed by time, not step; ``hardware`` False leaves them out) and the newest samples."""
    run.refresh_from_db()
    if after_step is None:
        metrics = metric_series(run, max_points=PAGE_MAX_POINTS)
        distributions = distribution_series(run, max_points=DISTRIBUTION_MAX_STEPS)
    else:
        metrics = metric_series(run, min_step=after_step + 1)
        distributions = distribution_series(run, min_step=after_step + 1)
    return {
        "run": run_state(run),
        "metrics": metrics,
        "distributions": distributions,
        **({"hardware": hardware_series(run)} if hardware else {}),
        "samples": newest_samples(run),
        "after_step": after_step,
    }


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
        **run_state(run),
        "owner": run.owner.get_username(),
        "preset": run.preset,
        "key_metrics": {
            **{k: latest.get(name) for k, name in KEY_METRICS.items()},
            "val_acc": val_acc(latest),
        },
        "sparkline": spark["values"] if spark else [],
        "latest_metrics": None,  # the list needs only the key metrics
    }
