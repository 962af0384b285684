"""The states a run goes through, its kinds, and the errors of its lifecycle."""

from __future__ import annotations

from django.db import models
from django.http import Http404


class Status(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINAL = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)


class Kind(models.TextChoices):
    TRAINING = "training"
    EVALUATION = "evaluation"
    """No training: n samples per problem of the validation sets, scored once (runs.evaluations)."""
    EXTERNAL = "external"
    """Trained by TRL or verl: its metrics and samples are sent in (runs.external), no worker runs it."""


class Source(models.TextChoices):
    """Who trained the run: this platform's engine, or another trainer whose records were sent in."""

    PLATFORM = "", "this platform"
    TRL = "trl", "TRL"
    VERL = "verl", "verl"


class LeaseLost(Exception):
    """The worker writing for a run no longer holds its lease: another controller owns the run now."""


class RunGone(Http404):
    """The run was deleted while a request worked on it (another tab, a script): a 404 that says so (pages
    and the API answer Http404 as 404), where the write would have failed with a 500."""

    def __init__(self, run_id: int | None) -> None:
        super().__init__(
            f"Run #{run_id} was deleted meanwhile, by another request: this one changed nothing."
        )
