"""The catalog: datasets and base models a run can be configured with.

Entries are registered from local paths or uploaded (nothing is downloaded). Model paths must lie inside
one of ``settings.DAPO_MODEL_ROOTS`` (:func:`catalog.paths.check_model_path`); datasets registered from the
web inside ``settings.DAPO_DATASET_ROOTS`` (:func:`catalog.paths.check_dataset_path`). A dataset's problems
are imported as :class:`DatasetRow` rows, one per problem as ``dapo.data.problems`` loads it, so the browser
shows what a run trains on.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import models

from catalog.paths import same_file
from dapo.data.problems import prompt_messages

SPLITS = [("train", "train"), ("val", "validation")]


def name_key(name: str) -> str:
    """A dataset name as it is compared: spaces collapsed, NFKC case-folded ("Quiz", "QUIZ" and "ｑｕｉｚ"
    are one name). Every lookup by name (upload, registration, the API, the command) goes through it."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())
    return " ".join(folded.split())


class DatasetQuerySet(models.QuerySet["Dataset"]):
    def lines(self, name: str, owner_id: int | None) -> DatasetQuerySet:
        """The versions of one owner's dataset of this name (any case); ``owner_id`` None: the server's."""
        return self.filter(name_key=name_key(name), created_by_id=owner_id)


class Dataset(models.Model):
    """One version of a dataset: a re-upload (or a re-registration of changed files) under the same name
    is a new row with the next ``version``; the older ones keep their rows and files and stay readable.

    Versions belong to one owner (``created_by``; none for files registered on the server by the command
    line): a name is unique per owner, compared by :func:`name_key`, and another user's upload of the same
    name is that user's own dataset, never a version of this one."""

    FORMATS = [("parquet", "Parquet (DAPO schema)"), ("jsonl", "JSON lines"), ("json", "JSON list")]

    name = models.CharField(max_length=200)
    name_key = models.CharField(
        max_length=800, editable=False, help_text="The name case-folded (catalog.models.name_key)."
    )
    version = models.PositiveIntegerField(
        default=1, help_text="1, 2, ...: the versions of one owner's name share it."
    )
    path = models.CharField(max_length=1024, help_text="The training split's file.")
    val_path = models.CharField(max_length=1024, blank=True, help_text="The validation split's file.")
    format = models.CharField(max_length=16, choices=FORMATS, default="parquet")
    row_count = models.PositiveIntegerField(default=0)
    splits = models.JSONField(default=dict, blank=True, help_text='Rows per split: {"train": n, "val": m}.')
    schema = models.JSONField(default=dict, blank=True, help_text="Column name to type.")
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,  # SET_NULL would hand a user's datasets to the server's names
        related_name="+",
        help_text="The owner of this name's versions; empty: registered on the server (command line).",
    )
    uploaded = models.BooleanField(default=False, help_text="The files were uploaded (kept under var/).")
    fingerprint = models.CharField(
        max_length=200,
        blank=True,
        help_text="Size and mtime of the imported files: unchanged files are not re-read.",
    )
    files = models.JSONField(
        default=dict,
        blank=True,
        help_text='Per split, the imported file: {"train": {"sha256", "bytes", "mtime_ns"}, "val": ...}.',
    )
    content_hash = models.CharField(
        max_length=64, blank=True, help_text="SHA-256 over the splits' file hashes: this version's identity."
    )

    objects = DatasetQuerySet.as_manager()

    class Meta:
        ordering = ["name", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["created_by", "name_key", "version"], name="dataset_owner_name_version"
            ),
            models.UniqueConstraint(  # NULLs are distinct in a unique index: the server's names need this one
                fields=["name_key", "version"],
                condition=models.Q(created_by__isnull=True),
                name="dataset_server_name_version",
            ),
        ]
        indexes = [models.Index(fields=["name_key", "created_by"], name="dataset_name_key")]

    def __str__(self) -> str:
        return self.name if self.version == 1 else f"{self.name} v{self.version}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Keeps ``name_key`` in step with ``name`` (also when only ``name`` is in ``update_fields``)."""
        self.name_key = name_key(self.name)
        fields = kwargs.get("update_fields")
        if fields is not None and "name" in fields:
            kwargs["update_fields"] = {*fields, "name_key"}
        super().save(*args, **kwargs)

    @property
    def label(self) -> str:
        """The name with its version: "quiz v2"."""
        return f"{self.name} v{self.version}"

    @property
    def owner_label(self) -> str:
        """Whose versions these are: a username, or "the server" for the command line's."""
        return self.created_by.get_username() if self.created_by else "the server"

    def versions(self) -> models.QuerySet[Dataset]:
        """Every version of this dataset (its owner's, under its name), newest first."""
        return Dataset.objects.lines(self.name, self.created_by_id).order_by("-version")

    def is_latest(self) -> bool:
        return not self.versions().filter(version__gt=self.version).exists()

    def config_overrides(self) -> dict[str, str]:
        """The run-config fields this dataset sets."""
        return {"data.train_path": self.path, "data.val_path": self.val_path}

    def disagreements(self, paths: Mapping[str, Any]) -> dict[str, str]:
        """{field: message} for each data path in ``paths`` ({"data.val_path": ...}, the fields a user
        wrote) that is not this version's file: a run must not silently train or validate on another."""
        errors = {}
        for field, own in self.config_overrides().items():
            if field in paths and not same_file(str(paths[field] or ""), own):
                has = f"has {own!r}" if own else "has no validation file"
                errors[field] = (
                    f"names {str(paths[field] or '')!r}, but the dataset picked, {self.label} of "
                    f"{self.owner_label}, {has}: use the dataset's file, or pick no dataset"
                )
        return errors


class DatasetRow(models.Model):
    """One problem of a dataset split, as ``dapo.data.problems`` loads it (after de-duplication)."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="rows")
    split = models.CharField(max_length=8, choices=SPLITS)
    index = models.IntegerField(help_text="dapo.data.problems's Problem.index: a run's Sample.problem_index.")
    prompt = models.JSONField(help_text="The prompt as stored: a list of chat messages, or text.")
    prompt_text = models.TextField(help_text="The messages' contents, joined by blank lines (searched).")
    prompt_chars = models.IntegerField(help_text="Characters of prompt_text.")
    ground_truth = models.TextField()
    data_source = models.CharField(max_length=200)
    extra = models.JSONField(default=dict, blank=True, help_text="The row's other columns.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["dataset", "split", "index"], name="datasetrow_unique_index")
        ]
        indexes = [
            models.Index(fields=["dataset", "split", "data_source"], name="datasetrow_source"),
            models.Index(fields=["dataset", "split", "prompt_chars"], name="datasetrow_chars"),
        ]
        ordering = ["split", "index"]

    def __str__(self) -> str:
        return f"{self.dataset_id}/{self.split}/{self.index}"

    @property
    def messages(self) -> list[dict]:
        """The chat messages the trainer builds from the stored prompt."""
        return prompt_messages(self.prompt)


class BaseModel(models.Model):
    name = models.CharField(max_length=200, unique=True)
    path = models.CharField(max_length=1024, help_text="Local HuggingFace model directory.")
    architecture = models.CharField(max_length=200, blank=True)
    parameter_count = models.BigIntegerField(default=0)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    details = models.JSONField(
        default=dict,
        blank=True,
        help_text="Read from the folder at registration (catalog.model_info): layers, hidden size, "
        "vocabulary, dtype, weight files...",
    )

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
