from django.urls import path

from compare import ladder, metrics_csv, sweep_views, views

app_name = "compare"
urlpatterns = [
    path("new/ladder/", ladder.launch_ladder, name="ladder"),
    path("new/sweep/", sweep_views.launch_sweep, name="sweep"),
    path("compare/", views.compare_page, name="compare"),
    path("compare/data/", views.compare_data, name="compare-data"),
    path("compare/validation/", views.compare_validation, name="compare-validation"),
    path("compare/metrics.csv", metrics_csv.compare_csv, name="compare-csv"),
    path("compare/groups/", views.compare_groups, name="compare-groups"),
    path("compare/sweep/", sweep_views.sweep_data, name="compare-sweep"),
    path("<id:run_id>/metrics.csv", metrics_csv.run_metrics_csv, name="metrics-csv"),
]
