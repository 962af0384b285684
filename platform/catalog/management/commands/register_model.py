"""``python manage.py register_model NAME PATH``: add or update a base model in the catalog.

The directory must lie inside DAPO_MODEL_ROOTS; architecture and parameter count are read from its
config.json and safetensors headers (no weights are loaded).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from catalog.paths import PathError
from catalog.registry import register_model


class Command(BaseCommand):
    help = "Register a local HuggingFace model directory in the catalog (idempotent by name)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("name")
        parser.add_argument("path")
        parser.add_argument("--description", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            model = register_model(options["name"], options["path"], options["description"])
        except PathError as e:
            raise CommandError(f"model path {options['path']!r}: {e}") from None
        self.stdout.write(
            f"{model.name}: {model.path} ({model.architecture or 'unknown'}, {model.size_label})"
        )
