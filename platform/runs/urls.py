from django.urls import path

from runs import compare, evaluations, group_view, inspect, ladder, log_views, metrics_csv, planning, views

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
    path("<int:run_id>/metrics.csv", metrics_csv.run_metrics_csv, name="metrics-csv"),
    path("<int:run_id>/", views.run_detail, name="detail"),
    path("<int:run_id>/cancel/", views.run_cancel, name="cancel"),
    path("<int:run_id>/resume/", views.run_resume, name="resume"),
    path("<int:run_id>/export/", views.run_export, name="export"),
    path("<int:run_id>/log/", log_views.run_log, name="log"),
    path("<int:run_id>/log.txt", log_views.run_log_download, name="log-download"),
    # the rollout inspector (runs.inspect; runs.sample_filter, sample_view, timeline and exports)
    path("<int:run_id>/samples/", inspect.samples_page, name="samples"),
    path("<int:run_id>/samples/data/", inspect.samples_data, name="samples-data"),
    path("<int:run_id>/samples/steps/", inspect.samples_steps, name="samples-steps"),
    path("<int:run_id>/samples/export.<str:fmt>", inspect.samples_export, name="samples-export"),
    path("<int:run_id>/samples/<int:sample_pk>/", inspect.sample_page, name="sample"),
    path(
        "<int:run_id>/samples/step/<int:step>/group/<int:group>/", group_view.group_page, name="samples-group"
    ),
    path(
        "<int:run_id>/samples/step/<int:step>/group/<int:group>/diverge/",
        group_view.group_divergence,
        name="samples-group-diverge",
    ),
    path("<int:run_id>/problems/<int:problem_index>/", inspect.problem_page, name="problem"),
]
