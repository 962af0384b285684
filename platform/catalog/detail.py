"""What the dataset page shows beside the rows: the split's statistics and the chosen row's panel (the
prompt as the model sees it, the ground truth, and the problem's solve rate in each run)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runs.models import Run

from catalog import browse, solve
from catalog.chat import TemplateError, TokenCounter, load_chat_template
from catalog.models import BaseModel, Dataset, DatasetRow
from catalog.paths import resolve
from catalog.stats import split_stats, token_stats
from dapo.rewards import REWARD_FUNCTIONS, plugins
from dapo.rewards.isolated import judge_all

COVERAGE_ROWS = 20_000
"""Ground truths checked per request on the dataset page (the first ones, in index order)."""
COVERAGE_SECONDS = 3.0
"""Time the check may take before it reports on the rows it got through."""
CALL_SECONDS = 1.0
"""Time one row's check may take before its worker process is killed and the row reported as not scored
(Math-Verify judges a plain answer in milliseconds, a hostile one can take minutes)."""
SHOWN_ROWS = 20
"""Rows named on the page among those not scored in time."""


def statistics(dataset: Dataset, split: str, model: BaseModel | None) -> dict[str, Any]:
    """The split's statistics for the charts (JSON-ready); token lengths use ``model``'s template."""
    rows = dataset.rows.filter(split=split)
    stats = split_stats(rows, f"{dataset.pk}|{dataset.fingerprint}|{dataset.row_count}|{split}")
    if model is None:
        stats["tokens"] = {"error": "register a base model to count tokens with its chat template"}
        return stats
    model_dir = resolve(model.path)
    if not model_dir.is_dir():
        stats["tokens"] = {"error": f"the model directory of {model.name} is missing ({model.path})"}
    else:
        stats["tokens"] = dict(token_stats(rows, model_dir, _cache_key(dataset, split, model_dir)))
    stats["tokens"]["model"] = model.name
    return stats


def reward_coverage(dataset: Dataset, split: str, reward: str) -> dict[str, Any]:
    """How many of the split's ground truths the named reward can judge at all (``judges`` of the
    built-in rewards), with a few that it cannot. Plugins and the http service are never run here:
    the web process imports no user code and calls no reward service. Each call runs in a worker process
    killed after CALL_SECONDS (dapo.rewards.isolated), the whole check stops at COVERAGE_SECONDS, and the
    answer names the rows not scored in time: those whose call was stopped, and those not reached."""
    out: dict[str, Any] = {"reward": reward}
    cls = REWARD_FUNCTIONS.get(reward)
    if cls is None:
        known = plugins.check(reward) is None
        out["error"] = (
            "a plugin runs only where rewards are computed (the web process never imports it)"
            if known
            else f"unknown reward; built-in ones: {', '.join(REWARD_FUNCTIONS)}"
        )
        return out
    judges = getattr(cls, "judges", None)
    if judges is None:  # the http reward: asking would mean calling the service
        out["error"] = "this reward cannot tell ahead which rows it judges (a reward service decides)"
        return out
    rows = dataset.rows.filter(split=split).order_by("index").values_list("index", "ground_truth")
    indices: list[int] = []
    truths: dict[int, str] = {}

    def read() -> Iterator[str]:  # the rows as the checker takes them, remembered by position
        for index, truth in rows[:COVERAGE_ROWS].iterator():
            indices.append(index)
            truths[index] = truth[:200]
            yield truth

    got = judge_all(judges, read(), call_seconds=CALL_SECONDS, budget_seconds=COVERAGE_SECONDS)
    if got.error:
        return {**out, "error": got.error}
    stopped = {indices[p] for p in got.stopped}
    checked = [(indices[p], ok) for p, ok in enumerate(got.verdicts) if indices[p] not in stopped]
    return {
        **out,
        "judged": sum(ok for _, ok in checked),
        "checked": len(checked),
        "total": rows.count(),
        "failing": [(i, truths[i]) for i, ok in checked if not ok][:5],
        "stopped": [(i, truths[i]) for i in sorted(stopped)][:SHOWN_ROWS],
        "call_seconds": CALL_SECONDS,
        "budget_seconds": COVERAGE_SECONDS,
        "unreached": _unreached(rows, got.reached, indices),
    }


def _unreached(rows: Any, reached: int, indices: list[int]) -> dict[str, Any] | None:
    """The rows within COVERAGE_ROWS the budget did not reach: {"first": index, "count": n}, or None."""
    wanted = min(rows.count(), COVERAGE_ROWS)
    if reached >= wanted:
        return None
    first = indices[reached] if reached < len(indices) else rows[reached][0]
    return {"first": first, "count": wanted - reached}


def row_panel(
    dataset: Dataset, query: browse.Query, runs: list[Run], model: BaseModel | None
) -> dict[str, Any]:
    """The chosen row: its templated prompt beside the ground truth, and its solve rate in each run."""
    assert query.row is not None  # the page asks for a panel only when a row is chosen
    row = DatasetRow.objects.filter(dataset=dataset, split=query.split, index=query.row).first()
    if row is None:
        return {"missing": query.row}
    by_run = solve.rates_by_run(runs, query.split, row.index)
    for entry in by_run:
        entry["timeline"] = timeline_url(entry["run_id"], query.split, row.index)
    correct, samples = sum(e["correct"] for e in by_run), sum(e["samples"] for e in by_run)
    before, after = browse.neighbours(dataset, query.split, row.index)
    return {
        "row": row,
        **prompt_as_seen(row, model),
        "by_run": by_run,
        "total": solve.Rate(correct, samples, len(by_run)) if samples else None,
        "prev_url": query.url(row=before) if before is not None else "",
        "next_url": query.url(row=after) if after is not None else "",
        "close_url": query.url(row=None),
        "stored_prompt": json.dumps(row.prompt, indent=2, ensure_ascii=False),
        "extra": json.dumps(row.extra, indent=2, ensure_ascii=False) if row.extra else "",
    }


def prompt_as_seen(row: DatasetRow, model: BaseModel | None) -> dict[str, Any]:
    """{"prompt": text the policy is given, "template": where its template came from, "tokens": count or
    None, "template_error": why it could not be rendered}."""
    plain = {"prompt": "\n\n".join(m["content"] for m in row.messages if m["role"] == "user"), "tokens": None}
    if model is None:
        return {
            **plain,
            "template": "",
            "template_error": "no base model registered: shown without a template",
        }
    model_dir = resolve(model.path)
    if not model_dir.is_dir():
        return {**plain, "template": "", "template_error": f"the model directory is missing ({model.path})"}
    try:
        template = load_chat_template(model_dir)
        text = template.render(row.messages)
    except TemplateError as e:
        return {**plain, "template": "", "template_error": str(e)}
    counter = TokenCounter(model_dir, templated=template.template is not None)
    tokens = counter.count([text])[0] if counter.available else None
    segments = template_segments(text, [m["content"] for m in row.messages])
    return {
        "prompt": text,
        "segments": segments,
        "template": template.source,
        "tokens": tokens,
        "template_error": "",
    }


def template_segments(text: str, contents: list[str]) -> list[tuple[str, bool]]:
    """The rendered prompt cut into (text, written by the template) pieces: the messages' contents found
    in order, everything around them the template's (special tokens, role tags, a default system prompt).
    One template piece for all when a content cannot be found as written (a template that edits it)."""
    pieces: list[tuple[str, bool]] = []
    at = 0
    for content in contents:
        found = text.find(content, at) if content else -1
        if found < 0:
            return [(text, False)]
        if found > at:
            pieces.append((text[at:found], True))
        pieces.append((content, False))
        at = found + len(content)
    if at < len(text):
        pieces.append((text[at:], True))
    return pieces


def timeline_url(run_id: int, split: str, index: int) -> str:
    """The problem's timeline in a run (its pass rate across steps); validation problems say so."""
    return f"/runs/{run_id}/problems/{index}/" + ("?split=val" if split == "val" else "")


def _cache_key(dataset: Dataset, split: str, model_dir: Path) -> str:
    """Changes when the rows or the model's template or tokenizer change."""
    files = ("chat_template.jinja", "tokenizer_config.json", "tokenizer.json", "special_tokens_map.json")
    stamps = [(model_dir / f).stat().st_mtime_ns if (model_dir / f).exists() else 0 for f in files]
    raw = f"{dataset.pk}|{dataset.fingerprint}|{dataset.row_count}|{split}|{model_dir}|{stamps}"
    return hashlib.sha1(raw.encode()).hexdigest()
