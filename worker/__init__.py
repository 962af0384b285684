"""The Celery worker: from a Run row to a DAPO run (``celery -A worker.app worker -Q training``)."""
