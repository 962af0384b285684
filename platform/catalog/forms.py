"""The dataset page's two forms (upload files, or register files already on the server) and the models
page's register form."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django import forms
from runs.names import name_problem

from catalog.importer import SplitFile
from catalog.model_info import ModelCheckError, check_model
from catalog.models import BaseModel
from catalog.paths import PathError, check_dataset_path, check_model_path, portable
from catalog.uploads import StagedUpload, max_upload_bytes

UPLOAD_SUFFIXES = (".parquet", ".jsonl")
_FILE = forms.FileInput(attrs={"accept": ",".join(UPLOAD_SUFFIXES)})


class _Named(forms.Form):
    name = forms.CharField(
        max_length=200,
        help_text="A name of yours (in any case) adds your dataset's next version (the older stay); "
        "another user's dataset of the same name is theirs and is not touched.",
        error_messages={"required": "give the dataset a name"},
    )
    description = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))

    def clean_name(self) -> str:
        name = " ".join(self.cleaned_data["name"].replace("\x00", "").split())
        if not name:
            raise forms.ValidationError("give the dataset a name")
        if problem := name_problem(name):
            raise forms.ValidationError(problem)
        return name  # the import takes the spelling of the owner's existing dataset (catalog.versions)


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


class ModelRegisterForm(forms.Form):
    """Register a model folder on the server: inside a model root, loadable (catalog.model_info)."""

    name = forms.CharField(
        max_length=200,
        help_text="Unique in the catalog; the new-run form and the API name it.",
        error_messages={"required": "give the model a name"},
    )
    path = forms.CharField(
        max_length=1024,
        label="Model folder on the server",
        widget=forms.TextInput(attrs={"placeholder": "/data/models/Qwen2.5-0.5B-Instruct"}),
        error_messages={"required": "name the model's folder"},
    )
    description = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "model-%s")
        super().__init__(*args, **kwargs)
        self.details: dict[str, Any] = {}

    def clean_name(self) -> str:
        name = " ".join(self.cleaned_data["name"].replace("\x00", "").split())
        if not name:
            raise forms.ValidationError("give the model a name")
        if problem := name_problem(name):
            raise forms.ValidationError(problem)
        if BaseModel.objects.filter(name__iexact=name).exists():
            raise forms.ValidationError(
                f"a model named {name!r} is already in the catalog: choose another name"
            )
        return name

    def clean_path(self) -> Path:
        try:
            resolved = check_model_path(self.cleaned_data["path"].strip())
        except PathError as e:
            raise forms.ValidationError(str(e)) from None
        except (OSError, ValueError) as e:  # a name too long, an odd character
            raise forms.ValidationError(f"is not a usable path ({type(e).__name__})") from None
        try:
            self.details = check_model(resolved)
        except ModelCheckError as e:
            raise forms.ValidationError(f"cannot be used as a base model: {e}") from None
        return resolved

    def save(self, user: Any) -> BaseModel:
        """The catalog entry of the checked folder (call after is_valid)."""
        data, details = self.cleaned_data, self.details
        return BaseModel.objects.create(
            name=data["name"],
            path=portable(data["path"]),
            architecture=(", ".join(details["architectures"]) or details["model_type"])[:200],
            parameter_count=details["parameters"],
            description=data["description"],
            details=details,
            created_by=user,
        )
