"""The catalog: datasets and base models a run can be configured with.

Entries are registered from local paths (nothing is downloaded). Model paths must lie inside one of
``settings.DAPO_MODEL_ROOTS``; :func:`catalog.paths.resolve_model_path` enforces it.
"""

from __future__ import annotations

from pathlib import Path

from django.db import models


class Dataset(models.Model):
    FORMATS = [("parquet", "Parquet (DAPO schema)"), ("jsonl", "JSON lines"), ("json", "JSON list")]

    name = models.CharField(max_length=200, unique=True)
    path = models.CharField(max_length=1024, help_text="The training split's file.")
    val_path = models.CharField(max_length=1024, blank=True, help_text="The validation split's file.")
    format = models.CharField(max_length=16, choices=FORMATS, default="parquet")
    row_count = models.PositiveIntegerField(default=0)
    splits = models.JSONField(default=dict, blank=True, help_text='Rows per split: {"train": n, "val": m}.')
    schema = models.JSONField(default=dict, blank=True, help_text="Column name to type.")
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def config_overrides(self) -> dict[str, str]:
        """The run-config fields this dataset sets."""
        return {"data.train_path": self.path, "data.val_path": self.val_path}


class BaseModel(models.Model):
    name = models.CharField(max_length=200, unique=True)
    path = models.CharField(max_length=1024, help_text="Local HuggingFace model directory.")
    architecture = models.CharField(max_length=200, blank=True)
    parameter_count = models.BigIntegerField(default=0)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def size_label(self) -> str:
        n = self.parameter_count
        for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
            if n >= scale:
                return f"{n / scale:.1f}{unit}"
        return str(n)

    def config_overrides(self) -> dict[str, str]:
        return {"model.path": self.path}

    @property
    def exists(self) -> bool:
        return Path(self.path).is_dir()
