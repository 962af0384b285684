"""Comparing runs: the compare page and its data, the config diff, and one validation problem side by side.
The metrics CSV (compare.metrics_csv) picks its runs and metrics here too; ablation ladders: compare.ladder.

GET  /runs/compare/?ids=1,2,3 | ?group=NAME   the page (curves of the default metrics embedded)
     (?runs=1,2,3 is another name for ?ids=, on every view here)
GET  /runs/compare/data/?ids=...&metrics=a,b   curves of any metric set, every run in one answer
GET  /runs/compare/validation/?ids=...&step=&problem=   one validation problem's samples in each run
GET  /runs/compare/groups/                     the user's run groups (for the runs list)
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from core.params import DB_ID_MAX, INT32_MAX, BadInteger, int_param
from django.db import connection
from django.db.models import Count, Max
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET
from runs import access
from runs.models import MetricPoint, Run, Sample
from runs.series import metric_series
from runs.step_values import distinct_ascending

from compare.config_rows import diff_rows
from dapo.runconfig import flatten

MAX_RUNS = 30
MAX_METRICS = 40
MAX_POINTS = 2000
"""Points per curve sent to the browser (a curve with more is thinned evenly by step, in the database)."""
SAMPLE_CHARS = 4000
DEFAULT_METRICS = ["critic/score/mean", "response_length/mean", "actor/entropy"]
TOKEN_METRICS = ("train/response_length/mean", "train/num_prompts_generated")
"""Generated tokens of a step = mean response length over every sample generated (groups dropped by dynamic
sampling included) × prompts generated × rollout.n (dapo.loop.batching.step_metrics, dapo.algo.sampling)."""
SERIES_COLOURS = 10
"""Runs are drawn in the colours --series-1 .. --series-10 of app.css (charts.js reads them): a run's
``series`` number picks one; past ten runs the dash changes."""
DASHES = ["solid", "dash", "dot"]


class CompareError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


# ---- which runs -------------------------------------------------------------------------------------


def resolve_runs(request: HttpRequest) -> list[Run]:
    """The runs of ``?ids=1,2,3`` (in that order) or of ``?group=NAME`` (oldest first) that this user may
    see. A run that is missing or not theirs is a 404 (the same message either way); bad input a 400."""
    raw_ids, group = ids_param(request.GET), request.GET.get("group")
    if "\x00" in (raw_ids or "") + (group or ""):
        raise CompareError(400, "The query contains a NUL character.")
    visible = access.visible_runs(request.user).select_related("owner")
    if raw_ids is None and group:
        runs = list(visible.filter(group=group).order_by("created_at", "id")[: MAX_RUNS + 1])
        if not runs:
            raise CompareError(404, f"You have no runs in the group {group!r}.")
        if len(runs) > MAX_RUNS:
            raise CompareError(400, f"The group {group!r} has more than {MAX_RUNS} runs: pick some by ?ids=.")
        return runs
    ids = parse_ids(raw_ids)
    found = {run.pk: run for run in visible.filter(pk__in=[i for i in ids if 0 < i <= DB_ID_MAX])}
    for i in ids:
        if i not in found:
            raise CompareError(404, f"No run #{i} among your runs.")
    return [found[i] for i in ids]


def ids_param(query: Any) -> str | None:
    """``?ids=``, or its alias ``?runs=`` (the name a reader guesses from the page); ``ids`` wins."""
    raw = query.get("ids")
    return query.get("runs") if raw is None else raw


def parse_ids(raw: str | None) -> list[int]:
    if raw is None:
        raise CompareError(400, "Choose the runs to compare: /runs/compare/?ids=1,2,3 or ?group=NAME.")
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not parts:
        raise CompareError(400, "ids is empty: give run numbers separated by commas, e.g. ?ids=1,2,3.")
    if len(parts) > MAX_RUNS:
        raise CompareError(400, f"Compare at most {MAX_RUNS} runs at once (got {len(parts)}).")
    bad = [p for p in parts if not (p.isascii() and p.isdigit())]
    if bad:
        raise CompareError(400, f"ids must be run numbers separated by commas; {bad[0][:40]!r} is not one.")
    return list(dict.fromkeys(int(p) for p in parts))  # duplicates once, first order kept


def guarded(html: bool) -> Callable:
    """Turn a CompareError into a page (html) or {"detail": message} with its status."""

    def wrap(view: Callable) -> Callable:
        @functools.wraps(view)
        def inner(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                return view(request, *args, **kwargs)
            except CompareError as e:
                if html:
                    return render(request, "compare/compare.html", {"error": e.message}, status=e.status)
                return JsonResponse({"detail": e.message}, status=e.status)

        return inner

    return wrap


# ---- what the page needs -----------------------------------------------------------------------------


def run_info(run: Run, index: int) -> dict[str, Any]:
    config = run.config if isinstance(run.config, dict) else {}
    rest = {k: v for k, v in config.items() if k != "seed"}  # runs alike but for the seed share this key
    same_but_seed = hashlib.sha1(json.dumps(rest, sort_keys=True).encode()).hexdigest()[:12]
    return {
        "id": run.pk,
        "name": run.name,
        "url": reverse("runs:detail", args=[run.pk]),
        "preset": run.preset,
        "group": run.group,
        "seed": config.get("seed"),
        "config_key": same_but_seed,
        "status": run.status,
        "step": run.step,
        "total_steps": run.total_steps,
        "series": index % SERIES_COLOURS + 1,
        "dash": DASHES[(index // SERIES_COLOURS) % len(DASHES)],
    }


def metric_names(run: Run) -> list[str]:
    """The distinct metric names of a run, one probe of metric_curve each (a DISTINCT would read every
    point of the run)."""
    return distinct_ascending(MetricPoint, "name", run_id=run.pk)


def default_metrics(names: list[str], runs: list[Run]) -> list[str]:
    """Validation accuracy (every val/acc/mean@k), reward, response length and entropy, where present;
    before the runs logged anything, those they will log (their charts fill in live)."""
    if not names:
        ks = sorted(
            {
                (r.config.get("validation") or {}).get("n_samples", 4)
                for r in runs
                if isinstance(r.config, dict)
            }
        )
        return [*(f"val/acc/mean@{k}" for k in ks), *DEFAULT_METRICS]
    val = sorted(n for n in names if n.startswith("val/acc/mean@"))
    chosen = [n for n in [*val, *DEFAULT_METRICS] if n in names]
    return chosen or names[:4]


def curves(runs: list[Run], names: list[str], *, with_tokens: bool) -> dict[str, Any]:
    """{"metrics": {name: {run id: {"steps", "values"}}}, "clock": {run id: {"steps", "wall"}}, and with
    ``with_tokens`` "tokens": {run id: {"steps", "cum"}}}. Per run: one read of the whole metric set
    (series.metric_series, the covering index), one of its wall times and one of its token counts."""
    out: dict[str, Any] = {"metrics": {n: {} for n in names}, "clock": {}}
    if with_tokens:
        out["tokens"] = {}
    for run in runs:
        series = metric_series(run, names=names, max_points=MAX_POINTS) if names else {}  # no names: all
        for name, curve in series.items():
            out["metrics"][name][run.pk] = curve
        out["clock"][run.pk] = wall_clock(run, series)
        if with_tokens:
            out["tokens"][run.pk] = generated_tokens(run)
    return out


def wall_clock(run: Run, series: dict[str, dict[str, list]]) -> dict[str, list]:
    """Seconds since the run's first point at each step of ``series``. Every metric of a step shares its
    wall time, so the longest curve's points give nearly all (its rows only, by the metric_curve index);
    steps it lacks (a validation-only step) are read by the (run, step) index."""
    needed = sorted(set().union(*(curve["steps"] for curve in series.values()))) if series else []
    if not needed:
        return {"steps": [], "wall": []}
    table = MetricPoint._meta.db_table
    first = f"(SELECT wall_time FROM {table} WHERE run_id = %s ORDER BY step LIMIT 1)"
    longest = max(series, key=lambda name: len(series[name]["steps"]))
    wall: dict[int, float] = {}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT step, wall_time - {first} FROM {table} WHERE run_id = %s AND name = %s",
            [run.pk, run.pk, longest],
        )
        wall.update(cursor.fetchall())
        missing = [step for step in needed if step not in wall]
        for i in range(0, len(missing), 500):
            chunk = missing[i : i + 500]
            cursor.execute(
                f"SELECT step, MIN(wall_time) - {first} FROM {table} WHERE run_id = %s "
                f"AND step IN ({', '.join(['%s'] * len(chunk))}) GROUP BY step",
                [run.pk, run.pk, *chunk],
            )
            wall.update(cursor.fetchall())
    seconds = [wall.get(step) for step in needed]
    return {"steps": needed, "wall": [None if w is None else round(w, 3) for w in seconds]}


def generated_tokens(run: Run) -> dict[str, list]:
    """Cumulative generated tokens at each training step (see TOKEN_METRICS)."""
    series = metric_series(run, names=list(TOKEN_METRICS))
    if any(name not in series for name in TOKEN_METRICS):
        return {"steps": [], "cum": []}
    group_size = (run.config.get("rollout") or {}).get("n", 1) if isinstance(run.config, dict) else 1
    lengths = dict(zip(*series[TOKEN_METRICS[0]].values(), strict=True))
    prompts = dict(zip(*series[TOKEN_METRICS[1]].values(), strict=True))
    steps, cum, total = [], [], 0.0
    for step in sorted(lengths.keys() & prompts.keys()):
        total += (lengths[step] or 0.0) * (prompts[step] or 0.0) * group_size
        steps.append(step)
        cum.append(round(total))
    return {"steps": steps, "cum": cum}


def chosen_metrics(raw: str | None, names: list[str], runs: list[Run]) -> list[str]:
    if raw is None:
        return default_metrics(names, runs)
    wanted = [n.strip() for n in raw.replace("\x00", "").split(",") if n.strip()]
    return list(dict.fromkeys(wanted))[:MAX_METRICS]


def _query(request: HttpRequest) -> dict[str, str]:
    """The part of the query that names the runs, for the page's links."""
    ids = ids_param(request.GET)
    return {
        **({"ids": ids} if ids is not None else {}),
        **{k: request.GET[k] for k in ("group",) if k in request.GET},
    }


# ---- views -------------------------------------------------------------------------------------------


@require_GET
@guarded(html=True)
def compare_page(request: HttpRequest) -> HttpResponse:
    runs = resolve_runs(request)
    context = compare_context(runs, request.GET.get("metrics"), _query(request))
    context["group"] = request.GET.get("group")
    return render(
        request, "compare/compare.html", {**context, "data_json": script_json(context["page_data"])}
    )


def compare_context(
    runs: list[Run], metrics: str | list[str] | None, query: dict[str, str]
) -> dict[str, Any]:
    """What the compare page renders for ``runs`` (``page_data``: the JSON its script reads). ``metrics``:
    a comma-separated string or a list; None: the defaults. A saved comparison's page uses it too."""
    names = sorted(set().union(*(metric_names(run) for run in runs)))
    raw = ",".join(metrics) if isinstance(metrics, list) else metrics
    chosen = chosen_metrics(raw, names, runs)  # a name not logged yet: a chart that waits
    data = {
        "runs": [run_info(run, i) for i, run in enumerate(runs)],
        "names": names,
        "chosen": chosen,
        "curves": curves(runs, chosen, with_tokens=True),
        "query": query,
        "token_metrics": list(TOKEN_METRICS),
    }
    return {
        "runs": data["runs"],
        "diff": diff_rows(runs),
        "page_data": data,
        "n_names": len(names),
        "query": urlencode(query),
        "n_settings": len(flatten(runs[0].config)),
    }


def script_json(data: Any) -> str:
    """JSON safe inside <script> with json_script's escapes (<, >, & as \\u escapes), made by str.replace:
    json_script's str.translate takes a tenth of a second on the megabyte of curves of a big comparison."""
    text = json.dumps(data, separators=(",", ":"))
    return mark_safe(text.replace("&", "\\u0026").replace("<", "\\u003C").replace(">", "\\u003E"))


@require_GET
@guarded(html=False)
def compare_data(request: HttpRequest) -> HttpResponse:
    """Curves of ``metrics`` for every run in one answer, with the runs' progress (a page polls it while
    runs train); ``tokens=1`` adds the generated-token counts, ``names=1`` every metric name logged."""
    runs = resolve_runs(request)
    names = chosen_metrics(request.GET.get("metrics", ""), [], runs)
    if not names:
        raise CompareError(400, "metrics is empty: name the metrics, e.g. ?metrics=critic/score/mean.")
    body = curves(runs, names, with_tokens=request.GET.get("tokens") == "1")
    body["runs"] = [
        {"id": r.pk, "status": r.status, "step": r.step, "total_steps": r.total_steps} for r in runs
    ]
    if request.GET.get("names") == "1":
        body["names"] = sorted(set().union(*(metric_names(run) for run in runs)))
    return JsonResponse(body)


@require_GET
@guarded(html=False)
def compare_validation(request: HttpRequest) -> HttpResponse:
    """Validation steps of these runs; at ``step`` (default: the latest they share) the problems, and
    for ``problem`` (default: the first) each run's samples of it."""
    runs = resolve_runs(request)
    per_run = [set(val_steps(run)) for run in runs]
    steps = sorted(set().union(*per_run))
    shared = sorted(set.intersection(*per_run)) if per_run else []
    known = shared or steps
    latest = known[-1] if known else None  # None: no validation step yet
    step = _int_param(request, "step", default=latest)
    samples = Sample.objects.filter(run__in=runs, split="val", step=-1 if step is None else step)
    problems = sorted(set(samples.values_list("problem_index", flat=True)))
    problem = _int_param(request, "problem", default=problems[0] if problems else None)
    rows = (
        list(samples.filter(problem_index=problem).order_by("run_id", "sample_index"))
        if problems and problem is not None
        else []
    )
    first = rows[0] if rows else None
    return JsonResponse(
        {
            "steps": steps,
            "step": step,
            "problems": problems,
            "problem": problem,
            "prompt": first.prompt if first else "",
            "ground_truth": first.ground_truth if first else "",
            "samples": {
                run.pk: [s.summary(SAMPLE_CHARS) for s in rows if s.run_id == run.pk] for run in runs
            },
        }
    )


def val_steps(run: Run) -> list[int]:
    """Steps with validation samples, one probe of the unique index each."""
    return distinct_ascending(Sample, "step", run_id=run.pk, split="val")


def _int_param(request: HttpRequest, name: str, default: int | None) -> int | None:
    try:
        return int_param(request.GET, name, low=-INT32_MAX - 1, high=INT32_MAX, default=default)
    except BadInteger as e:
        raise CompareError(400, str(e)) from None


@require_GET
def compare_groups(request: HttpRequest) -> HttpResponse:
    """The user's run groups, newest first, with their runs' ids (the runs list links each to compare)."""
    runs = access.visible_runs(request.user).exclude(group="")
    groups = list(
        runs.values("group").annotate(n=Count("id"), newest=Max("created_at")).order_by("-newest")[:50]
    )
    members: dict[str, list[int]] = {}
    for pk, group in runs.filter(group__in=[g["group"] for g in groups]).values_list("pk", "group"):
        members.setdefault(group, []).append(pk)
    url = reverse("compare:compare")
    return JsonResponse(
        {
            "groups": [
                {
                    "name": g["group"],
                    "runs": g["n"],
                    "ids": sorted(members.get(g["group"], [])),
                    "url": f"{url}?{urlencode({'group': g['group']})}",
                }
                for g in groups
            ]
        }
    )
