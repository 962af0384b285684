from django.urls import path

from runs import (
    bulk,
    evaluation_views,
    evaluations,
    external_views,
    log_views,
    manage_views,
    planning,
    scheduling_api,
    views,
)

app_name = "runs"
urlpatterns = [
    path("", views.run_list, name="list"),
    path("new/", views.run_new, name="new"),
    path("new/plan/", planning.plan_data, name="plan"),
    path("evaluate/", evaluations.evaluation_new, name="evaluate"),
    path("bulk/", bulk.bulk_action, name="bulk"),
    path("import/", external_views.import_page, name="import"),
    path("evaluations/compare/", evaluation_views.evaluation_compare, name="evaluation-compare"),
    path("views/", manage_views.view_save, name="view-save"),
    path("views/<id:view_id>/delete/", manage_views.view_delete, name="view-delete"),
    path("<id:run_id>/", views.run_detail, name="detail"),
    path("<id:run_id>/evaluation/", evaluation_views.evaluation_page, name="evaluation"),
    path("<id:run_id>/edit/", manage_views.run_edit, name="edit"),
    path("<id:run_id>/archive/", manage_views.run_archive, name="archive"),
    path("<id:run_id>/share/", manage_views.run_share, name="share"),
    path("<id:run_id>/delete/", manage_views.run_delete, name="delete"),
    path("<id:run_id>/cancel/", views.run_cancel, name="cancel"),
    path("<id:run_id>/resume/", views.run_resume, name="resume"),
    path("<id:run_id>/priority/", scheduling_api.priority_form, name="priority"),
    path("<id:run_id>/preempt/", scheduling_api.preempt_form, name="preempt"),
    path("<id:run_id>/export/", views.run_export, name="export"),
    path("<id:run_id>/log/", log_views.run_log, name="log"),
    path("<id:run_id>/log.txt", log_views.run_log_download, name="log-download"),
]
