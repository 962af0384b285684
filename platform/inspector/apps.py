from django.apps import AppConfig


class InspectorConfig(AppConfig):
    """The rollout inspector: a run's samples, one sample, a problem's timeline, sample exports."""

    name = "inspector"
    verbose_name = "Rollout inspector"
