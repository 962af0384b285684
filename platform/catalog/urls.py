from django.urls import path

from catalog import views

app_name = "catalog"
urlpatterns = [
    path("", views.dataset_list, name="datasets"),
    path("upload/", views.dataset_upload, name="upload"),
    path("register/", views.dataset_register, name="register"),
    path("<id:dataset_id>/", views.dataset_detail, name="detail"),
    path("<id:dataset_id>/delete/", views.dataset_delete, name="delete"),
]
