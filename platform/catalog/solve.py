"""Each problem's solve rate in the runs that used a dataset: the mean ``acc`` of their stored samples.

A run used a split of the dataset when it is visible to the user, names the dataset (``Run.dataset``) or
names none but was configured with the dataset's file, and its config reads that split from the
dataset's file: a sample's ``problem_index`` only means this dataset's problem in such a run. Train
samples count towards the train split, validation samples towards the validation split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import (
    Case,
    Count,
    F,
    FloatField,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast
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
    candidates = Run.objects.visible_to(user).filter(
        Q(dataset=dataset) | Q(dataset__isnull=True, config__data__train_path=dataset.path)
    )
    used: dict[str, list[Run]] = {"train": [], "val": []}
    for run in candidates.only("id", "name", "status", "config", "dataset_id").order_by("-id"):
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


def with_solve_rate(rows: QuerySet, run_ids: list[int]) -> QuerySet:
    """Annotate DatasetRow rows with ``solve_rate`` (null where no run sampled the problem), to sort and
    filter by it in the database."""
    samples = (
        Sample.objects.filter(run_id__in=run_ids, split=OuterRef("split"), problem_index=OuterRef("index"))
        .order_by()
        .values("problem_index")
        .annotate(rate=Cast(_CORRECT, FloatField()) / Cast(Count("id"), FloatField()))
        .values("rate")
    )
    return rows.annotate(solve_rate=Subquery(samples, output_field=FloatField()))


SOLVED_FILTERS = {
    "never": ("never solved (0%)", Q(solve_rate=0.0)),
    "always": ("always solved (100%)", Q(solve_rate=1.0)),
    "mixed": ("mixed (learnable)", Q(solve_rate__gt=0.0, solve_rate__lt=1.0)),
    "unsampled": ("not sampled yet", Q(solve_rate__isnull=True)),
}
"""Filters on the solve rate: in DAPO a group all right or all wrong gives no gradient (dynamic sampling
drops it), so the mixed problems are the ones a run learns from."""


def order_by_rate(rows: QuerySet, descending: bool) -> QuerySet:
    rate = F("solve_rate")
    return rows.order_by(rate.desc(nulls_last=True) if descending else rate.asc(nulls_last=True), "index")


def _same_file(a: str, b: str) -> bool:
    if not a or not b or "\x00" in a or "\x00" in b:
        return False
    return a == b or resolve(a) == resolve(b)
