from django.contrib import admin

from catalog.models import BaseModel, Dataset

admin.site.register(Dataset, list_display=["name", "path", "format", "row_count"])
admin.site.register(BaseModel, list_display=["name", "path", "architecture", "parameter_count"])
