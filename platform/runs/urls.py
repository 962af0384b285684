from django.urls import path

from runs import evaluations, log_views, planning, views

app_name = "runs"
urlpatterns = [
    path("", views.run_list, name="list"),
    path("new/", views.run_new, name="new"),
    path("new/plan/", planning.plan_data, name="plan"),
    path("evaluate/", evaluations.evaluation_new, name="evaluate"),
    path("<id:run_id>/", views.run_detail, name="detail"),
    path("<id:run_id>/cancel/", views.run_cancel, name="cancel"),
    path("<id:run_id>/resume/", views.run_resume, name="resume"),
    path("<id:run_id>/export/", views.run_export, name="export"),
    path("<id:run_id>/log/", log_views.run_log, name="log"),
    path("<id:run_id>/log.txt", log_views.run_log_download, name="log-download"),
]
