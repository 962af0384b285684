from django.urls import path

from catalog import model_views

app_name = "models"
urlpatterns = [
    path("", model_views.model_list, name="list"),
    path("<id:model_id>/", model_views.model_detail, name="detail"),
]
