"""Discarded rollouts in the inspector: why the step did not train on a group or a sample, the badges that
say so, and each step's count per reason, stored against logged (``train/discarded_groups/<reason>`` and
``train/discarded_samples/overlong``, written by the trainer from the same verdicts).

A run stores every generated group by default (``logging.samples_per_step`` = -1); with a cap it keeps
whole groups, the trained ones first, and the step's counts say how many of each reason were not stored.
Rows of runs recorded before reasons existed have an empty reason: their filtered groups show as
"filtered" as before.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count
from runs.models import MetricPoint, Run, Sample

GROUP_REASONS = ("all_correct", "all_wrong", "no_variance", "surplus")
"""A group's reasons (dapo.algo.sampling.DISCARD_REASONS)."""
SAMPLE_REASONS = ("overlong",)
"""A sample's own reason, within a trained group."""
REASONS: dict[str, tuple[str, str]] = {
    "all_correct": (
        "dropped: all correct",
        "Dynamic sampling dropped the group: every sample was right, so every advantage was 0.",
    ),
    "all_wrong": (
        "dropped: all wrong",
        "Dynamic sampling dropped the group: every sample was wrong, so every advantage was 0.",
    ),
    "no_variance": (
        "dropped: no variance",
        "Dynamic sampling dropped the group: right and wrong samples, but its filter metric "
        "(algorithm.filter_metric) was the same for all of them.",
    ),
    "surplus": (
        "surplus: batch full",
        "The group passed the filter, but the batch already held data.train_batch_size groups: "
        "generated beyond what the batch needed (the last round's leftovers).",
    ),
    "overlong": (
        "overlong-filtered",
        "Truncated at rollout.max_response_length; overlong filtering masked it out of the loss.",
    ),
}
"""Reason -> (badge label, what it means)."""


def reason_badge(reason: str | None) -> dict[str, str] | None:
    """The badge of a reason (None for a trained sample or an unknown reason)."""
    if not reason or reason not in REASONS:
        return None
    label, help_text = REASONS[reason]
    return {"reason": reason, "label": label, "help": help_text}


def _metric_values(run: Run, step: int, names: list[str]) -> dict[str, float]:
    rows = MetricPoint.objects.filter(run=run, step=step, name__in=names).values_list("name", "value")
    return {name: value for name, value in rows if value is not None}


def step_discards(run: Run, split: str, step: int | None, trained: int) -> dict[str, Any] | None:
    """A train step's groups and samples by reason: what is stored, what the trainer logged, and how many
    of each were not stored (a capped step); ``trained``: the stored trained groups (the step summary's
    ``kept_groups``). None for validation or a step without samples. Two queries."""
    if split != "train" or step is None:
        return None
    stored = (
        Sample.objects.filter(run=run, split="train", step=step)
        .values("discard_reason")
        .annotate(groups=Count("group", distinct=True), samples=Count("id"))
        .order_by()
    )
    by_reason: dict[str, dict[str, Any]] = {row["discard_reason"]: dict(row) for row in stored}
    group_size = _group_size(run)
    names = [f"train/discarded_groups/{r}" for r in GROUP_REASONS]
    names += ["train/discarded_samples/overlong", "train/num_prompts_generated", "train/num_samples_trained"]
    logged = _metric_values(run, step, names)
    rows = []
    logged_trained = logged.get("train/num_samples_trained")
    rows.append(
        _row("trained", "trained", trained, None if logged_trained is None else logged_trained / group_size)
    )
    for reason in GROUP_REASONS:
        count = by_reason.get(reason, {}).get("groups", 0)
        rows.append(_row(reason, REASONS[reason][0], count, logged.get(f"train/discarded_groups/{reason}")))
    overlong = by_reason.get("overlong", {}).get("samples", 0)
    overlong_row = _row(
        "overlong", REASONS["overlong"][0], overlong, logged.get("train/discarded_samples/overlong")
    )
    overlong_row["unit"] = "samples"
    rows.append(overlong_row)
    samples = sum(row["samples"] for row in by_reason.values())
    generated = logged.get("train/num_prompts_generated")
    generated_samples = None if generated is None else int(round(generated * group_size))
    not_stored = None if generated_samples is None else max(generated_samples - samples, 0)
    return {
        "rows": rows,
        "stored_samples": samples,
        "generated_samples": generated_samples,
        "not_stored": not_stored,
        "cap": _samples_cap(run),
    }


def _row(reason: str, label: str, stored: int, logged: float | None) -> dict[str, Any]:
    logged_count = None if logged is None else int(round(logged))
    missing = None if logged_count is None else max(logged_count - stored, 0)
    help_text = REASONS[reason][1] if reason in REASONS else "Trained on: the step's batch."
    return {
        "reason": reason,
        "label": label,
        "help": help_text,
        "stored": stored,
        "logged": logged_count,
        "not_stored": missing,
        "unit": "groups",
    }


def _config(run: Run, section: str) -> dict[str, Any]:
    block = run.config.get(section) if isinstance(run.config, dict) else None
    return block if isinstance(block, dict) else {}


def _group_size(run: Run) -> int:
    n = _config(run, "rollout").get("n", 1)
    return n if isinstance(n, int) and n > 0 else 1


def _samples_cap(run: Run) -> int:
    cap = _config(run, "logging").get("samples_per_step", -1)
    return cap if isinstance(cap, int) else -1
