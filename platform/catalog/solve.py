"""Each problem's solve rate in the runs that used a dataset: the mean ``acc`` of their stored samples.

A run used a split of the dataset when it is visible to the user, names the dataset (``Run.dataset``) or
names none but was configured with the dataset's file, and its config reads that split from the
dataset's file: a sample's ``problem_index`` only means this dataset's problem in such a run. Train
samples count towards the train split, validation samples towards the validation split.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache
from django.db.models import Case, Count, Max, Min, Q, Sum, Value, When
from runs import access
from runs.models import Run, Sample

from catalog.models import Dataset
from catalog.paths import resolve

_CORRECT = Sum(Case(When(acc=True, then=Value(1)), default=Value(0)))


@dataclass(frozen=True)
class Rate:
    correct: int
    samples: int
    runs: int = 1

    @property
    def rate(self) -> float:
        return self.correct / self.samples if self.samples else 0.0

    @property
    def percent(self) -> int:
        """The rate in whole percent, halves rounded up (5 of 8 is 63%)."""
        return (200 * self.correct + self.samples) // (2 * self.samples) if self.samples else 0


def runs_using(dataset: Dataset, user: Any) -> dict[str, list[Run]]:
    """{"train": runs, "val": runs} of the runs this user can see that read that split from the dataset."""
    files = {"train": dataset.path, "val": dataset.val_path}
    candidates = access.visible_runs(user).filter(
        Q(dataset=dataset) | Q(dataset__isnull=True, config__data__train_path=dataset.path)
    )
    used: dict[str, list[Run]] = {"train": [], "val": []}
    for run in candidates.only("id", "name", "status", "step", "config", "dataset_id").order_by("-id"):
        data = (run.config or {}).get("data", {})
        for split, key in (("train", "train_path"), ("val", "val_path")):
            if files[split] and _same_file(data.get(key) or "", files[split]):
                used[split].append(run)
    return used


def rates_for(run_ids: list[int], split: str, indices: list[int]) -> dict[int, Rate]:
    """{problem index: Rate} over the samples of ``run_ids`` for the given problems of one split."""
    if not run_ids or not indices:
        return {}
    rows = (
        Sample.objects.filter(run_id__in=run_ids, split=split, problem_index__in=indices)
        .values("problem_index")
        .annotate(correct=_CORRECT, samples=Count("id"), runs=Count("run_id", distinct=True))
        .order_by()
    )
    return {r["problem_index"]: Rate(r["correct"], r["samples"], r["runs"]) for r in rows}


def rates_by_run(runs: list[Run], split: str, index: int) -> list[dict[str, Any]]:
    """One problem's samples in each run that has some: correct, samples, first and last step."""
    names = {run.pk: run for run in runs}
    rows = (
        Sample.objects.filter(run_id__in=list(names), split=split, problem_index=index)
        .values("run_id")
        .annotate(correct=_CORRECT, samples=Count("id"), first=Min("step"), last=Max("step"))
        .order_by("-run_id")
    )
    return [
        {**r, "run": names[r["run_id"]], "percent": Rate(r["correct"], r["samples"]).percent}
        for r in rows
        if r["run_id"] in names
    ]


def rate_map(runs: list[Run], split: str) -> dict[int, tuple[int, int]]:
    """{problem index: (correct, samples)} of every problem the runs sampled in the split: one aggregate
    over their samples, cached until one of the runs records a step (its ``step`` is in the key)."""
    if not runs:
        return {}
    stamp = ",".join(f"{r.pk}.{r.step}.{r.status}" for r in sorted(runs, key=lambda r: r.pk))
    key = f"dapo-rates:{split}:{hashlib.sha1(stamp.encode()).hexdigest()}"
    cached = cache.get(key)
    if cached is None:
        rows = (
            Sample.objects.filter(run_id__in=[r.pk for r in runs], split=split)
            .values("problem_index")
            .annotate(correct=_CORRECT, samples=Count("id"))
            .order_by()
            .values_list("problem_index", "correct", "samples")
        )
        cached = {index: (correct, samples) for index, correct, samples in rows}
        cache.set(key, cached, timeout=3600)
    return cached


def _never(r: tuple[int, int] | None) -> bool:
    return r is not None and r[0] == 0


def _always(r: tuple[int, int] | None) -> bool:
    return r is not None and r[0] == r[1]


def _mixed(r: tuple[int, int] | None) -> bool:
    return r is not None and 0 < r[0] < r[1]


def _unsampled(r: tuple[int, int] | None) -> bool:
    return r is None


SOLVED_FILTERS: dict[str, tuple[str, Callable[[tuple[int, int] | None], bool]]] = {
    "never": ("never solved (0%)", _never),
    "always": ("always solved (100%)", _always),
    "mixed": ("mixed (learnable)", _mixed),
    "unsampled": ("not sampled yet", _unsampled),
}
"""Filters on the solve rate: in DAPO a group all right or all wrong gives no gradient (dynamic sampling
drops it), so the mixed problems are the ones a run learns from."""


def by_rate(indices: list[int], rates: dict[int, tuple[int, int]], *, solved: str, sort: str) -> list[int]:
    """Problem indices kept by the ``solved`` filter, in ``sort`` order ("rate", "-rate" or as given);
    problems no run sampled come last either way."""
    if solved:
        keep = SOLVED_FILTERS[solved][1]
        indices = [i for i in indices if keep(rates.get(i))]
    if sort in ("rate", "-rate"):
        sign = -1 if sort == "-rate" else 1
        sampled = [i for i in indices if i in rates]
        sampled.sort(key=lambda i: (sign * rates[i][0] / rates[i][1], i))
        indices = sampled + [i for i in indices if i not in rates]
    return indices


def _same_file(a: str, b: str) -> bool:
    if not a or not b or "\x00" in a or "\x00" in b:
        return False
    return a == b or resolve(a) == resolve(b)
