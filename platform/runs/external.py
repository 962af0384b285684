"""External runs: runs trained by TRL or verl elsewhere, whose config, metrics and samples are sent in.

An external run is a ``Run`` of kind "external" with a ``source`` ("trl", "verl") and the trainer's own
config stored as it came. It is created running (no worker claims it: it has no lease, so the reaper never
touches it), takes metric points and samples per step through the same path as a native run's step report
(``Run.record_step``: one transaction per step, a replayed step overwrites its rows) and the same live event
(``runs.events.step_event``), and is marked finished or failed by its sender. Metric names are mapped onto
ours where they mean the same (``dapo.integrations.names``).

Every body is validated whole before anything is written: a bad point or sample is a 400 naming it, and
none of the request's rows are stored. What a trainer does not record (token log-probs, checkpoints, our
launch config) stays empty and the pages say "not recorded by TRL" (``NOT_RECORDED``); cancel, fork,
export and resume are refused (``refusal``).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from dapo.integrations.names import SOURCES, renamed
from runs.configuring import validate_name
from runs.events import publish, status_event, step_event
from runs.models import Kind, Run, Status

Errors = dict[str, str]

MAX_CONFIG_BYTES = 512 * 1024
MAX_POINTS = 1000
"""Steps of metrics in one request."""
MAX_METRICS_PER_STEP = 500
MAX_SAMPLES = 2000
"""Samples in one request."""
MAX_TEXT = 200_000
"""Characters of one prompt or completion."""
MAX_REWARDS = 64
NOT_RECORDED = ("token log-probs", "checkpoints", "launch config", "hardware", "distributions", "log")
"""What an external run has none of; its pages mark each "not recorded by <trainer>"."""


class ExternalError(Exception):
    """A request on an external run the platform refuses: ``status`` (400, 409), a message, field errors."""

    def __init__(self, status: int, detail: str, errors: Errors | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.errors = status, detail, errors or {}

    def body(self) -> dict[str, Any]:
        return {"detail": self.detail, **({"errors": self.errors} if self.errors else {})}


def refusal(run: Run, action: str) -> str | None:
    """Why ``action`` ("cancel", "resume", "fork", "export", "clone") is not possible on ``run``; None
    when it is not an external run."""
    if not run.is_external:
        return None
    done = {
        "cancel": "cancelled",
        "resume": "resumed",
        "fork": "forked",
        "export": "exported",
        "clone": "cloned",
    }[action]
    return (
        f"run #{run.pk} was trained by {run.source_label} outside this platform: it cannot be {done} here "
        "(no worker of ours runs it, and it has no checkpoint here)"
    )


# ---- validation ---------------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    """A JSON number as a float (NaN, inf and null allowed: stored as null); TypeError otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError
    return float(value)


def _int(value: Any, *, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise TypeError
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError
    return value


def _text(value: Any, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str) or len(value) > limit or "\x00" in value:
        raise TypeError
    return value


def clean_create(body: Any) -> tuple[dict[str, Any], Errors]:
    """The body of POST /api/runs/external/: {"name", "source", "config", "total_steps"?, "tags"?}."""
    if not isinstance(body, dict):
        return {}, {"body": "must be a JSON object"}
    errors: Errors = dict(validate_name(body.get("name")))
    known = {"name", "source", "config", "total_steps", "tags"}
    errors |= {
        str(k)[:100]: f"unknown field; valid: {', '.join(sorted(known))}" for k in body if k not in known
    }
    source = body.get("source")
    if source not in SOURCES:
        errors["source"] = f"must be one of {', '.join(SOURCES)}"
    config = body.get("config", {})
    if not isinstance(config, dict):
        errors["config"] = "must be a JSON object (the trainer's own config, stored as it is)"
    elif len(json.dumps(config, default=str)) > MAX_CONFIG_BYTES:
        errors["config"] = f"is larger than {MAX_CONFIG_BYTES // 1024} KiB"
    total = body.get("total_steps", 0)
    try:
        total = _int(0 if total is None else total)
    except TypeError:
        errors["total_steps"] = "must be a whole number >= 0 (0: unknown)"
    tags = body.get("tags", [])
    if (
        not isinstance(tags, list)
        or len(tags) > 20
        or not all(isinstance(t, str) and 0 < len(t) <= 40 for t in tags)
    ):
        errors["tags"] = "must be a list of at most 20 labels of 1 to 40 characters"
    if errors:
        return {}, errors
    name = str(body["name"]).strip()
    return {"name": name, "source": source, "config": config, "total_steps": total, "tags": tags}, {}


@dataclass
class StepIn:
    """One step as it arrives: metrics and samples, shaped as dapo's StepReport for ``Run.record_step``."""

    step: int
    metrics: dict[str, Any] = field(default_factory=dict)
    samples: list[SampleIn] = field(default_factory=list)
    val_samples: list[SampleIn] = field(default_factory=list)
    wall_time: float = 0.0
    distributions: dict[str, Any] = field(default_factory=dict)


@dataclass
class SampleIn:
    """One sample as dapo's SampleRecord (the fields ``runs.models.Sample.from_record`` reads; the token
    arrays and update info it reads as None: not recorded)."""

    step: int
    split: str
    sample_index: int
    prompt: str
    response: str
    reward: float
    reward_scores: dict[str, float] | None
    acc: bool | None
    ground_truth: str = ""
    pred: str = ""
    advantage: float | None = None
    group: int = 0
    problem_index: int = 0
    length: int | None = None
    truncated: bool = False
    kept: bool = True
    score: float = 0.0
    overlong_penalty: float = 0.0
    discard_reason: str = ""


def clean_points(body: Any, source: str) -> tuple[list[StepIn], Errors]:
    """{"points": [{"step", "metrics": {name: number | null}, "wall_time"?}, ...]}: names mapped to ours."""
    points = body.get("points") if isinstance(body, dict) else None
    if not isinstance(points, list) or not points:
        return [], {"points": "give a non-empty list of {step, metrics, wall_time?}"}
    if len(points) > MAX_POINTS:
        return [], {"points": f"at most {MAX_POINTS} steps in one request"}
    steps: dict[int, StepIn] = {}
    errors: Errors = {}
    for i, point in enumerate(points):
        where = f"points[{i}]"
        if not isinstance(point, dict):
            errors[where] = "must be an object {step, metrics, wall_time?}"
            continue
        try:
            step = _int(point.get("step"))
        except TypeError:
            errors[f"{where}.step"] = "must be a whole number >= 0"
            continue
        metrics = point.get("metrics")
        if not isinstance(metrics, dict) or len(metrics) > MAX_METRICS_PER_STEP:
            errors[f"{where}.metrics"] = (
                f"must be an object of at most {MAX_METRICS_PER_STEP} {{name: number}}"
            )
            continue
        clean: dict[str, Any] = {}
        for name, value in metrics.items():
            if not name or len(name) > 128 or "\x00" in name:
                errors[f"{where}.metrics"] = f"name {name[:40]!r}: 1 to 128 characters"
                break
            try:
                clean[name] = _number(value)
            except TypeError:
                errors[f"{where}.metrics.{name[:60]}"] = (
                    f"must be a number or null, got {json.dumps(value)[:40]}"
                )
                break
        try:
            wall = _number(point.get("wall_time", time.time()))
        except TypeError:
            errors[f"{where}.wall_time"] = "must be a number (Unix time)"
            continue
        entry = steps.setdefault(step, StepIn(step=step))
        entry.metrics |= renamed(source, clean)
        entry.wall_time = wall if wall is not None and math.isfinite(wall) else time.time()
    return sorted(steps.values(), key=lambda s: s.step), errors


def clean_samples(body: Any) -> tuple[list[StepIn], Errors]:
    """{"samples": [{"step", "prompt", "completion", "rewards"?: {name: number}, "reward"?, "acc"?,
    "split"?: "train" | "val", "index"?, "ground_truth"?, "pred"?, "advantage"?, "group"?, "problem_index"?,
    "length"?, "truncated"?, "overlong_penalty"?}, ...]}; ``problem_index`` defaults to a hash of the
    prompt (``prompt_index``).
    ``reward`` defaults to the sum of ``rewards`` plus ``overlong_penalty``; ``index`` to the sample's place
    among this request's samples of its step and split (a re-sent request overwrites the same rows)."""
    samples = body.get("samples") if isinstance(body, dict) else None
    if not isinstance(samples, list) or not samples:
        return [], {"samples": "give a non-empty list of {step, prompt, completion, rewards | reward, ...}"}
    if len(samples) > MAX_SAMPLES:
        return [], {"samples": f"at most {MAX_SAMPLES} samples in one request"}
    steps: dict[int, StepIn] = {}
    seen: dict[tuple[int, str], int] = {}
    errors: Errors = {}
    for i, raw in enumerate(samples):
        where = f"samples[{i}]"
        try:
            sample = _sample(raw, seen)
        except ValueError as e:
            field_name, message = e.args
            errors[f"{where}.{field_name}" if field_name else where] = message
            continue
        entry = steps.setdefault(sample.step, StepIn(step=sample.step))
        (entry.val_samples if sample.split == "val" else entry.samples).append(sample)
    return sorted(steps.values(), key=lambda s: s.step), errors


def prompt_index(prompt: str) -> int:
    """A problem's index when the trainer sends none: the same prompt is the same problem at every step
    (the inspector's problem timeline follows it), from the first 28 bits of its SHA-256."""
    return int(hashlib.sha256(prompt.encode("utf-8", "replace")).hexdigest()[:7], 16)


def _sample(raw: Any, seen: dict[tuple[int, str], int]) -> SampleIn:
    """One sample, or ValueError(field, message)."""
    known = {"step", "split", "index", "prompt", "completion", "rewards", "reward", "acc", "ground_truth",
             "pred", "advantage", "group", "problem_index", "length", "truncated",
             "overlong_penalty"}  # fmt: skip
    if not isinstance(raw, dict):
        raise ValueError("", "must be an object {step, prompt, completion, rewards | reward, ...}")
    for key in raw:
        if key not in known:
            raise ValueError(str(key)[:60], f"unknown field; valid: {', '.join(sorted(known))}")

    def get(name: str, convert: Any, default: Any = None, message: str = "") -> Any:
        if name not in raw or (raw[name] is None and default is not ...):
            if default is ...:
                raise ValueError(name, f"is required: {message}")
            return default
        try:
            return convert(raw[name])
        except TypeError:
            raise ValueError(name, message) from None

    step = get("step", _int, ..., "a whole number >= 0")
    split = raw.get("split", "train")
    if split not in ("train", "val"):
        raise ValueError("split", 'must be "train" or "val"')
    prompt = get("prompt", _text, ..., f"a string of at most {MAX_TEXT} characters")
    completion = get("completion", _text, ..., f"a string of at most {MAX_TEXT} characters")
    rewards = raw.get("rewards")
    if rewards is not None:
        if not isinstance(rewards, dict) or len(rewards) > MAX_REWARDS:
            raise ValueError(
                "rewards", f"must be an object of at most {MAX_REWARDS} {{reward function: number}}"
            )
        try:
            rewards = {_text(k, 200): _number(v) for k, v in rewards.items()}
        except TypeError:
            raise ValueError("rewards", "each value must be a number or null (not scored)") from None
    penalty = get("overlong_penalty", _number, 0.0, "a number (<= 0)")
    reward = get("reward", _number, None, "a number")
    if reward is None:
        if not rewards:
            raise ValueError("reward", "give reward, or rewards to sum")
        reward = sum(v for v in rewards.values() if v is not None and math.isfinite(v)) + (penalty or 0.0)
    acc = raw.get("acc")
    if acc is not None and not isinstance(acc, bool):
        raise ValueError("acc", "must be true, false or null (not judged)")
    key = (step, split)
    index = get("index", _int, seen.get(key, 0), "a whole number >= 0")
    seen[key] = max(seen.get(key, 0), index + 1)
    return SampleIn(
        step=step,
        split=split,
        sample_index=index,
        prompt=prompt,
        response=completion,
        reward=reward if math.isfinite(reward) else 0.0,
        reward_scores={k: v for k, v in rewards.items() if v is not None} if rewards else None,
        acc=acc,
        ground_truth=get("ground_truth", lambda v: _text(v, 20000), "", "a string"),
        pred=get("pred", lambda v: _text(v, 20000), "", "a string"),
        advantage=get("advantage", _number, None, "a number"),
        group=get("group", _int, 0, "a whole number >= 0"),
        problem_index=get("problem_index", _int, prompt_index(prompt), "a whole number >= 0"),
        length=get("length", _int, None, "a whole number >= 0 (tokens)"),
        truncated=get("truncated", _bool, False, "true or false"),
        score=reward - (penalty or 0.0) if math.isfinite(reward) else 0.0,
        overlong_penalty=penalty if penalty is not None and math.isfinite(penalty) else 0.0,
    )


# ---- writing ------------------------------------------------------------------------------------


def writable(run: Run) -> None:
    """ExternalError(409) unless ``run`` is an external run still running."""
    if not run.is_external:
        raise ExternalError(409, f"run #{run.pk} is a run of this platform: its steps come from its worker")
    if run.status != Status.RUNNING:
        raise ExternalError(409, f"run #{run.pk} is {run.status}: it takes no more records")


def create(owner: Any, fields: dict[str, Any]) -> Run:
    """A running external run (no quota: nothing of this platform's compute is used)."""
    now = timezone.now()
    run = Run.objects.create(
        owner=owner,
        kind=Kind.EXTERNAL,
        status=Status.RUNNING,
        started_at=now,
        attempt_started_at=now,
        last_active_at=now,
        running_since=now,
        attempts=1,
        **fields,
    )
    publish(run.pk, status_event(run))
    return run


def record(run: Run, steps: list[StepIn]) -> int:
    """Write each step as a native step report is written (``Run.record_step``), all in one transaction
    (a failure leaves none of them), then publish each step's live event. Returns the steps written."""
    writable(run)
    with transaction.atomic():
        Run.lock(run.pk)
        run.reload()
        writable(run)
        newest = run.step
        for step in steps:
            run.record_step(step)  # type: ignore[arg-type]  # a StepIn has what a StepReport gives it
            newest = max(newest, step.step)
        if newest != run.step:  # samples or points of an older step arrived late: progress stays
            Run.objects.filter(pk=run.pk).update(step=newest)
            run.step = newest
    for step in steps:
        publish(run.pk, step_event(run, step.step, step.metrics, step.samples or step.val_samples))
    return len(steps)


def clean_finish(body: Any) -> tuple[dict[str, Any], Errors]:
    """{"status": "succeeded" | "failed", "error"?: str}."""
    if not isinstance(body, dict):
        return {}, {"body": "must be a JSON object"}
    status = body.get("status")
    if status not in (Status.SUCCEEDED, Status.FAILED):
        return {}, {"status": 'must be "succeeded" or "failed"'}
    error = body.get("error") or ""
    if not isinstance(error, str):
        return {}, {"error": "must be a string"}
    return {"status": status, "error": error[:20000]}, {}


def finish(run: Run, status: str, error: str) -> None:
    writable(run)
    run.finish(status, error)
    publish(run.pk, status_event(run))
