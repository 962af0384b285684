"""The dataset page's two forms: upload files, or register files already on the server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django import forms

from catalog.importer import SplitFile
from catalog.models import Dataset
from catalog.paths import PathError, check_dataset_path, portable
from catalog.uploads import StagedUpload, max_upload_bytes

UPLOAD_SUFFIXES = (".parquet", ".jsonl")
_FILE = forms.FileInput(attrs={"accept": ",".join(UPLOAD_SUFFIXES)})


class _Named(forms.Form):
    name = forms.CharField(
        max_length=200,
        help_text="Unique in the catalog; runs refer to it.",
        error_messages={"required": "give the dataset a name"},
    )
    description = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))

    def clean_name(self) -> str:
        name = " ".join(self.cleaned_data["name"].replace("\x00", "").split())
        if not name:
            raise forms.ValidationError("give the dataset a name")
        if Dataset.objects.filter(name__iexact=name).exists():
            raise forms.ValidationError(f"a dataset named {name!r} already exists: choose another name")
        return name


class UploadForm(_Named):
    train = forms.FileField(required=False, label="Train file", allow_empty_file=True, widget=_FILE)
    val = forms.FileField(
        required=False, label="Validation file (optional)", allow_empty_file=True, widget=_FILE
    )

    def __init__(self, *args: Any, too_large: dict[str, str] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "upload-%s")
        super().__init__(*args, **kwargs)
        self.too_large = too_large or {}

    def clean_train(self) -> StagedUpload | None:
        return self._file("train", required=True)

    def clean_val(self) -> StagedUpload | None:
        return self._file("val", required=False)

    def _file(self, field: str, *, required: bool) -> StagedUpload | None:
        if field in self.too_large:
            mb = max_upload_bytes() // (1024 * 1024)
            raise forms.ValidationError(
                f"{self.too_large[field]} is larger than the upload limit of {mb} MB (DAPO_MAX_UPLOAD_MB); "
                "nothing was kept. Register a file on the server for bigger datasets."
            )
        upload = self.cleaned_data.get(field)
        if upload is None:
            if required:
                raise forms.ValidationError("choose a .parquet or .jsonl file")
            return None
        if not isinstance(upload, StagedUpload):  # only the dataset upload handler produces files here
            raise forms.ValidationError("the upload was not received; try again")
        if Path(upload.name or "").suffix.lower() not in UPLOAD_SUFFIXES:
            raise forms.ValidationError(
                f"{upload.name}: expected a .parquet file (DAPO schema) "
                "or a .jsonl file (one JSON object a line)"
            )
        if not upload.size:
            raise forms.ValidationError(f"{upload.name} is empty (0 bytes)")
        return upload

    def split_files(self) -> list[SplitFile]:
        return [
            SplitFile(split, upload.path, f"{split} file {upload.name}")
            for split in ("train", "val")
            if (upload := self.cleaned_data.get(split)) is not None
        ]


class RegisterForm(_Named):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "register-%s")
        super().__init__(*args, **kwargs)

    train_path = forms.CharField(
        max_length=1024,
        label="Train file on the server",
        widget=forms.TextInput(attrs={"placeholder": "assets/demo/data/train.parquet"}),
    )
    val_path = forms.CharField(
        max_length=1024,
        required=False,
        label="Validation file (optional)",
        widget=forms.TextInput(attrs={"placeholder": "assets/demo/data/test.parquet"}),
    )

    def clean_train_path(self) -> Path | None:
        return self._path("train_path", required=True)

    def clean_val_path(self) -> Path | None:
        return self._path("val_path", required=False)

    def _path(self, field: str, *, required: bool) -> Path | None:
        try:
            return check_dataset_path(self.cleaned_data.get(field) or "", required=required)
        except PathError as e:
            raise forms.ValidationError(str(e)) from None

    def split_files(self) -> list[SplitFile]:
        return [
            SplitFile(split, path, f"{split} file {portable(path)}")
            for split, path in (
                ("train", self.cleaned_data["train_path"]),
                ("val", self.cleaned_data["val_path"]),
            )
            if path is not None
        ]
