from django.urls import path

from compare import ladder, metrics_csv, saved, sweep_chart, views

app_name = "compare"
urlpatterns = [
    path("new/ladder/", ladder.launch_ladder, name="ladder"),
    path("compare/", views.compare_page, name="compare"),
    path("compare/data/", views.compare_data, name="compare-data"),
    path("compare/validation/", views.compare_validation, name="compare-validation"),
    path("compare/metrics.csv", metrics_csv.compare_csv, name="compare-csv"),
    path("compare/groups/", views.compare_groups, name="compare-groups"),
    path("compare/sweep/", sweep_chart.sweep_data, name="compare-sweep"),
    path("compare/save/", saved.comparison_save, name="save"),
    path("compare/saved/<id:comparison_id>/", saved.saved_comparison, name="saved"),
    path("compare/saved/<id:comparison_id>/share/", saved.comparison_share, name="saved-share"),
    path("compare/saved/<id:comparison_id>/delete/", saved.comparison_delete, name="saved-delete"),
    path("<id:run_id>/metrics.csv", metrics_csv.run_metrics_csv, name="metrics-csv"),
]
