from django.contrib.auth.decorators import login_not_required
from django.urls import path

from runs import account_api, api, evaluations, log_views

# The API authenticates by token or session itself (DRF): exempt from the login-redirect middleware,
# so a script without credentials gets 401/403 JSON, not an HTML redirect.
urlpatterns = [
    path("runs/", login_not_required(api.RunListCreate.as_view()), name="api-runs"),
    path("evaluations/", login_not_required(evaluations.EvaluationCreate.as_view()), name="api-evaluations"),
    path("runs/<id:run_id>/", login_not_required(api.RunDetail.as_view()), name="api-run"),
    path("runs/<id:run_id>/cancel/", login_not_required(api.RunCancel.as_view()), name="api-run-cancel"),
    path("runs/<id:run_id>/resume/", login_not_required(api.RunResume.as_view()), name="api-run-resume"),
    path("runs/<id:run_id>/metrics/", login_not_required(api.RunMetrics.as_view()), name="api-run-metrics"),
    path(
        "runs/<id:run_id>/distributions/",
        login_not_required(api.RunDistributions.as_view()),
        name="api-run-distributions",
    ),
    path(
        "runs/<id:run_id>/hardware/", login_not_required(api.RunHardware.as_view()), name="api-run-hardware"
    ),
    path("runs/<id:run_id>/samples/", login_not_required(api.RunSamples.as_view()), name="api-run-samples"),
    path("runs/<id:run_id>/export/", login_not_required(api.RunExport.as_view()), name="api-run-export"),
    path("runs/<id:run_id>/log/", login_not_required(log_views.RunLog.as_view()), name="api-run-log"),
    path(
        "notifications/",
        login_not_required(account_api.NotificationSettingsView.as_view()),
        name="api-notifications",
    ),
    path("views/", login_not_required(account_api.SavedViewList.as_view()), name="api-views"),
    path("views/<id:view_id>/", login_not_required(account_api.SavedViewDetail.as_view()), name="api-view"),
]
