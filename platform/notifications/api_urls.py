from django.contrib.auth.decorators import login_not_required
from django.urls import path

from notifications import api

# Under /api/; DRF authenticates by token or session itself (exempt from the login-redirect middleware).
urlpatterns = [
    path(
        "notifications/", login_not_required(api.NotificationSettingsView.as_view()), name="api-notifications"
    ),
    path(
        "notifications/verification/",
        login_not_required(api.AddressVerificationView.as_view()),
        name="api-notifications-verification",
    ),
    path(
        "notifications/test/",
        login_not_required(api.NotificationTestView.as_view()),
        name="api-notifications-test",
    ),
]
