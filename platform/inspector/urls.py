from django.urls import path

from inspector import group_view, views

app_name = "inspector"
urlpatterns = [
    path("<id:run_id>/samples/", views.samples_page, name="samples"),
    path("<id:run_id>/samples/data/", views.samples_data, name="samples-data"),
    path("<id:run_id>/samples/steps/", views.samples_steps, name="samples-steps"),
    path("<id:run_id>/samples/export.<str:fmt>", views.samples_export, name="samples-export"),
    path("<id:run_id>/samples/<id:sample_pk>/", views.sample_page, name="sample"),
    path(
        "<id:run_id>/samples/step/<int:step>/group/<int:group>/", group_view.group_page, name="samples-group"
    ),
    path(
        "<id:run_id>/samples/step/<int:step>/group/<int:group>/diverge/",
        group_view.group_divergence,
        name="samples-group-diverge",
    ),
    path("<id:run_id>/problems/<int:problem_index>/", views.problem_page, name="problem"),
]
