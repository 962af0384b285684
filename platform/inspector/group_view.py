"""A prompt group side by side: the G completions of one prompt at one step in columns, with their rewards
and advantages, sorted by reward or length, and where two chosen completions first part ways.

The divergence is measured on tokens where both samples carry their per-token data (the token strings of
the run's tokenizer, kept for a few samples a step: logging.token_data_samples_per_step), else on
characters. Its character offsets in each response mark the spot on the page.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.params import INT32_MAX
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET
from runs.access import run_for
from runs.models import Run, Sample

from inspector.sample_filter import BadQuery, _int, choice
from inspector.views import GROUPS_PER_PAGE

COLUMN_SORTS: dict[str, tuple[str, bool]] = {
    "index": ("sample_index", False),
    "reward_desc": ("reward", True),
    "reward_asc": ("reward", False),
    "length_desc": ("length", True),
    "length_asc": ("length", False),
}
"""Sort name -> (field, descending); ties go by sample index."""
FIELDS = [
    "id",
    "sample_index",
    "problem_index",
    "pred",
    "acc",
    "score",
    "overlong_penalty",
    "reward",
    "advantage",
    "length",
    "truncated",
    "kept",
    "response",
]


def common_prefix(a: Any, b: Any) -> int:
    """The length of the longest common prefix of two sequences (strings or lists): a binary search over
    prefix equality, so long responses compare at C speed, never item by item in Python."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def first_divergence(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Where completions ``a`` and ``b`` (dicts with "response" and optional "tokens") first differ.

    {"level": "token" | "char", "index": the first differing token or character (the common prefix's
    length), "identical": bool, "char_a"/"char_b": the character offset of the divergence in each response,
    "span_a"/"span_b": how many characters to mark there (the differing token's, or 1)}.
    On tokens the offset is the length of the tokens before it when they spell the response's start (a
    tokenizer's decoding may not: then the character-level offset of the same responses)."""
    ra, rb = a["response"], b["response"]
    ta, tb = a.get("tokens"), b.get("tokens")
    chars = common_prefix(ra, rb)
    if ta and tb:
        k = common_prefix(list(ta), list(tb))
        out: dict[str, Any] = {"level": "token", "index": k, "identical": k == len(ta) == len(tb)}
        for side, response, tokens in (("a", ra, ta), ("b", rb, tb)):
            before = "".join(tokens[:k])
            spelled = response.startswith(before)
            out[f"char_{side}"] = len(before) if spelled else chars
            # the differing token's characters, when the tokens spell the text; else one character
            token = str(tokens[k]) if k < len(tokens) else ""
            out[f"span_{side}"] = len(token) if spelled and response.startswith(token, len(before)) else 1
        return out
    return {
        "level": "char",
        "index": chars,
        "identical": ra == rb,
        "char_a": chars,
        "char_b": chars,
        "span_a": 1,
        "span_b": 1,
    }


def group_columns(run: Run, split: str, step: int, group: int, sort: str) -> dict[str, Any]:
    """The group's prompt and its completions in ``sort`` order (``COLUMN_SORTS``); raises Http404 when the
    step has no such group."""
    field, desc = COLUMN_SORTS[sort]
    rows = list(
        Sample.objects.filter(run=run, split=split, step=step, group=group)
        .values(*FIELDS, has_tokens=_has_tokens())
        .order_by("sample_index")
    )
    if not rows:
        raise Http404(f"Step {step} has no {split} group {group} in run #{run.pk}.")
    rows.sort(key=lambda r: (-r[field] if desc else r[field], r["sample_index"]))
    head = Sample.objects.only("prompt", "ground_truth").get(pk=rows[0]["id"])
    return {
        "split": split,
        "step": step,
        "group": group,
        "sort": sort,
        "prompt": head.prompt,
        "ground_truth": head.ground_truth,
        "problem_index": rows[0]["problem_index"],
        "columns": rows,
        "correct": sum(1 for r in rows if r["acc"]),
    }


def default_pair(columns: list[dict[str, Any]]) -> tuple[int, int] | None:
    """The sample indexes compared first: the best and the worst reward (the lower index on ties), or the
    first two when every reward is the same; None for a group of one."""
    if len(columns) < 2:
        return None
    by_reward = sorted(columns, key=lambda c: (-c["reward"], c["sample_index"]))
    best, worst = by_reward[0], sorted(columns, key=lambda c: (c["reward"], c["sample_index"]))[0]
    if best["sample_index"] == worst["sample_index"] or best["reward"] == worst["reward"]:
        first, second = sorted(c["sample_index"] for c in columns)[:2]
        return first, second
    return best["sample_index"], worst["sample_index"]


def divergence(run: Run, split: str, step: int, group: int, a: int, b: int) -> dict[str, Any]:
    """first_divergence of two samples of the group, by sample index (Http404 if either is not in it)."""
    found = {
        s["sample_index"]: s
        for s in Sample.objects.filter(
            run=run, split=split, step=step, group=group, sample_index__in=[a, b]
        ).values("sample_index", "response", "tokens")
    }
    if a not in found or b not in found:
        missing = a if a not in found else b
        raise Http404(f"Sample {missing} is not in {split} group {group} of step {step}.")
    return {"a": a, "b": b, **first_divergence(found[a], found[b])}


def _has_tokens() -> Any:
    return ExpressionWrapper(Q(tokens__isnull=False), output_field=BooleanField())


def _where(request: HttpRequest, step: int, group: int) -> tuple[str, str]:
    if step > INT32_MAX or group > INT32_MAX:
        raise Http404("No such group.")
    return choice(request.GET, "split", ("train", "val")), choice(request.GET, "sort", tuple(COLUMN_SORTS))


def _pair(request: HttpRequest) -> tuple[int, int] | None:
    """The two sample indexes ?a= and ?b= (both or neither)."""
    a, b = _int(request.GET, "a", 0, INT32_MAX), _int(request.GET, "b", 0, INT32_MAX)
    if (a is None) != (b is None):
        raise BadQuery("a, b: give both sample indexes, or neither")
    return None if a is None or b is None else (a, b)


@require_GET
def group_page(request: HttpRequest, run_id: int, step: int, group: int) -> HttpResponse:
    run = run_for(request, run_id)
    context: dict[str, Any] = {"run": run, "step": step, "group": group}
    try:
        split, sort = _where(request, step, group)
        chosen = _pair(request)
    except BadQuery as exc:
        return render(request, "inspector/group.html", {**context, "error": str(exc)}, status=400)
    data = group_columns(run, split, step, group, sort)
    pair = chosen or default_pair(data["columns"])
    data["pair"] = divergence(run, split, step, group, *pair) if pair else None
    data["urls"] = {"diverge": reverse("inspector:samples-group-diverge", args=[run.pk, step, group])}
    meta = {
        "split": split,
        "pair": data["pair"],
        "urls": data["urls"],
        "indexes": [c["sample_index"] for c in data["columns"]],
    }
    page = group // GROUPS_PER_PAGE + 1
    return render(
        request,
        "inspector/group.html",
        {**context, "split": split, "data": data, "meta": meta, "group_page": page},
    )


@require_GET
def group_divergence(request: HttpRequest, run_id: int, step: int, group: int) -> JsonResponse:
    run = run_for(request, run_id)
    try:
        split, _ = _where(request, step, group)
        pair = _pair(request)
        if pair is None:
            raise BadQuery("a, b: give the sample indexes of two completions of the group")
    except BadQuery as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    try:
        return JsonResponse(divergence(run, split, step, group, *pair))
    except Http404 as exc:
        return JsonResponse({"error": str(exc)}, status=404)
