from typing import Any

from django import forms
from django.contrib import admin
from runs.names import name_problem

from catalog.importer import ImportFailed, SplitFile, check_files, import_dataset
from catalog.models import BaseModel, Dataset, DatasetRow
from catalog.paths import PathError, check_dataset_path, check_model_path, portable, resolve


class _NameChecked(forms.ModelForm):
    """The catalog's names are checked here as on the pages and the API (runs.names)."""

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        if problem := name_problem(name):
            raise forms.ValidationError(problem)
        return str(name)


class BaseModelForm(_NameChecked):
    class Meta:
        model = BaseModel
        fields = "__all__"

    def clean_path(self) -> str:
        try:
            return portable(check_model_path(self.cleaned_data["path"]))
        except PathError as e:
            raise forms.ValidationError(str(e)) from None


class DatasetForm(_NameChecked):
    """Files inside DAPO_DATASET_ROOTS, validated row by row before the dataset is saved and imported."""

    class Meta:
        model = Dataset
        fields = ["name", "path", "val_path", "description"]

    def clean_path(self) -> str:
        return self._file(self.cleaned_data["path"], required=True)

    def clean_val_path(self) -> str:
        return self._file(self.cleaned_data.get("val_path", ""), required=False)

    def _file(self, path: str, *, required: bool) -> str:
        try:
            resolved = check_dataset_path(path, required=required)
        except PathError as e:
            raise forms.ValidationError(str(e)) from None
        return portable(resolved) if resolved else ""

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not self.errors:
            try:
                check_files(self.split_files())
            except ImportFailed as e:
                raise forms.ValidationError(str(e)) from None
        return data if data is not None else self.cleaned_data

    def split_files(self) -> list[SplitFile]:
        paths = [("train", self.cleaned_data["path"]), ("val", self.cleaned_data.get("val_path", ""))]
        return [SplitFile(split, resolve(p), p) for split, p in paths if p]  # checked by clean_path


@admin.register(BaseModel)
class BaseModelAdmin(admin.ModelAdmin):
    form = BaseModelForm
    list_display = ["name", "path", "architecture", "parameter_count"]


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    form = DatasetForm
    list_display = ["name", "version", "created_by", "path", "format", "row_count", "uploaded", "created_at"]

    def get_readonly_fields(self, request: Any, obj: Dataset | None = None) -> list[str]:
        """A version keeps its name: renaming one would move it out of its dataset's versions."""
        return ["name"] if obj is not None else []

    def save_model(self, request: Any, obj: Dataset, form: DatasetForm, change: bool) -> None:
        """Import the rows with the dataset (the form checked every row already)."""
        replace = Dataset.objects.get(pk=obj.pk) if change else None
        if replace is not None:
            replace.name = obj.name
        dataset = import_dataset(
            obj.name,
            form.split_files(),
            description=obj.description,
            created_by=request.user,
            replace=replace,
        )
        obj.pk = dataset.pk
        obj.refresh_from_db()


@admin.register(DatasetRow)
class DatasetRowAdmin(admin.ModelAdmin):
    list_display = ["dataset", "split", "index", "ground_truth", "data_source", "prompt_chars"]
    list_filter = ["dataset", "split"]
    search_fields = ["prompt_text", "ground_truth"]
    readonly_fields = [f.name for f in DatasetRow._meta.fields]
