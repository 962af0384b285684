"""A run's checkpoint exported as a HuggingFace model folder into the model catalog (runs.model_exports
validates and queues it; the worker writes it): queued → running → done | failed."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone


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
