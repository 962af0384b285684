"""The rollout inspector: a step's prompt groups (filter, sort, top-k), one sample in full with its token
view, a problem's pass rate across steps and runs, and the JSON the inspector page fetches.

Every list of samples comes from ``SampleFilter`` (the page, its JSON and the exports alike). A list reads
one step of one split, a range of the unique index (run, split, step, sample_index), and never the token
arrays or whole texts: only the sample opened in full loads those.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, fields
from typing import Any

from django.db import connection
from django.db.models import Avg, BooleanField, Count, ExpressionWrapper, Max, Q, QuerySet
from django.db.models.functions import Length, Substr
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from dapo.config import AlgorithmConfig
from runs import exports
from runs.models import Run, Sample
from runs.views import _run_for

MAX_INT32 = 2**31 - 1
GROUPS_PER_PAGE = 10
SAMPLES_PER_PAGE = 50
MAX_K = 500
MAX_QUERY_CHARS = 200
PREVIEW_CHARS = 240
PROMPT_CHARS = 1500
MAX_OTHER_RUNS = 50
SORTS: dict[str, tuple[str, bool]] = {
    "index": ("sample_index", False),
    "reward_desc": ("reward", True), "reward_asc": ("reward", False),
    "length_desc": ("length", True), "length_asc": ("length", False),
    "advantage_desc": ("advantage", True), "advantage_asc": ("advantage", False),
}  # fmt: skip
"""Sort name -> (field, descending); ties go by sample index."""
ROW_FIELDS = [
    "id", "step", "split", "sample_index", "group", "problem_index", "ground_truth", "pred", "score", "acc",
    "overlong_penalty", "reward", "advantage", "length", "truncated", "kept",
]  # fmt: skip


class BadQuery(ValueError):
    """A query parameter with a value the inspector cannot use; shown as a 400 naming the parameter."""


class NoSuchStep(LookupError):
    """A well-formed step without samples in the split; shown as a 404."""


# ---- the one filter: query parameters -> a queryset --------------------------------------------------


@dataclass(frozen=True)
class SampleFilter:
    split: str = "train"
    step: int | None = None
    """None: every step (exports only)."""
    acc: bool | None = None
    kept: bool | None = None
    truncated: bool | None = None
    tokens: bool | None = None
    """Has per-token data."""
    reward_min: float | None = None
    reward_max: float | None = None
    length_min: int | None = None
    length_max: int | None = None
    problem: int | None = None
    q: str = ""
    sort: str = "index"
    rank: str = ""
    """"top" or "bottom": the k best or worst samples by ``rank_by`` (a flat list)."""
    rank_by: str = "reward"
    k: int = 10
    view: str = "groups"
    page: int = 1

    @classmethod
    def from_query(
        cls, params: QueryDict, *, default_step: int | None, all_steps: bool = False
    ) -> SampleFilter:
        """Parse query parameters; raises BadQuery naming the first bad one. ``step=all`` is accepted only
        with ``all_steps`` (exports); an absent step is ``default_step``."""
        raw_step = params.get("step", "")
        if raw_step == "all" and all_steps:
            step = None
        else:
            step = default_step if raw_step == "" else _int(params, "step", 0, MAX_INT32)
        q = params.get("q", "").strip()
        if "\x00" in q:
            raise BadQuery("q: the search text must not contain NUL characters")
        if len(q) > MAX_QUERY_CHARS:
            raise BadQuery(f"q: the search text is limited to {MAX_QUERY_CHARS} characters")
        return cls(
            split=_choice(params, "split", ("train", "val")),
            step=step,
            acc=_bool(params, "acc"),
            kept=_bool(params, "kept"),
            truncated=_bool(params, "truncated"),
            tokens=_bool(params, "tokens"),
            reward_min=_float(params, "reward_min"),
            reward_max=_float(params, "reward_max"),
            length_min=_int(params, "length_min", 0, MAX_INT32),
            length_max=_int(params, "length_max", 0, MAX_INT32),
            problem=_int(params, "problem", 0, MAX_INT32),
            q=q,
            sort=_choice(params, "sort", tuple(SORTS)),
            rank=_choice(params, "rank", ("", "top", "bottom")),
            rank_by=_choice(params, "rank_by", ("reward", "length")),
            k=_int(params, "k", 1, MAX_K) or 10,
            view=_choice(params, "view", ("groups", "list")),
            page=_int(params, "page", 1, 10**6) or 1,
        )

    def queryset(self, run: Run) -> QuerySet[Sample]:
        """The matching samples of the run, unordered (one step: a range of the unique index)."""
        qs = Sample.objects.filter(run=run, split=self.split)
        if self.step is not None:
            qs = qs.filter(step=self.step)
        conditions = {
            "acc": self.acc, "kept": self.kept, "truncated": self.truncated, "problem_index": self.problem,
            "reward__gte": self.reward_min, "reward__lte": self.reward_max,
            "length__gte": self.length_min, "length__lte": self.length_max,
        }  # fmt: skip
        qs = qs.filter(**{name: value for name, value in conditions.items() if value is not None})
        if self.tokens is not None:
            qs = qs.filter(tokens__isnull=not self.tokens)
        if self.q:
            qs = qs.filter(Q(prompt__icontains=self.q) | Q(response__icontains=self.q))
        return qs

    def ordered(self, qs: QuerySet[Sample]) -> QuerySet[Sample]:
        """Ranked (top/bottom-k, cut to k) or sorted; ties by step and sample index."""
        if self.rank:
            field = ("-" if self.rank == "top" else "") + self.rank_by
            return qs.order_by(field, "step", "sample_index")[: self.k]
        field, desc = SORTS[self.sort]
        first = [] if self.sort == "index" else [("-" if desc else "") + field]
        return qs.order_by(*first, "step", "sample_index")

    @property
    def narrows(self) -> bool:
        """True when the filter leaves out samples of the step (anything beyond split, step and layout)."""
        layout = {"split", "step", "sort", "view", "page", "rank_by", "k"}
        return any(getattr(self, f.name) != f.default for f in fields(self) if f.name not in layout)

    def params(self) -> dict[str, Any]:
        """The non-default values as query parameters (what links and exports carry)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value != f.default and value is not None:
                out[f.name] = str(value).lower() if isinstance(value, bool) else value
        if self.step is None:
            out["step"] = "all"
        return out


def _int(params: QueryDict, name: str, lo: int, hi: int) -> int | None:
    raw = params.get(name, "").strip()
    if raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadQuery(f"{name}: must be a whole number, got {raw[:40]!r}") from None
    if not lo <= value <= hi:
        raise BadQuery(f"{name}: must be between {lo} and {hi}, got {raw[:40]}")
    return value


def _float(params: QueryDict, name: str) -> float | None:
    raw = params.get(name, "").strip()
    if raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise BadQuery(f"{name}: must be a number, got {raw[:40]!r}") from None
    if not math.isfinite(value) or abs(value) > 1e12:
        raise BadQuery(f"{name}: must be a finite number, got {raw[:40]}")
    return value


def _bool(params: QueryDict, name: str) -> bool | None:
    raw = params.get(name, "").strip().lower()
    if raw in ("", "any"):
        return None
    if raw in ("true", "1", "yes"):
        return True
    if raw in ("false", "0", "no"):
        return False
    raise BadQuery(f"{name}: must be true, false or any, got {raw[:40]!r}")


def _choice(params: QueryDict, name: str, choices: tuple[str, ...]) -> str:
    raw = params.get(name, "") or choices[0]
    if raw not in choices:
        raise BadQuery(
            f"{name}: must be one of {', '.join(c or '(empty)' for c in choices)}, got {raw[:40]!r}"
        )
    return raw


# ---- reads ----------------------------------------------------------------------------------------


def sample_steps(run: Run, split: str) -> list[int]:
    """The steps with samples in a split, ascending: one index probe per step (a loose index scan on the
    unique index), never a scan of the run's samples."""
    table = Sample._meta.db_table
    sql = (
        f"WITH RECURSIVE s(step) AS (SELECT MIN(step) FROM {table} WHERE run_id = %s AND split = %s"
        f" UNION ALL SELECT (SELECT MIN(t.step) FROM {table} t WHERE t.run_id = %s AND t.split = %s"
        f" AND t.step > s.step) FROM s WHERE s.step IS NOT NULL) SELECT step FROM s WHERE step IS NOT NULL"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [run.pk, split, run.pk, split])
        return [row[0] for row in cursor.fetchall()]


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
    rows = _rows(Sample.objects.filter(run=run, split=f.split, step=f.step, sample_index__in=indexes))
    position = {index: i for i, index in enumerate(indexes)}
    return sorted(rows, key=lambda row: position[row["sample_index"]])


def _groups(run: Run, f: SampleFilter, matches: list[Match]) -> tuple[list[dict[str, Any]], int]:
    """One page of the step's groups that have a matching sample, a group ranked by its first matching
    sample in sort order; each with its stats over all its samples, and its matching samples."""
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
        )
        .order_by()
    )
    by_group = {s["group"]: {**s, "samples": []} for s in stats}
    shown = set(page)
    for row in _page_rows(run, f, [index for index, group, _ in matches if group in shown]):
        by_group[row["group"]]["samples"].append(row)
    groups = []
    for g in page:
        s = by_group[g]
        badge = group_badge(s["n"], s["correct"], s["kept_n"] > 0, f.split)
        groups.append({**s, "badge": badge, "truth": s["truth"][:500]})
    return groups, len(order)


def page_data(run: Run, params: QueryDict) -> dict[str, Any]:
    """Everything the inspector shows for these query parameters (the page embeds it, its JS fetches it)."""
    split = _choice(params, "split", ("train", "val"))
    steps = sample_steps(run, split)
    f = SampleFilter.from_query(params, default_step=steps[-1] if steps else None)
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
    }
    if f.step is None:
        return {**data, "summary": None, "matching": 0, "pages": 0, "groups": [], "samples": []}
    i = bisect.bisect_left(steps, f.step)
    if i == len(steps) or steps[i] != f.step:
        span = f"steps with {split} samples: {steps[0]}–{steps[-1]}" if steps else f"no {split} samples yet"
        raise NoSuchStep(f"Step {f.step} has no {split} samples ({span}).")
    matches = _matches(f, f.queryset(run))
    data["summary"] = step_summary(run, split, f.step)
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


# ---- token view and problem timeline ----------------------------------------------------------------


def clip_params(run: Run) -> dict[str, float | None]:
    """ε_low, ε_high and the dual-clip c of the run's stored config (the algorithm's defaults if absent)."""
    algo = run.config.get("algorithm") if isinstance(run.config, dict) else None
    algo = algo if isinstance(algo, dict) else {}
    defaults = AlgorithmConfig()
    clip_c = algo.get("clip_c", defaults.clip_c)
    return {
        "clip_low": float(algo.get("clip_low", defaults.clip_low)),
        "clip_high": float(algo.get("clip_high", defaults.clip_high)),
        "clip_c": None if clip_c is None else float(clip_c),
    }


def clip_flag(
    ratio: float | None, advantage: float, clip_low: float, clip_high: float, clip_c: float | None
) -> str:
    """How dapo.loss.policy_loss treated a token (dapo-reference.md §2), from its ratio and advantage:
    "high" where A > 0 and the surrogate is clipped at 1 + ε_high (pg2 > pg1), "low" where A < 0 and it
    is clipped at 1 − ε_low (pg2 > pg1), "dual" where A < 0 and the dual clip −A·c binds; "" otherwise."""
    if ratio is None:
        return ""
    pg1 = -advantage * ratio
    pg2 = -advantage * min(max(ratio, 1.0 - clip_low), 1.0 + clip_high)
    if pg2 > pg1:
        return "high" if advantage > 0 else "low"
    if clip_c is not None and advantage < 0 and max(pg1, pg2) > -advantage * clip_c:
        return "dual"
    return ""


def token_view(sample: Sample, clip: dict[str, float | None]) -> dict[str, Any] | None:
    """Per-token arrays aligned with the tokens (None where a value is missing), with clip marks."""
    if not sample.tokens:
        return None
    n = len(sample.tokens)

    def aligned(values: Any) -> list[float | None] | None:
        if not isinstance(values, list) or not values:
            return None
        out = [float(v) if isinstance(v, int | float) and math.isfinite(v) else None for v in values[:n]]
        return out + [None] * (n - len(out))

    ratio = aligned(sample.token_ratio)
    low, high, c = clip["clip_low"] or 0.0, clip["clip_high"] or 0.0, clip["clip_c"]
    flags = [clip_flag(r, sample.advantage, low, high, c) for r in ratio] if ratio else None
    counts = {k: (flags or []).count(k) for k in ("high", "low", "dual")}
    return {
        "tokens": [str(t) for t in sample.tokens],
        "logprob": aligned(sample.token_logprobs),
        "entropy": aligned(sample.token_entropy),
        "ratio": ratio,
        "clip": flags,
        "counts": counts,
        "advantage": sample.advantage,
        "ratio_low": 1.0 - low,
        "ratio_high": 1.0 + high,
        **clip,
    }


def mark_answer(response: str, pred: str) -> tuple[str, str, str]:
    """The response split around the last occurrence of the extracted answer (before, answer, after)."""
    at = response.rfind(pred) if pred and pred != "[INVALID]" else -1
    if at < 0:
        return response, "", ""
    return response[:at], pred, response[at + len(pred) :]


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


# ---- views --------------------------------------------------------------------------------------------


def _urls(run: Run) -> dict[str, str]:
    return {
        "page": reverse("runs:samples", args=[run.pk]),
        "data": reverse("runs:samples-data", args=[run.pk]),
        "steps": reverse("runs:samples-steps", args=[run.pk]),
        "run": reverse("runs:detail", args=[run.pk]),
        "sample": reverse("runs:sample", args=[run.pk, 0]).rsplit("0/", 1)[0],
        "problem": reverse("runs:problem", args=[run.pk, 0]).rsplit("0/", 1)[0],
        "export": reverse("runs:samples-export", args=[run.pk, "jsonl"]).rsplit(".jsonl", 1)[0],
    }


@require_GET
def samples_page(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run_for(request, run_id)
    context: dict[str, Any] = {"run": run, "urls": _urls(run)}
    try:
        context["data"] = page_data(run, request.GET)
    except BadQuery as exc:
        return render(request, "runs/samples.html", {**context, "error": str(exc)}, status=400)
    except NoSuchStep as exc:
        return render(request, "runs/samples.html", {**context, "error": str(exc)}, status=404)
    return render(request, "runs/samples.html", context)


@require_GET
def samples_data(request: HttpRequest, run_id: int) -> JsonResponse:
    run = _run_for(request, run_id)
    try:
        return JsonResponse(page_data(run, request.GET))
    except BadQuery as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    except NoSuchStep as exc:
        return JsonResponse({"error": str(exc)}, status=404)


@require_GET
def samples_steps(request: HttpRequest, run_id: int) -> JsonResponse:
    run = _run_for(request, run_id)
    try:
        split = _choice(request.GET, "split", ("train", "val"))
    except BadQuery as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse(
        {"split": split, "steps": sample_steps(run, split), "run_step": run.step, "status": run.status}
    )


@require_GET
def samples_export(request: HttpRequest, run_id: int, fmt: str) -> HttpResponse:
    run = _run_for(request, run_id)
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
    run = _run_for(request, run_id)
    if not 0 < sample_pk <= MAX_INT32 * 2**32:
        raise Http404("No such sample.")
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
        "group_page": sample.group // GROUPS_PER_PAGE + 1,
        "previous": before.values_list("id", flat=True).first(),
        "next": after.values_list("id", flat=True).first(),
    }
    return render(request, "runs/sample.html", context)


@require_GET
def problem_page(request: HttpRequest, run_id: int, problem_index: int) -> HttpResponse:
    run = _run_for(request, run_id)
    context: dict[str, Any] = {"run": run, "problem_index": problem_index, "split": "train"}
    try:
        split = _choice(request.GET, "split", ("train", "val"))
    except BadQuery as exc:
        return render(request, "runs/problem.html", {**context, "error": str(exc)}, status=400)
    context["split"] = split
    samples = Sample.objects.filter(run=run, split=split, problem_index=min(problem_index, MAX_INT32))
    example = samples.only("prompt", "ground_truth").order_by("-step").first()
    if example is None or problem_index > MAX_INT32:
        error = f"Problem {problem_index} has no {split} samples in run #{run.pk}."
        return render(request, "runs/problem.html", {**context, "error": error}, status=404)
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
    return render(request, "runs/problem.html", context)


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
