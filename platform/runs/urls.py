from django.urls import path

from runs import views

app_name = "runs"
urlpatterns = [
    path("", views.run_list, name="list"),
    path("new/", views.run_new, name="new"),
    path("<int:run_id>/", views.run_detail, name="detail"),
    path("<int:run_id>/cancel/", views.run_cancel, name="cancel"),
    path("<int:run_id>/resume/", views.run_resume, name="resume"),
]
