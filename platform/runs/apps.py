from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        # Connects the signal that revokes a user's API token when the password changes, in every process
        # (web, worker, manage.py changepassword), not only in those that load the URLconf.
        from runs import account  # noqa: F401
