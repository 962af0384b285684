"""What a run records: metric points, samples, checkpoints, per-step distributions and hardware samples
(keyed so that a replayed step overwrites)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.db import models

from runs.step_values import clean_metrics, clean_quantiles, finite


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
    acc = models.BooleanField(null=True)
    """Correct or not; null where the trainer that made the sample did not judge it (an external run)."""
    overlong_penalty = models.FloatField()
    reward = models.FloatField()
    advantage = models.FloatField(null=True)
    """null where the trainer that made the sample did not record it (a verl dump)."""
    length = models.IntegerField(null=True)
    """Response tokens; null where the trainer that made the sample did not record them (a verl dump)."""
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
            fields[name] = [finite(v) for v in values] if isinstance(values, list) else None
        for name in ("score", "overlong_penalty", "reward", "advantage"):
            if name == "advantage" and fields[name] is None:  # not recorded (an external run's sample)
                continue
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


class StepDistribution(models.Model):
    """A step's quantiles of one quantity (dapo.loop.distributions: levels 0, 5, ..., 100 percent)."""

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
    """One worker's resource use at one moment (dapo.loop.hardware), sampled every few seconds."""

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


@dataclass
class StepRows:
    """A step's rows, as ``Run.record_step`` writes them in its transaction: a replayed step (a redelivered
    report, steps recomputed after a resume) overwrites its rows, never duplicates them."""

    points: list[MetricPoint]
    samples: list[Sample]
    distributions: list[StepDistribution]

    @classmethod
    def of(cls, run_id: int, report: Any, metrics: dict[str, float | None]) -> StepRows:
        """The rows of a dapo StepReport whose metrics were cleaned (``clean_metrics``)."""
        points = [
            MetricPoint(run_id=run_id, step=report.step, name=n, value=v, wall_time=report.wall_time)
            for n, v in metrics.items()
        ]
        samples = [Sample.from_record(run_id, r) for r in [*report.samples, *report.val_samples]]
        quantiles = clean_quantiles(getattr(report, "distributions", None) or {})
        distributions = [
            StepDistribution(run_id=run_id, step=report.step, name=n, quantiles=q)
            for n, q in quantiles.items()
        ]
        return cls(points, samples, distributions)

    def write(self) -> None:
        MetricPoint.objects.bulk_create(
            self.points,
            update_conflicts=True,
            unique_fields=["run", "name", "step"],
            update_fields=["value", "wall_time"],
            batch_size=500,
        )
        Sample.objects.bulk_create(
            self.samples,
            update_conflicts=True,
            unique_fields=["run", "split", "step", "sample_index"],
            update_fields=Sample.UPDATABLE,
            batch_size=200,
        )
        StepDistribution.objects.bulk_create(
            self.distributions,
            update_conflicts=True,
            unique_fields=["run", "name", "step"],
            update_fields=["quantiles"],
        )
