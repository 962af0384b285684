from django.urls import path

from compare import ladder, metrics_csv, views

app_name = "compare"
urlpatterns = [
    path("new/ladder/", ladder.launch_ladder, name="ladder"),
    path("compare/", views.compare_page, name="compare"),
    path("compare/data/", views.compare_data, name="compare-data"),
    path("compare/validation/", views.compare_validation, name="compare-validation"),
    path("compare/metrics.csv", metrics_csv.compare_csv, name="compare-csv"),
    path("compare/groups/", views.compare_groups, name="compare-groups"),
    path("<id:run_id>/metrics.csv", metrics_csv.run_metrics_csv, name="metrics-csv"),
]
