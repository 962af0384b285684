from typing import Any

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        # In every process that may finish a run (the worker, the web process cancelling a queued run).
        from runs.signals import run_finished

        run_finished.connect(_queue_on_finish, dispatch_uid="notifications.run_finished")


def _queue_on_finish(sender: Any, run: Any, **_: Any) -> None:
    from notifications.delivery import run_finished

    run_finished(run)
