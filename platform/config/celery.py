"""The Celery app, configured from Django settings (``CELERY_*``). ``worker.app`` adds the tasks."""

from __future__ import annotations

from celery import Celery

app = Celery("dapo")
app.config_from_object("django.conf:settings", namespace="CELERY")
