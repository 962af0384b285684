"""What a run records: metric points, samples, checkpoints (keyed so that a replayed step overwrites)."""

from __future__ import annotations

import math
from typing import Any

from django.db import connection, models

from dapo.distributions import LEVELS, NAMES


def clean_metrics(metrics: dict[str, Any]) -> dict[str, float | None]:
    """Names trimmed to the column size; non-finite or non-numeric values stored as null (JSON has no NaN)."""
    out: dict[str, float | None] = {}
    for name, value in metrics.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        out[str(name)[:128]] = number if math.isfinite(number) else None
    return out


def distinct_ascending(model: type[models.Model], column: str, **equal: Any) -> list[Any]:
    """The distinct values of ``column`` among the rows matching ``equal`` (column = value), ascending, by a
    loose index scan: one index probe per distinct value (an index must lead with the ``equal`` columns then
    ``column``), never a read of every matching row as a DISTINCT would. Column names come from code."""
    table = model._meta.db_table
    where = " AND ".join(f"{name} = %s" for name in equal)
    sql = (
        f"WITH RECURSIVE d(v) AS (SELECT MIN({column}) FROM {table} WHERE {where} UNION ALL "
        f"SELECT (SELECT MIN({column}) FROM {table} WHERE {where} AND {column} > d.v) FROM d "
        "WHERE d.v IS NOT NULL) SELECT v FROM d WHERE v IS NOT NULL"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*equal.values(), *equal.values()])
        return [value for (value,) in cursor.fetchall()]


DISCARD_REASONS = ("all_correct", "all_wrong", "no_variance", "surplus", "overlong")
"""Sample.discard_reason's values besides "" (trained): a group's (dapo.sampling.DISCARD_REASONS), then a
sample's own (overlong filtering masked it)."""
REASON_FILTERS = ("", "trained", "discarded", *DISCARD_REASONS)
"""What a reason filter takes: any, trained (in the loss), discarded (any reason), or one reason."""


def filter_by_reason(qs: models.QuerySet[Any], reason: str) -> models.QuerySet[Any]:
    """The samples of ``qs`` with ``reason`` (one of REASON_FILTERS; "" keeps all): the inspector's and
    the API's reason filter."""
    if reason == "trained":
        return qs.filter(kept=True).exclude(discard_reason="overlong")
    if reason == "discarded":
        return qs.filter(models.Q(kept=False) | models.Q(discard_reason="overlong"))
    return qs.filter(discard_reason=reason) if reason else qs


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class MetricPoint(models.Model):
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="metric_points")
    step = models.IntegerField()
    name = models.CharField(max_length=128)
    value = models.FloatField(null=True, help_text="null for a non-finite value (NaN, inf).")
    wall_time = models.FloatField(default=0.0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "name", "step"], name="metric_unique_step")]
        indexes = [
            models.Index(fields=["run", "step"], name="metric_run_step"),  # catch-up: every metric after N
            # covering index of curve reads (run, name, step range → value) without touching the table
            models.Index(fields=["run", "name", "step", "value"], name="metric_curve"),
        ]


class Sample(models.Model):
    SPLITS = [("train", "train"), ("val", "validation")]
    # The one list of a sample's fields, in the order lists, exports and the API show them.
    SCORING_FIELDS = [
        "ground_truth",
        "pred",
        "score",
        "acc",
        "overlong_penalty",
        "reward",
        "advantage",
        "length",
        "truncated",
        "kept",
        "discard_reason",
    ]
    """What the reward and the advantage made of the response (the inspector's list columns)."""
    TOKEN_FIELDS = [
        "tokens",
        "token_logprobs",
        "token_entropy",
        "token_ratio",
        "token_old_logprobs",
        "token_new_logprobs",
    ]
    """Per-token arrays: loaded only for the one sample shown in full, and in exports that ask."""
    UPDATABLE = [
        "group",
        "problem_index",
        "prompt",
        "response",
        *SCORING_FIELDS,
        *TOKEN_FIELDS,
        "reward_scores",
        "update_info",
    ]
    """What a re-reported step overwrites (the key is run, step, split, sample_index)."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="samples")
    step = models.IntegerField()
    split = models.CharField(max_length=8, choices=SPLITS)
    sample_index = models.IntegerField()
    group = models.IntegerField()
    problem_index = models.IntegerField()
    prompt = models.TextField()
    response = models.TextField()
    ground_truth = models.TextField()
    pred = models.TextField()
    score = models.FloatField()
    acc = models.BooleanField()
    overlong_penalty = models.FloatField()
    reward = models.FloatField()
    advantage = models.FloatField()
    length = models.IntegerField()
    truncated = models.BooleanField()
    kept = models.BooleanField()
    tokens = models.JSONField(null=True, blank=True)
    token_logprobs = models.JSONField(null=True, blank=True)
    token_entropy = models.JSONField(null=True, blank=True)
    token_ratio = models.JSONField(null=True, blank=True)
    reward_scores = models.JSONField(null=True, blank=True)
    """Each reward's own score by name, before its weight (dapo SampleRecord.reward_scores)."""
    discard_reason = models.CharField(max_length=16, blank=True, default="", db_default="")
    """Why the step did not train on it ("" trained; inspector.discards.REASONS); "" in rows of older runs."""
    token_old_logprobs = models.JSONField(null=True, blank=True)
    """log π_old per token as the loss used it (the objective explainer; samples with token data)."""
    token_new_logprobs = models.JSONField(null=True, blank=True)
    """log π_θ per token at the sample's first optimiser step."""
    update_info = models.JSONField(null=True, blank=True)
    """A trained sample's mini-batch and its counts (dapo SampleRecord.update_info)."""

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "split", "step", "sample_index"], name="sample_unique_index"
            )
        ]
        indexes = [
            # a problem's timeline within a run, and its solve rate across the runs of a dataset
            models.Index(fields=["run", "split", "problem_index", "step"], name="sample_problem"),
        ]
        ordering = ["step", "split", "sample_index"]

    @classmethod
    def from_record(cls, run_id: int, record: Any) -> Sample:
        fields: dict[str, Any] = {n: getattr(record, n, None) for n in cls.UPDATABLE if n != "reward_scores"}
        fields["discard_reason"] = str(fields["discard_reason"] or "")[:16]
        for name in ("token_old_logprobs", "token_new_logprobs"):  # NaN and Infinity are not JSON
            values = fields[name]
            fields[name] = [_finite(v) for v in values] if isinstance(values, list) else None
        for name in ("score", "overlong_penalty", "reward", "advantage"):
            value = float(fields[name])
            fields[name] = value if math.isfinite(value) else 0.0
        scores = getattr(record, "reward_scores", None) or {}  # records written before rewards combined
        fields["reward_scores"] = {
            str(k)[:200]: float(v) if math.isfinite(float(v)) else 0.0 for k, v in list(scores.items())[:64]
        } or None  # NaN and Infinity are not JSON
        return cls(
            run_id=run_id, step=record.step, split=record.split, sample_index=record.sample_index, **fields
        )

    def summary(self, max_chars: int = 2000) -> dict[str, Any]:
        """The sample for a table row or a live event: long texts cut (the API serves them in full)."""
        return {
            "id": self.pk,
            "step": self.step,
            "split": self.split,
            "sample_index": self.sample_index,
            "group": self.group,
            "prompt": self.prompt[:max_chars],
            "response": self.response[:max_chars],
            "text_cut": len(self.prompt) > max_chars or len(self.response) > max_chars,
            "ground_truth": self.ground_truth[:200],
            "pred": self.pred[:200],
            "score": self.score,
            "acc": self.acc,
            "reward": self.reward,
            "advantage": self.advantage,
            "overlong_penalty": self.overlong_penalty,
            "reward_scores": self.reward_scores,
            "length": self.length,
            "truncated": self.truncated,
            "kept": self.kept,
            "discard_reason": self.discard_reason,
        }


class Checkpoint(models.Model):
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="checkpoints")
    step = models.IntegerField()
    path = models.CharField(max_length=1024)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="checkpoint_unique_step")]
        ordering = ["step"]


DISTRIBUTION_LEVELS = LEVELS
"""Percent levels of a step's quantiles (dapo.distributions, torch-free)."""


def clean_quantiles(distributions: dict[str, Any]) -> dict[str, list[float | None]]:
    """The known quantities, each a list of at most 101 numbers (non-finite ones as null)."""
    out: dict[str, list[float | None]] = {}
    for name in NAMES:
        values = distributions.get(name)
        if isinstance(values, list | tuple) and values:
            out[name] = list(clean_metrics({str(i): v for i, v in enumerate(values[:101])}).values())
    return out


class StepDistribution(models.Model):
    """A step's quantiles of one quantity (dapo.distributions: levels 0, 5, ..., 100 percent)."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="distributions")
    step = models.IntegerField()
    name = models.CharField(max_length=32)
    quantiles = models.JSONField(help_text="Values at the levels 0, 5, ..., 100 percent (null: not finite).")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "name", "step"], name="distribution_unique_step")
        ]
        ordering = ["step"]


class HardwareSample(models.Model):
    """One worker's resource use at one moment (dapo.hardware): sampled every few seconds while it runs."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="hardware_samples")
    time = models.FloatField(help_text="Unix time of the sample.")
    worker = models.CharField(max_length=64, help_text='"controller", "learner 0", "rollout 1", ...')
    data = models.JSONField(help_text="{quantity: number}: cpu_percent, rss_gb, sys_mem_used_gb, gpu_util...")

    class Meta:
        indexes = [models.Index(fields=["run", "time"], name="hardware_run_time")]
        ordering = ["time", "id"]

    def summary(self) -> dict[str, Any]:
        return {"time": self.time, "worker": self.worker, "values": self.data}

    @classmethod
    def from_record(cls, run_id: int, record: Any) -> HardwareSample:
        """From a dapo HardwareSample: names and numbers as for metrics, non-finite values left out."""
        values = {
            k: v for k, v in clean_metrics(dict(list(record.values.items())[:32])).items() if v is not None
        }
        return cls(run_id=run_id, time=float(record.time), worker=str(record.worker)[:64], data=values)
