"""Exporting a run's checkpoint as a HuggingFace model folder, registered in the model catalog.

The web process validates the request (a checkpoint of the run that is still on disk, a free catalog
name) and queues ``worker.tasks.export_model``; the worker (which may import torch) writes the folder with
``dapo.export`` under a model root and registers it as a ``catalog.BaseModel``, so a new run or an
evaluation can start from it. Lifecycle: queued → running → done | failed (with the reason).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from catalog.models import BaseModel
from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from runs import dispatch
from runs.configuring import validate_name

Errors = dict[str, str]


class ExportStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class ModelExport(models.Model):
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="model_exports")
    step = models.IntegerField(help_text="The checkpoint's step.")
    name = models.CharField(max_length=200, help_text="The catalog name of the exported model.")
    status = models.CharField(max_length=16, choices=ExportStatus.choices, default=ExportStatus.QUEUED)
    error = models.TextField(blank=True)
    path = models.CharField(max_length=1024, blank=True, help_text="The folder written.")
    base_model = models.ForeignKey(
        "catalog.BaseModel", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"export {self.pk} of run {self.run_id} step {self.step}"

    def state(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "run": self.run_id,
            "step": self.step,
            "name": self.name,
            "status": self.status,
            "error": self.error,
            "path": self.path,
            "base_model": self.base_model_id,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
        }

    def claim(self) -> bool:
        """queued → running, once (a redelivered message finds it taken)."""
        won = ModelExport.objects.filter(pk=self.pk, status=ExportStatus.QUEUED).update(
            status=ExportStatus.RUNNING
        )
        self.refresh_from_db()
        return bool(won)

    def finish(self, status: str, *, error: str = "", path: str = "", base_model: Any = None) -> None:
        self.status, self.error, self.path = status, error[:20000], path
        self.base_model, self.finished_at = base_model, timezone.now()
        self.save(update_fields=["status", "error", "path", "base_model", "finished_at"])


def steps_on_disk(run: Any) -> list[int]:
    """Steps of the run's recorded checkpoints whose weights are still on disk (not pruned), ascending."""
    return [c.step for c in run.checkpoints.order_by("step") if (Path(c.path) / "state.pt").is_file()]


def request_export(
    run: Any, user: Any, step: Any = None, name: Any = None
) -> tuple[ModelExport | None, Errors]:
    """Validate and queue an export of ``run`` at ``step`` (None: its newest checkpoint on disk) named
    ``name`` in the catalog (None: "<run name> step <N>"). Returns the export, or None and the errors."""
    steps = steps_on_disk(run)
    if not steps:
        return None, {"step": "the run has no checkpoint on disk to export"}
    if step is None:
        step = steps[-1]
    elif isinstance(step, str) and step.strip().isascii() and step.strip().isdigit():
        step = int(step.strip())  # a form's field
    if isinstance(step, bool) or not isinstance(step, int):
        return None, {"step": f"must be an integer step; steps on disk: {_listed(steps)}"}
    if step not in steps:
        return None, {"step": f"no checkpoint of step {step} on disk; steps on disk: {_listed(steps)}"}
    if name is None or (isinstance(name, str) and not name.strip()):
        name = f"{run.name} step {step}"[:200]
    errors = validate_name(name)
    if errors:
        return None, errors
    name = name.strip()
    taken = ModelExport.objects.filter(name=name).exclude(status=ExportStatus.FAILED).exists()
    if taken or BaseModel.objects.filter(name=name).exists():
        return None, {"name": f"a model named {name!r} is already in the catalog (or being exported)"}
    with transaction.atomic():
        export = ModelExport.objects.create(run=run, step=step, name=name, requested_by=user)
        dispatch.on_commit("export_model", export.pk)
    return export, {}


def _listed(steps: list[int]) -> str:
    return ", ".join(map(str, steps[-20:])) + (f" (and {len(steps) - 20} older)" if len(steps) > 20 else "")
