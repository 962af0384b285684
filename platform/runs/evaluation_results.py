"""An evaluation run's results: a table per dataset, and evaluations side by side.

An evaluation reports one step 0 of ``val/<source>/<var>/<metric>`` and ``val/<var>/<metric>`` names
(dapo.eval.metrics): the source is the file's stem when several files were evaluated, else the file's
``data_source`` values. Here each source gets the catalog dataset it came from (the run's record of what
it read, ``Run.data_files``), the numbers a reader looks for (mean@n and std@n of acc and score; pass@k,
maj@k, best@k and worst@k of acc for each k), and counts of problems, samples and correct answers read
from the stored validation samples.

Samples do not store their source: a file's problems are contiguous in the samples' group order and
their ``problem_index`` starts at 0 in each file (dapo.data.problems), so the groups split into one
segment per file. A file that reports several sources (a file split by its ``data_source``) gets its
counts on the file, not on each source.

Pages: /runs/<id>/evaluation/ and /runs/evaluations/compare/?runs=<id>,<id>; API: GET
/api/runs/<id>/evaluation/.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db.models import Count, Max, Min, Q

from runs.models import MetricPoint, Run, Sample

VARS = ("acc", "score", "reward", "response_length")
NAME = re.compile(r"val/(?:(?P<source>[^/]+)/)?(?P<var>acc|score|reward|response_length)/(?P<metric>.+)")
AT_K = re.compile(r"(?P<kind>pass|maj|best|worst)@(?P<k>\d+)(?:/(?P<stat>mean|std))?")
OVERALL = ""
"""The source key of the metrics over every prompt (``val/acc/mean@n``)."""


@dataclass
class SourceResult:
    """One dataset's (or one data source's) numbers."""

    label: str
    """The source as the metric names spell it ("" overall)."""
    dataset: str
    """The catalog dataset's name and version, or the file's stem."""
    file: str = ""
    n: int | None = None
    summary: dict[str, float | None] = field(default_factory=dict)
    """acc/mean, acc/std, score/mean, score/std, response_length/mean."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    """One per k: {"k", "pass", "maj", "maj_std", "best", "best_std", "worst", "worst_std"} (acc)."""
    counts: dict[str, int] | None = None
    """{"problems", "samples", "correct"}, or None when the samples cannot tell this source apart."""
    groups: tuple[int, int] | None = None
    """First and last group (problem) of its samples, for the links into the inspector."""

    @property
    def metric_prefix(self) -> str:
        return f"val/{self.label}/" if self.label else "val/"

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.label or None,
            "dataset": self.dataset,
            "file": self.file or None,
            "metric_prefix": self.metric_prefix,
            "n": self.n,
            **{key.replace("/", "_"): value for key, value in self.summary.items()},
            "k": self.rows,
            "counts": self.counts,
            "groups": list(self.groups) if self.groups else None,
        }


def latest_val_metrics(run: Run) -> dict[str, float | None]:
    """Every ``val/...`` metric at the run's last step that has them (an evaluation's step 0)."""
    points = MetricPoint.objects.filter(run=run, name__startswith="val/")
    last = points.aggregate(step=Max("step"))["step"]
    if last is None:
        return {}
    return dict(points.filter(step=last).values_list("name", "value"))


def results(run: Run) -> list[SourceResult]:
    """The run's sources (the overall result first, then in file order), each with its numbers."""
    parsed: dict[str, dict[str, dict[str, float | None]]] = {}
    for name, value in latest_val_metrics(run).items():
        m = NAME.fullmatch(name)
        if m:
            parsed.setdefault(m["source"] or OVERALL, {}).setdefault(m["var"], {})[m["metric"]] = value
    if not parsed:
        return []
    files = validation_files(run)
    segments = file_segments(run, len(files))
    out = []
    order = {label: i for i, label in enumerate(_file_order(list(parsed), files))}
    shared = {i for i in range(len(files)) if [_file_of(s, files) for s in parsed if s].count(i) > 1}
    for label in sorted(parsed, key=lambda s: (s != OVERALL, order.get(s, len(order)), s)):
        out.append(_result(label, parsed[label], files, segments, shared))
    return out


def validation_files(run: Run) -> list[tuple[str, str]]:
    """(path, name) of each file the run validated on, in order; the name is the catalog dataset's
    (with its version) where the run's record knows it, else the file's stem."""
    data = (run.config or {}).get("data") or {}
    paths = [p for p in [data.get("val_path"), *(data.get("val_paths") or [])] if isinstance(p, str) and p]
    known: dict[str, str] = {}
    for entry in run.data_files or []:
        dataset = entry.get("dataset") if isinstance(entry, dict) else None
        if isinstance(dataset, dict) and dataset.get("name"):
            version = f" v{dataset['version']}" if dataset.get("version") else ""
            known.setdefault(str(entry.get("path")), f"{dataset['name']}{version}")
    return [(p, known.get(p, Path(p).stem)) for p in paths]


def file_segments(run: Run, n_files: int) -> list[dict[str, int]]:
    """The validation samples of the run's last validated step cut into one segment per file: a file
    starts at each group whose problem index is 0. [] when the cut does not give ``n_files`` segments."""
    samples = Sample.objects.filter(run=run, split="val")
    last = samples.aggregate(step=Max("step"))["step"]
    if last is None or n_files == 0:
        return []
    groups = list(
        samples.filter(step=last)
        .values("group")
        .annotate(problem=Min("problem_index"), samples=Count("id"), correct=Count("id", filter=Q(acc=True)))
        .order_by("group")
    )
    segments: list[dict[str, int]] = []
    for g in groups:
        if g["problem"] == 0 or not segments:
            segments.append(
                {"first": g["group"], "last": g["group"], "problems": 0, "samples": 0, "correct": 0}
            )
        s = segments[-1]
        s["last"] = g["group"]
        s["problems"] += 1
        s["samples"] += g["samples"]
        s["correct"] += int(g["correct"] or 0)
    return segments if len(segments) == n_files else []


def _file_of(label: str, files: list[tuple[str, str]]) -> int | None:
    """Which file reported this source: the only one, or the one whose stem the label is (or starts)."""
    if len(files) == 1:
        return 0
    for i, (path, _) in enumerate(files):
        stem = Path(path).stem
        if label == stem or label.startswith(f"{stem}-"):
            return i
    return None


def _file_order(labels: list[str], files: list[tuple[str, str]]) -> list[str]:
    return sorted(labels, key=lambda s: (lambda i: len(files) if i is None else i)(_file_of(s, files)))


def _result(
    label: str,
    metrics: dict[str, dict[str, float | None]],
    files: list[tuple[str, str]],
    segments: list[dict[str, int]],
    shared: set[int],
) -> SourceResult:
    """``shared``: the files that reported several sources (no counts per source)."""
    acc = metrics.get("acc", {})
    n = next((int(k[5:]) for k in acc if k.startswith("mean@") and k[5:].isdigit()), None)
    summary = {
        f"{var}/{stat}": metrics.get(var, {}).get(f"{stat}@{n}")
        for var in ("acc", "score")
        for stat in ("mean", "std")
    }
    summary["response_length/mean"] = metrics.get("response_length", {}).get("mean")
    rows: dict[int, dict[str, Any]] = {}
    for name, value in acc.items():
        m = AT_K.fullmatch(name)
        if m is None:
            continue
        row = rows.setdefault(int(m["k"]), {"k": int(m["k"])})
        key = m["kind"] if m["stat"] in (None, "mean") else f"{m['kind']}_std"
        row[key] = value
    result = SourceResult(label, "every dataset", n=n, summary=summary, rows=[rows[k] for k in sorted(rows)])
    if label == OVERALL:
        if segments:
            result.counts = {key: sum(s[key] for s in segments) for key in ("problems", "samples", "correct")}
            result.groups = (segments[0]["first"], segments[-1]["last"])
        return result
    index = _file_of(label, files)
    if index is None:
        result.dataset = label
        return result
    path, name = files[index]
    result.file, result.dataset = path, name
    if index in shared:  # one file split by its data_source column: "<dataset> · <data_source>"
        source = label.removeprefix(Path(path).stem + "-") if len(files) > 1 else label
        result.dataset = f"{name} · {source}"
    elif segments:
        s = segments[index]
        result.counts = {key: s[key] for key in ("problems", "samples", "correct")}
        result.groups = (s["first"], s["last"])
    return result


def evaluation_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """Evaluations side by side: one entry per source (matched by its label), each with the rows of
    metrics and the value of each run (None where a run lacks it) and its difference to the first run."""
    per_run = [{r.label: r for r in results(run)} for run in runs]
    labels: list[str] = []
    for found in per_run:
        labels += [label for label in found if label not in labels]
    out = []
    for label in labels:
        entries = [found.get(label) for found in per_run]
        named = next(e for e in entries if e is not None)
        lines = []
        for key, title in _lines(entries):
            values = [_value(e, key) for e in entries]
            base = values[0]
            lines.append(
                {
                    "metric": title,
                    "values": [
                        {"value": v, "delta": None if i == 0 or v is None or base is None else v - base}
                        for i, v in enumerate(values)
                    ],
                }
            )
        out.append({"source": label, "dataset": named.dataset, "prefix": named.metric_prefix, "lines": lines})
    return out


def _lines(entries: list[SourceResult | None]) -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []
    for e in entries:
        if e is None:
            continue
        for key in ("acc/mean", "acc/std", "score/mean"):
            title = f"{key.split('/')[0]} {key.split('/')[1]}@{e.n}"
            if (key, title) not in lines:
                lines.append((key, title))
    ks = sorted({row["k"] for e in entries if e is not None for row in e.rows})
    for kind in ("pass", "maj", "best", "worst"):
        lines += [(f"{kind}@{k}", f"{kind}@{k}") for k in ks]
    return lines


def _value(entry: SourceResult | None, key: str) -> float | None:
    if entry is None:
        return None
    if "/" in key:
        return entry.summary.get(key)
    kind, _, k = key.partition("@")
    row = next((r for r in entry.rows if r["k"] == int(k)), None)
    return row.get(kind) if row else None
