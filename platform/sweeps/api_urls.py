from django.contrib.auth.decorators import login_not_required
from django.urls import path

from sweeps import views

# As runs.api_urls: DRF authenticates by token or session itself, so no login redirect.
urlpatterns = [
    path("sweeps/", login_not_required(views.SweepCreate.as_view()), name="api-sweeps"),
]
