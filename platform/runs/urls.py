from django.urls import path

from runs import inspect, views

app_name = "runs"
urlpatterns = [
    path("", views.run_list, name="list"),
    path("new/", views.run_new, name="new"),
    path("<int:run_id>/", views.run_detail, name="detail"),
    path("<int:run_id>/cancel/", views.run_cancel, name="cancel"),
    path("<int:run_id>/resume/", views.run_resume, name="resume"),
    # the rollout inspector (runs.inspect, runs.exports)
    path("<int:run_id>/samples/", inspect.samples_page, name="samples"),
    path("<int:run_id>/samples/data/", inspect.samples_data, name="samples-data"),
    path("<int:run_id>/samples/steps/", inspect.samples_steps, name="samples-steps"),
    path("<int:run_id>/samples/export.<str:fmt>", inspect.samples_export, name="samples-export"),
    path("<int:run_id>/samples/<int:sample_pk>/", inspect.sample_page, name="sample"),
    path("<int:run_id>/problems/<int:problem_index>/", inspect.problem_page, name="problem"),
]
