from django.urls import path

from sweeps import views

app_name = "sweeps"
urlpatterns = [
    path("new/sweep/", views.launch_sweep, name="launch"),  # under /runs/
]
