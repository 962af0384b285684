from django.contrib.auth.decorators import login_not_required
from django.urls import path

from catalog import api

# As runs.api_urls: DRF checks the token or the session itself (401/403 JSON, never a login redirect).
urlpatterns = [
    path("models/", login_not_required(api.ModelList.as_view()), name="api-models"),
    path("models/<id:model_id>/", login_not_required(api.ModelDetail.as_view()), name="api-model"),
    path("datasets/", login_not_required(api.DatasetList.as_view()), name="api-datasets"),
    path("datasets/<id:dataset_id>/", login_not_required(api.DatasetDetail.as_view()), name="api-dataset"),
]
