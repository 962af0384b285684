"""Entry point of the Celery worker: ``celery -A worker.app worker -Q training --concurrency 2``.

The concurrency is the queue's slot count (``DAPO_TRAINING_CONCURRENCY``, platform/config/queues.py):
Celery's prefork pool runs each task in a child process of its own, so two slots train two runs at once,
each with its own run log capture, torch threads and Ray driver.

``platform/`` is a source folder (not a package: the name would shadow the standard library's
``platform``), so it goes on ``sys.path`` here, as in manage.py and the ASGI module.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_PLATFORM = str(Path(__file__).resolve().parents[1] / "platform")
if _PLATFORM not in sys.path:
    sys.path.insert(0, _PLATFORM)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from config.celery import app  # noqa: E402

import worker.tasks  # noqa: E402,F401  (registers the tasks on the app)

__all__ = ["app"]
