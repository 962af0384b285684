from django.contrib.auth.decorators import login_not_required
from django.urls import path

from runs import (
    account_api,
    api,
    api_series,
    bulk,
    cluster_views,
    evaluation_views,
    evaluations,
    external_api,
    foreign_exports,
    log_views,
    scheduling_api,
)

# The API authenticates by token or session itself (DRF): exempt from the login-redirect middleware,
# so a script without credentials gets 401/403 JSON, not an HTML redirect.
urlpatterns = [
    path("runs/", login_not_required(api.RunListCreate.as_view()), name="api-runs"),
    path(
        "runs/external/", login_not_required(external_api.ExternalCreate.as_view()), name="api-runs-external"
    ),
    path(
        "runs/<id:run_id>/external/metrics/",
        login_not_required(external_api.ExternalMetrics.as_view()),
        name="api-run-external-metrics",
    ),
    path(
        "runs/<id:run_id>/external/samples/",
        login_not_required(external_api.ExternalSamples.as_view()),
        name="api-run-external-samples",
    ),
    path(
        "runs/<id:run_id>/external/finish/",
        login_not_required(external_api.ExternalFinish.as_view()),
        name="api-run-external-finish",
    ),
    path("runs/bulk/", login_not_required(bulk.RunBulk.as_view()), name="api-runs-bulk"),
    path("evaluations/", login_not_required(evaluations.EvaluationCreate.as_view()), name="api-evaluations"),
    path("runs/<id:run_id>/", login_not_required(api.RunDetail.as_view()), name="api-run"),
    path(
        "runs/<id:run_id>/evaluation/",
        login_not_required(evaluation_views.EvaluationResults.as_view()),
        name="api-run-evaluation",
    ),
    path("runs/<id:run_id>/cancel/", login_not_required(api.RunCancel.as_view()), name="api-run-cancel"),
    path("runs/<id:run_id>/resume/", login_not_required(api.RunResume.as_view()), name="api-run-resume"),
    path(
        "runs/<id:run_id>/priority/",
        login_not_required(scheduling_api.RunPriority.as_view()),
        name="api-run-priority",
    ),
    path(
        "runs/<id:run_id>/preempt/",
        login_not_required(scheduling_api.RunPreempt.as_view()),
        name="api-run-preempt",
    ),
    path("cluster/", login_not_required(cluster_views.ClusterDetail.as_view()), name="api-cluster"),
    path(
        "runs/<id:run_id>/metrics/",
        login_not_required(api_series.RunMetrics.as_view()),
        name="api-run-metrics",
    ),
    path(
        "runs/<id:run_id>/distributions/",
        login_not_required(api_series.RunDistributions.as_view()),
        name="api-run-distributions",
    ),
    path(
        "runs/<id:run_id>/hardware/",
        login_not_required(api_series.RunHardware.as_view()),
        name="api-run-hardware",
    ),
    path(
        "runs/<id:run_id>/samples/",
        login_not_required(api_series.RunSamples.as_view()),
        name="api-run-samples",
    ),
    path(
        "runs/<id:run_id>/verl.zip",
        login_not_required(foreign_exports.RunVerlExport.as_view()),
        name="api-run-verl",
    ),
    path(
        "runs/<id:run_id>/trl-log-history.json",
        login_not_required(foreign_exports.RunTrlLogHistory.as_view()),
        name="api-run-trl-history",
    ),
    path("runs/<id:run_id>/export/", login_not_required(api.RunExport.as_view()), name="api-run-export"),
    path("runs/<id:run_id>/log/", login_not_required(log_views.RunLog.as_view()), name="api-run-log"),
    path("views/", login_not_required(account_api.SavedViewList.as_view()), name="api-views"),
    path("views/<id:view_id>/", login_not_required(account_api.SavedViewDetail.as_view()), name="api-view"),
]
