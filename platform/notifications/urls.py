from django.urls import path

from notifications import views

# Under /accounts/notifications/; the names are global (no namespace), as when the runs app served them.
urlpatterns = [
    path("", views.notification_settings, name="notification-settings"),
    path("verify/<str:token>/", views.verify_address, name="verify-notification-address"),
]
