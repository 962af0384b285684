"""What a user saves: views of the runs list (columns, sort, filter) and comparisons (runs, metrics,
smoothing, axes) under a name. A comparison has its own URL and can be shared read-only (runs.access)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.urls import reverse


class SavedView(models.Model):
    """A named view of the runs list: ``columns`` (config keys or metric names), ``sort`` and ``filter``
    in the syntax of runs.run_filter, and which runs by archive state ("active", "archived", "all")."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="run_views")
    name = models.CharField(max_length=100)
    columns = models.JSONField(default=list, blank=True)
    sort = models.CharField(max_length=200, blank=True)
    filter = models.CharField(max_length=2000, blank=True)
    archived = models.CharField(max_length=16, default="active")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["owner", "name"], name="saved_view_owner_name")]

    def __str__(self) -> str:
        return self.name

    def query(self) -> dict[str, str]:
        """The runs list's query string parameters for this view."""
        return {
            "filter": self.filter,
            "sort": self.sort,
            "columns": ",".join(self.columns),
            "archived": self.archived,
            "view": self.name,
        }


class SavedComparison(models.Model):
    """Runs overlaid on the compare page with its settings, under a name and a URL of its own."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_comparisons"
    )
    name = models.CharField(max_length=200)
    runs = models.ManyToManyField("runs.Run", related_name="saved_comparisons")
    run_ids = models.JSONField(default=list, help_text="The runs in the order they were compared.")
    metrics = models.JSONField(default=list, blank=True)
    smoothing = models.FloatField(default=0.6)
    x = models.CharField(max_length=16, default="step", help_text="step, wall or tokens")
    by = models.CharField(max_length=16, default="none", help_text="none, seed or group")
    shared_users = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="comparisons_shared_with"
    )
    shared_groups = models.ManyToManyField("auth.Group", blank=True, related_name="comparisons_shared_with")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("compare:saved", args=[self.pk])

    def settings(self) -> dict[str, Any]:
        """The compare page's controls, as its query string names them."""
        return {"metrics": self.metrics, "smooth": self.smoothing, "x": self.x, "by": self.by}
