from core import params  # noqa: F401  registers the <id:...> path converter before the apps' URLs load
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from runs import account
from runs.cluster_views import cluster_page


def favicon(request: HttpRequest) -> HttpResponse:
    return HttpResponsePermanentRedirect(static("favicon.svg"))


urlpatterns = [
    path("", RedirectView.as_view(url="/runs/", permanent=False)),
    # what a browser asks for where a page names no icon (a JSON answer, the API docs): never a 404
    path("favicon.ico", login_not_required(favicon)),
    # before django.contrib.auth's own: the same form, rate-limited (runs.throttle)
    path("accounts/password_reset/", account.ThrottledPasswordReset.as_view(), name="password_reset"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("accounts/token/", account.api_token, name="api-token"),
    path("accounts/email/", account.account_email, name="account-email"),
    path("accounts/notifications/", include("notifications.urls")),
    path("admin/", admin.site.urls),
    path("cluster/", cluster_page, name="cluster"),
    path("runs/", include("runs.urls")),
    path("runs/", include("inspector.urls")),  # /runs/<id>/samples/, /runs/<id>/problems/<index>/
    path("runs/", include("compare.urls")),  # /runs/compare/, /runs/new/ladder/, /runs/<id>/metrics.csv
    path("runs/", include("sweeps.urls")),  # /runs/new/sweep/
    path("datasets/", include("catalog.urls")),
    path("models/", include("catalog.model_urls")),
    path("api/", include("runs.api_urls")),
    path("api/", include("catalog.api_urls")),
    path("api/", include("notifications.api_urls")),  # /api/notifications/...
    path("api/", include("sweeps.api_urls")),  # /api/sweeps/
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
