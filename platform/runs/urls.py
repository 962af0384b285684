from django.urls import path

from runs import compare, evaluations, inspect, ladder, log_views, manage_views, metrics_csv, planning, views

app_name = "runs"
urlpatterns = [
    path("", views.run_list, name="list"),
    path("new/", views.run_new, name="new"),
    path("new/ladder/", ladder.launch_ladder, name="ladder"),
    path("new/plan/", planning.plan_data, name="plan"),
    path("evaluate/", evaluations.evaluation_new, name="evaluate"),
    path("compare/", compare.compare_page, name="compare"),
    path("compare/data/", compare.compare_data, name="compare-data"),
    path("compare/validation/", compare.compare_validation, name="compare-validation"),
    path("compare/metrics.csv", metrics_csv.compare_csv, name="compare-csv"),
    path("compare/groups/", compare.compare_groups, name="compare-groups"),
    path("compare/save/", manage_views.comparison_save, name="compare-save"),
    path("compare/saved/<int:comparison_id>/", manage_views.saved_comparison, name="saved-comparison"),
    path(
        "compare/saved/<int:comparison_id>/share/",
        manage_views.comparison_share,
        name="saved-comparison-share",
    ),
    path(
        "compare/saved/<int:comparison_id>/delete/",
        manage_views.comparison_delete,
        name="saved-comparison-delete",
    ),
    path("views/", manage_views.view_save, name="view-save"),
    path("views/<int:view_id>/delete/", manage_views.view_delete, name="view-delete"),
    path("<int:run_id>/metrics.csv", metrics_csv.run_metrics_csv, name="metrics-csv"),
    path("<int:run_id>/", views.run_detail, name="detail"),
    path("<int:run_id>/cancel/", views.run_cancel, name="cancel"),
    path("<int:run_id>/resume/", views.run_resume, name="resume"),
    path("<int:run_id>/export/", views.run_export, name="export"),
    path("<int:run_id>/edit/", manage_views.run_edit, name="edit"),
    path("<int:run_id>/archive/", manage_views.run_archive, name="archive"),
    path("<int:run_id>/share/", manage_views.run_share, name="share"),
    path("<int:run_id>/delete/", manage_views.run_delete, name="delete"),
    path("<int:run_id>/log/", log_views.run_log, name="log"),
    path("<int:run_id>/log.txt", log_views.run_log_download, name="log-download"),
    # the rollout inspector (runs.inspect; runs.sample_filter, sample_view, timeline and exports)
    path("<int:run_id>/samples/", inspect.samples_page, name="samples"),
    path("<int:run_id>/samples/data/", inspect.samples_data, name="samples-data"),
    path("<int:run_id>/samples/steps/", inspect.samples_steps, name="samples-steps"),
    path("<int:run_id>/samples/export.<str:fmt>", inspect.samples_export, name="samples-export"),
    path("<int:run_id>/samples/<int:sample_pk>/", inspect.sample_page, name="sample"),
    path("<int:run_id>/problems/<int:problem_index>/", inspect.problem_page, name="problem"),
]
