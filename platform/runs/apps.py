from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        # Connects, in every process (web, worker, manage.py changepassword), not only in those that load
        # the URLconf, the signals that revoke a user's API token when the password changes and that close
        # the open websockets of users who lost access to a run.
        from runs import access_signals, account  # noqa: F401
