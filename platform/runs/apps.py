from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        # Connects, in every process (web, worker, manage.py changepassword), not only in those that load
        # the URLconf, the signals that revoke a user's API token when the password changes, that close
        # the open websockets of users who lost access to a run, and that run a scheduler pass when a
        # run is queued or frees its room (runs.scheduling).
        from runs import access_signals, account, scheduling  # noqa: F401
