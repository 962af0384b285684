"""Per-column statistics of a dataset split: the answer distribution, the data sources and prompt lengths in
characters (computed in the database) and in tokens of a chosen model with its chat template applied (on a
sample). Rows change only by a new import, so both are cached under a key that an import changes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from django.core.cache import cache
from django.db.models import Avg, Count, F, IntegerField, Max, Min, QuerySet, Value
from django.db.models.functions import Mod

from catalog.chat import ChatTemplate, TemplateError, TokenCounter, load_chat_template
from catalog.models import DatasetRow
from dapo.data.problems import prompt_messages

TOP_ANSWERS = 15
BINS = 30
TOKEN_SAMPLE = 2000
"""Token lengths are measured on this many rows, evenly spread by index, for the histogram and percentiles."""
LONGEST = 100
"""...and on the rows with the longest prompts in characters, so the maximum is the split's true one in
practice (a prompt's token count grows with its characters)."""
MAX_SOURCES = 100
CACHE_SECONDS = 24 * 3600


def split_stats(rows: QuerySet[DatasetRow], cache_key: str) -> dict[str, Any]:
    """Counts, the most frequent answers, the data sources and a histogram of prompt characters of one
    split's rows (cached: ``cache_key`` must change when the rows do)."""
    key = f"dapo-split-stats:{cache_key}"
    cached = cache.get(key)
    if cached is None:
        cached = _split_stats(rows)
        cache.set(key, cached, timeout=CACHE_SECONDS)
    return dict(cached)


def _split_stats(rows: QuerySet[DatasetRow]) -> dict[str, Any]:
    agg = rows.aggregate(
        rows=Count("id"),
        answers=Count("ground_truth", distinct=True),
        lo=Min("prompt_chars"),
        hi=Max("prompt_chars"),
        mean=Avg("prompt_chars"),
    )
    top = rows.values("ground_truth").annotate(n=Count("id")).order_by("-n", "ground_truth")[:TOP_ANSWERS]
    answers = [{"value": r["ground_truth"], "count": r["n"]} for r in top]
    by_source = rows.values("data_source").annotate(n=Count("id")).order_by("-n", "data_source")
    sources = [{"value": r["data_source"], "count": r["n"]} for r in by_source[:MAX_SOURCES]]
    return {
        **agg,
        "sources": len(sources),
        "source_counts": sources,
        "top_answers": answers,
        "other_answers": agg["rows"] - sum(a["count"] for a in answers),
        "chars": _db_histogram(rows, agg["lo"], agg["hi"]),
    }


def _db_histogram(rows: QuerySet[DatasetRow], lo: int | None, hi: int | None) -> dict[str, list[int]]:
    """Equal-width bins of prompt_chars counted by the database: {"edges": [start of each bin], "counts"}."""
    if lo is None or hi is None:
        return {"edges": [], "counts": []}
    width = max(1, math.ceil((hi - lo + 1) / BINS))
    bucket = (F("prompt_chars") - Value(lo)) / Value(width)
    counts = dict(
        rows.annotate(bucket=bucket)
        .values("bucket")
        .annotate(n=Count("id"))
        .order_by()
        .values_list("bucket", "n")
    )
    n_bins = (hi - lo) // width + 1
    return {
        "edges": [lo + i * width for i in range(n_bins)],
        "counts": [counts.get(i, 0) for i in range(n_bins)],
    }


def histogram(values: list[int]) -> dict[str, list[int]]:
    if not values:
        return {"edges": [], "counts": []}
    lo, hi = min(values), max(values)
    width = max(1, math.ceil((hi - lo + 1) / BINS))
    counts = [0] * ((hi - lo) // width + 1)
    for v in values:
        counts[(v - lo) // width] += 1
    return {"edges": [lo + i * width for i in range(len(counts))], "counts": counts}


def token_stats(rows: QuerySet[DatasetRow], model_dir: Path, cache_key: str) -> dict[str, Any]:
    """Prompt lengths in tokens with the model's chat template applied (as the trainer encodes them):
    a histogram, percentiles and the number of rows measured; or {"error": why}."""
    key = f"dapo-tokens:{cache_key}"
    cached = cache.get(key)
    if cached is not None:
        return cached
    result = _measure(rows, model_dir)
    cache.set(key, result, timeout=CACHE_SECONDS)
    return result


def _measure(rows: QuerySet[DatasetRow], model_dir: Path) -> dict[str, Any]:
    try:
        template = load_chat_template(model_dir)
    except TemplateError as e:
        return {"error": str(e)}
    counter = TokenCounter(model_dir, templated=template.template is not None)
    if not counter.available:
        return {"error": "the model directory has no tokenizer.json: token counts need one"}
    total = rows.count()
    step = max(1, math.ceil(total / TOKEN_SAMPLE))
    sample = (
        rows.annotate(m=Mod("index", Value(step), output_field=IntegerField())).filter(m=0)
        if step > 1
        else rows
    )
    longest = rows.order_by("-prompt_chars", "index")[:LONGEST]
    try:
        lengths = counter.count(_rendered(template, sample.values_list("prompt", flat=True).iterator()))
        tail = (
            counter.count(_rendered(template, longest.values_list("prompt", flat=True))) if step > 1 else []
        )
    except TemplateError as e:
        return {"error": str(e)}
    ordered = sorted(lengths)
    return {
        "measured": len(lengths),
        "total": total,
        "max": max(ordered[-1:] + tail, default=0),
        "p50": _percentile(ordered, 0.5),
        "p95": _percentile(ordered, 0.95),
        "histogram": histogram(lengths),
    }


def _rendered(template: ChatTemplate, prompts: Any) -> list[str]:
    return [template.render(prompt_messages(p)) for p in prompts]


def _percentile(ordered: list[int], q: float) -> int:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0
