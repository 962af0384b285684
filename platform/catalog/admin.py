from django import forms
from django.contrib import admin

from catalog.models import BaseModel, Dataset
from catalog.paths import PathError, check_data_path, check_model_path, portable


class BaseModelForm(forms.ModelForm):
    class Meta:
        model = BaseModel
        fields = "__all__"

    def clean_path(self) -> str:
        try:
            return portable(check_model_path(self.cleaned_data["path"]))
        except PathError as e:
            raise forms.ValidationError(str(e)) from None


class DatasetForm(forms.ModelForm):
    class Meta:
        model = Dataset
        fields = "__all__"

    def clean_path(self) -> str:
        return self._file(self.cleaned_data["path"], required=True)

    def clean_val_path(self) -> str:
        return self._file(self.cleaned_data.get("val_path", ""), required=False)

    def _file(self, path: str, *, required: bool) -> str:
        try:
            resolved = check_data_path(path, required=required)
        except PathError as e:
            raise forms.ValidationError(str(e)) from None
        return portable(resolved) if resolved else ""


@admin.register(BaseModel)
class BaseModelAdmin(admin.ModelAdmin):
    form = BaseModelForm
    list_display = ["name", "path", "architecture", "parameter_count"]


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    form = DatasetForm
    list_display = ["name", "path", "format", "row_count"]
