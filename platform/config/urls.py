from django.conf import settings
from django.contrib import admin
from django.contrib.auth.decorators import login_not_required
from django.urls import include, path
from django.views.generic import RedirectView
from runs import account, notify_views

from config import params  # noqa: F401  registers the <id:...> path converter before the apps' URLs load

urlpatterns = [
    path("", RedirectView.as_view(url="/runs/", permanent=False)),
    path("accounts/", include("django.contrib.auth.urls")),
    path("accounts/token/", account.api_token, name="api-token"),
    path("accounts/notifications/", notify_views.notification_settings, name="notification-settings"),
    path("admin/", admin.site.urls),
    path("runs/", include("runs.urls")),
    path("runs/", include("inspector.urls")),  # /runs/<id>/samples/, /runs/<id>/problems/<index>/
    path("runs/", include("compare.urls")),  # /runs/compare/, /runs/new/ladder/, /runs/<id>/metrics.csv
    path("datasets/", include("catalog.urls")),
    path("models/", include("catalog.model_urls")),
    path("api/", include("runs.api_urls")),
    path("api/", include("catalog.api_urls")),
    path("api/", include("compare.api_urls")),  # /api/sweeps/
]

if settings.HAS_SPECTACULAR:
    from drf_spectacular.views import SpectacularAPIView

    # login_not_required: the login page's redirect is for browsers; DRF checks the session or the token
    # itself and answers 401 (SPECTACULAR_SETTINGS["SERVE_PERMISSIONS"]), as every other API endpoint does.
    from runs.api_docs import api_docs

    urlpatterns.append(
        path("api/schema/", login_not_required(SpectacularAPIView.as_view()), name="api-schema")
    )
    # a page for people: the login-redirect middleware sends a visitor without a session to the login page
    urlpatterns.append(path("api/docs/", api_docs, name="api-docs"))
