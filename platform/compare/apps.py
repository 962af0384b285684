from django.apps import AppConfig


class CompareConfig(AppConfig):
    """Runs side by side: the comparison page and its data, ablation ladders, metrics as CSV."""

    name = "compare"
    verbose_name = "Comparison"
