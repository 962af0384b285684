"""The rollout inspector's views: a step's prompt groups (filter, sort, top-k), one sample in full with its
token view, a problem's pass rate across steps and runs, and the JSON the inspector page fetches.

Every list of samples comes from ``SampleFilter`` (inspector.sample_filter: the page, its JSON and the exports
alike). A list reads one step of one split, a range of the unique index (run, split, step, sample_index),
and never the token arrays or whole texts: only the sample opened in full loads those (inspector.sample_view).
A problem's timeline is inspector.timeline; the exports are inspector.exports.
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from typing import Any

from core.params import INT32_MAX
from django.db.models import Avg, BooleanField, Count, ExpressionWrapper, Max, Q, QuerySet
from django.db.models.functions import Length, Substr
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_GET
from runs.access import run_for
from runs.models import Run, Sample
from runs.step_values import distinct_ascending

from inspector import exports
from inspector.curves import key_curves, nearest_step
from inspector.discards import reason_badge, step_discards
from inspector.explainer import explain_tokens
from inspector.reward_breakdown import breakdown, part_choices, weights_by_name
from inspector.sample_filter import SORTS, BadQuery, NoSuchStep, SampleFilter, choice
from inspector.sample_view import clip_params, mark_answer, token_view
from inspector.timeline import problem_timeline

GROUPS_PER_PAGE = 10
SAMPLES_PER_PAGE = 50
PREVIEW_CHARS = 240
PROMPT_CHARS = 1500
ROW_FIELDS = [
    "id",
    "step",
    "split",
    "sample_index",
    "group",
    "problem_index",
    *Sample.SCORING_FIELDS,
    "reward_scores",
]


# ---- reads ----------------------------------------------------------------------------------------


def sample_steps(run: Run, split: str) -> list[int]:
    """The steps with samples in a split, ascending: one probe of the unique index per step, never a scan
    of the run's samples."""
    return distinct_ascending(Sample, "step", run_id=run.pk, split=split)


def _rows(qs: QuerySet[Sample]) -> list[dict[str, Any]]:
    """List rows: the short fields, a response preview, never the token arrays or whole texts."""
    has_tokens = ExpressionWrapper(Q(tokens__isnull=False), output_field=BooleanField())
    rows = qs.values(
        *ROW_FIELDS,
        preview=Substr("response", 1, PREVIEW_CHARS),
        chars=Length("response"),
        has_tokens=has_tokens,
    )
    return [{**row, "pred": row["pred"][:200], "ground_truth": row["ground_truth"][:200]} for row in rows]


def step_summary(run: Run, split: str, step: int) -> dict[str, Any]:
    return Sample.objects.filter(run=run, split=split, step=step).aggregate(
        samples=Count("id"),
        groups=Count("group", distinct=True),
        correct=Count("id", filter=Q(acc=True)),
        kept_groups=Count("group", distinct=True, filter=Q(kept=True)),
        truncated=Count("id", filter=Q(truncated=True)),
        with_tokens=Count("id", filter=Q(tokens__isnull=False)),
        mean_reward=Avg("reward"),
        mean_length=Avg("length"),
    )


def group_badge(n: int, correct: int, kept: bool, split: str) -> dict[str, str]:
    """all-correct / all-wrong / mixed from the group's stored samples, and whether dynamic sampling kept
    it (the stored flag: a filtered group is one it dropped; validation groups are never trained)."""
    kind = "all-correct" if correct == n else "all-wrong" if correct == 0 else "mixed"
    label = kind.replace("-", " ")
    if split == "train":
        label += " · kept" if kept else " · filtered"
    return {"kind": kind, "label": label, "kept": "kept" if kept else "filtered"}


Match = tuple[int, int, float]
"""(sample_index, group, sort value) of a matching sample."""


def _matches(f: SampleFilter, qs: QuerySet[Sample]) -> list[Match]:
    """The step's matching samples in rank order (the sort's, or the top/bottom-k's): one query, so the
    filter (a text search above all) runs once per request; ordering a step's few thousand keys is cheap."""
    field, desc = (f.rank_by, f.rank == "top") if f.rank else SORTS[f.sort]
    matches = list(qs.values_list("sample_index", "group", field))
    return sorted(matches, key=lambda m: (-m[2] if desc else m[2], m[0]))


def _page_rows(run: Run, f: SampleFilter, indexes: list[int]) -> list[dict[str, Any]]:
    """List rows of these samples of the step, in the order given (through the unique index)."""
    assert f.step is not None  # one step's page: samples_data answers "all steps" before this
    rows = _rows(Sample.objects.filter(run=run, split=f.split, step=f.step, sample_index__in=indexes))
    position = {index: i for i, index in enumerate(indexes)}
    return sorted(rows, key=lambda row: position[row["sample_index"]])


def _groups(run: Run, f: SampleFilter, matches: list[Match]) -> tuple[list[dict[str, Any]], int]:
    """One page of the step's groups that have a matching sample, a group ranked by its first matching
    sample in sort order; each with its stats over all its samples, and its matching samples."""
    assert f.step is not None  # one step's page: samples_data answers "all steps" before this
    order = list(dict.fromkeys(group for _, group, _ in matches))
    start = (f.page - 1) * GROUPS_PER_PAGE
    page = order[start : start + GROUPS_PER_PAGE]
    stats = (
        Sample.objects.filter(run=run, split=f.split, step=f.step, group__in=page)
        .values("group")
        .annotate(
            n=Count("id"),
            correct=Count("id", filter=Q(acc=True)),
            kept_n=Count("id", filter=Q(kept=True)),
            mean_reward=Avg("reward"),
            problem=Max("problem_index"),
            prompt_text=Max(Substr("prompt", 1, PROMPT_CHARS)),
            prompt_chars=Max(Length("prompt")),
            truth=Max("ground_truth"),
            reason=Max("discard_reason", filter=~Q(discard_reason="overlong")),
            overlong_n=Count("id", filter=Q(discard_reason="overlong")),
        )
        .order_by()
    )
    by_group: dict[int, dict[str, Any]] = {s["group"]: {**s, "samples": []} for s in stats}
    shown = set(page)
    for row in _page_rows(run, f, [index for index, group, _ in matches if group in shown]):
        by_group[row["group"]]["samples"].append(row)
    groups = []
    for g in page:
        s = by_group[g]
        badge = group_badge(s["n"], s["correct"], s["kept_n"] > 0, f.split)
        why = reason_badge(s["reason"])
        groups.append({**s, "badge": badge, "reason_badge": why, "truth": s["truth"][:500]})
    return groups, len(order)


def page_data(run: Run, params: QueryDict) -> dict[str, Any]:
    """Everything the inspector shows for these query parameters (the page embeds it, its JS fetches it)."""
    split = choice(params, "split", ("train", "val"))
    steps = sample_steps(run, split)
    f = SampleFilter.from_query(params, default_step=steps[-1] if steps else None)
    f, snapped_from = _snap(f, steps, choice(params, "near", ("", "0", "1")) == "1")
    other = "val" if split == "train" else "train"
    data: dict[str, Any] = {
        "run": {"id": run.pk, "name": run.name, "status": run.status, "step": run.step},
        "split": split,
        "steps": steps,
        "other_split_has_samples": Sample.objects.filter(run=run, split=other).exists(),
        "filter": f.params(),
        "narrows": f.narrows,
        "view": "list" if f.rank else f.view,
        "page": f.page,
        "groups_per_page": GROUPS_PER_PAGE,
        "step": f.step,
        "snapped_from": snapped_from,
        "parts": part_choices(run),
        "reward_weights": weights_by_name(run),
        "discards": None,
    }
    if f.step is None:
        return {**data, "summary": None, "matching": 0, "pages": 0, "groups": [], "samples": []}
    i = bisect.bisect_left(steps, f.step)
    if i == len(steps) or steps[i] != f.step:
        span = f"steps with {split} samples: {steps[0]}–{steps[-1]}" if steps else f"no {split} samples yet"
        raise NoSuchStep(f"Step {f.step} has no {split} samples ({span}).")
    matches = _matches(f, f.queryset(run))
    data["summary"] = step_summary(run, split, f.step)
    data["discards"] = step_discards(run, split, f.step, data["summary"]["kept_groups"])
    data["matching"] = len(matches)
    if data["view"] == "groups":
        data["groups"], total = _groups(run, f, matches)
        data["samples"], data["pages"] = [], max(1, -(-total // GROUPS_PER_PAGE))
    else:
        size = f.k if f.rank else SAMPLES_PER_PAGE
        start = 0 if f.rank else (f.page - 1) * SAMPLES_PER_PAGE
        data["samples"] = _page_rows(run, f, [m[0] for m in matches[start : start + size]])
        data["groups"], data["pages"] = [], 1 if f.rank else max(1, -(-len(matches) // size))
    return data


def _snap(f: SampleFilter, steps: list[int], near: bool) -> tuple[SampleFilter, int | None]:
    """With ``near`` (a click on a curve), a step without samples becomes the nearest one with samples;
    returns the filter and the step asked for when it moved (else None)."""
    if not near or f.step is None:
        return f, None
    step = nearest_step(steps, f.step)
    if step is None or step == f.step:
        return f, None
    return replace(f, step=step, page=1), f.step


# ---- views --------------------------------------------------------------------------------------------


def _urls(run: Run) -> dict[str, str]:
    return {
        "page": reverse("inspector:samples", args=[run.pk]),
        "data": reverse("inspector:samples-data", args=[run.pk]),
        "steps": reverse("inspector:samples-steps", args=[run.pk]),
        "run": reverse("runs:detail", args=[run.pk]),
        "sample": reverse("inspector:sample", args=[run.pk, 0]).rsplit("0/", 1)[0],
        "problem": reverse("inspector:problem", args=[run.pk, 0]).rsplit("0/", 1)[0],
        "export": reverse("inspector:samples-export", args=[run.pk, "jsonl"]).rsplit(".jsonl", 1)[0],
    }


@require_GET
def samples_page(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_for(request, run_id)
    context: dict[str, Any] = {"run": run, "urls": _urls(run)}
    try:
        context["data"] = page_data(run, request.GET)
        context["curves"] = key_curves(run)
    except BadQuery as exc:
        return render(request, "inspector/samples.html", {**context, "error": str(exc)}, status=400)
    except NoSuchStep as exc:
        return render(request, "inspector/samples.html", {**context, "error": str(exc)}, status=404)
    return render(request, "inspector/samples.html", context)


@require_GET
def samples_data(request: HttpRequest, run_id: int) -> JsonResponse:
    run = run_for(request, run_id)
    try:
        return JsonResponse(page_data(run, request.GET))
    except BadQuery as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    except NoSuchStep as exc:
        return JsonResponse({"error": str(exc)}, status=404)


@require_GET
def samples_steps(request: HttpRequest, run_id: int) -> JsonResponse:
    run = run_for(request, run_id)
    try:
        split = choice(request.GET, "split", ("train", "val"))
    except BadQuery as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse(
        {"split": split, "steps": sample_steps(run, split), "run_step": run.step, "status": run.status}
    )


@require_GET
def samples_export(request: HttpRequest, run_id: int, fmt: str) -> HttpResponseBase:
    run = run_for(request, run_id)
    if fmt not in exports.FORMATS:
        raise Http404(f"No export format {fmt!r}: use one of {', '.join(exports.FORMATS)}.")
    try:
        if request.GET.get("step", "") == "":
            raise BadQuery("step: give a step number, or all")
        f = SampleFilter.from_query(request.GET, default_step=None, all_steps=True)
    except BadQuery as exc:
        return HttpResponse(f"Bad export request: {exc}\n", status=400, content_type="text/plain")
    steps = [f.step] if f.step is not None else sample_steps(run, f.split)
    return exports.export_response(request, run, f, steps, fmt)


@require_GET
def sample_page(request: HttpRequest, run_id: int, sample_pk: int) -> HttpResponse:
    run = run_for(request, run_id)
    sample = get_object_or_404(Sample, pk=sample_pk, run=run)
    same_step = Sample.objects.filter(run=run, split=sample.split, step=sample.step)
    before = same_step.filter(sample_index__lt=sample.sample_index).order_by("-sample_index")
    after = same_step.filter(sample_index__gt=sample.sample_index).order_by("sample_index")
    clip = clip_params(run)
    context = {
        "run": run,
        "sample": sample,
        "answer_parts": mark_answer(sample.response, sample.pred),
        "tokens": token_view(sample, clip),
        "clip": clip,
        "token_knob": _config_value(run, "logging", "token_data_samples_per_step"),
        "breakdown": breakdown(run, sample),
        "reason": reason_badge(sample.discard_reason),
        "explain": explain_tokens(run, sample, clip),
        "group_page": sample.group // GROUPS_PER_PAGE + 1,
        "previous": before.values_list("id", flat=True).first(),
        "next": after.values_list("id", flat=True).first(),
    }
    return render(request, "inspector/sample.html", context)


@require_GET
def problem_page(request: HttpRequest, run_id: int, problem_index: int) -> HttpResponse:
    run = run_for(request, run_id)
    context: dict[str, Any] = {"run": run, "problem_index": problem_index, "split": "train"}
    try:
        split = choice(request.GET, "split", ("train", "val"))
    except BadQuery as exc:
        return render(request, "inspector/problem.html", {**context, "error": str(exc)}, status=400)
    context["split"] = split
    samples = Sample.objects.filter(run=run, split=split, problem_index=min(problem_index, INT32_MAX))
    example = samples.only("prompt", "ground_truth").order_by("-step").first()
    if example is None or problem_index > INT32_MAX:
        error = f"Problem {problem_index} has no {split} samples in run #{run.pk}."
        return render(request, "inspector/problem.html", {**context, "error": error}, status=404)
    timeline = problem_timeline(run, request.user, split, problem_index)
    this = [s for s in timeline["series"] if s["this"]]
    table = [
        {"split": s["split"], "step": step, "n": s["n"][i], "correct": s["correct"][i], "rate": s["rates"][i]}
        for s in this
        for i, step in enumerate(s["steps"])
    ]
    others = [s for s in timeline["series"] if not s["this"]]
    context.update(
        example=example,
        timeline=timeline,
        table=sorted(table, key=lambda r: (r["step"], r["split"])),
        others=[_summary(s) for s in others],
        chart={"series": timeline["series"], "split": split},
    )
    return render(request, "inspector/problem.html", context)


def _config_value(run: Run, section: str, name: str) -> Any:
    """A value of the run's stored config ("?" where the config lacks it)."""
    block = run.config.get(section) if isinstance(run.config, dict) else None
    return block.get(name, "?") if isinstance(block, dict) else "?"


def _summary(series: dict[str, Any]) -> dict[str, Any]:
    n, correct = sum(series["n"]), sum(series["correct"])
    overall = correct / n if n else None
    return {
        **series,
        "first": series["rates"][0],
        "last": series["rates"][-1],
        "overall": overall,
        "count": len(series["steps"]),
    }
