"""A problem's timeline: its pass rate per step in one run, and in the other runs the user may see that
trained or validated on the same problems (the same data file, or the same catalog dataset).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Avg, Count, Q
from runs.models import Run, Sample

MAX_OTHER_RUNS = 50


def _data_path(config: Any, split: str) -> str:
    data = config.get("data") if isinstance(config, dict) else None
    path = data.get("train_path" if split == "train" else "val_path") if isinstance(data, dict) else None
    return path if isinstance(path, str) else ""


def _same_problem_splits(run: Run, other: Run, split: str, path: str) -> list[str]:
    """The splits of ``other`` whose problem i is problem i of ``run``'s split: same data file, or the
    same catalog dataset's same split."""
    out = [s for s in ("train", "val") if path and _data_path(other.config, s) == path]
    if run.dataset_id and other.dataset_id == run.dataset_id and split not in out:
        out.append(split)
    return out


def problem_timeline(run: Run, user: Any, split: str, problem: int) -> dict[str, Any]:
    """Pass rate (mean acc) per step of one problem in this run and in the other visible runs that used
    the same data (``data.<split>_path`` or catalog dataset): one grouped query on index sample_problem."""
    path = _data_path(run.config, split)
    same = Q(config__data__train_path=path) | Q(config__data__val_path=path) if path else Q(pk__in=[])
    if run.dataset_id:
        same |= Q(dataset_id=run.dataset_id)
    visible = Run.objects.visible_to(user).filter(same).exclude(pk=run.pk)
    others = list(
        visible.only("id", "name", "config", "dataset_id").order_by("-created_at")[: MAX_OTHER_RUNS + 1]
    )
    runs = [run, *others[:MAX_OTHER_RUNS]]
    pairs = [(r, s) for r in runs for s in _same_problem_splits(run, r, split, path)]
    where = Q(pk__in=[])
    for s in ("train", "val"):
        ids = [r.pk for r, rs in pairs if rs == s]
        if ids:
            where |= Q(run_id__in=ids, split=s)
    rows = (
        Sample.objects.filter(where, problem_index=problem)
        .values("run_id", "split", "step")
        .annotate(n=Count("id"), correct=Count("id", filter=Q(acc=True)), mean_reward=Avg("reward"))
        .order_by("run_id", "split", "step")
    )
    series: dict[tuple[int, str], dict[str, Any]] = {}
    names = {r.pk: r.name for r in runs}
    for row in rows:
        key = (row["run_id"], row["split"])
        entry = series.get(key)
        if entry is None:
            entry = series[key] = {
                "run": key[0],
                "name": names[key[0]],
                "split": key[1],
                "this": key[0] == run.pk,
            }
            entry.update({name: [] for name in ("steps", "rates", "n", "correct", "mean_reward")})
        entry["steps"].append(row["step"])
        entry["rates"].append(row["correct"] / row["n"] if row["n"] else None)
        for name in ("n", "correct", "mean_reward"):
            entry[name].append(row[name])
    ordered = sorted(series.values(), key=lambda e: (not e["this"], e["split"] != split, -e["run"]))
    return {"series": ordered, "more_runs": len(others) > MAX_OTHER_RUNS, "path": path}
