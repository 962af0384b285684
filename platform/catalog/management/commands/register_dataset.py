"""``python manage.py register_dataset NAME TRAIN_FILE [--val VAL_FILE]``: add or update a dataset.

Parquet (DAPO schema), JSONL or JSON files. Every problem is validated and imported as a DatasetRow (the
dataset page browses them), all or nothing; files unchanged since the last import are not read again.
Unlike the dataset page, the command takes any path: whoever runs it already has the server's files.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from catalog.paths import PathError
from catalog.registry import register_dataset


class Command(BaseCommand):
    help = "Register a dataset's train (and validation) file in the catalog (idempotent by name)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("name")
        parser.add_argument("train")
        parser.add_argument("--val", default="")
        parser.add_argument("--description", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            data = register_dataset(options["name"], options["train"], options["val"], options["description"])
        except (PathError, ValueError, OSError) as e:
            raise CommandError(f"dataset {options['name']!r}: {e}") from None
        self.stdout.write(f"{data.name}: {data.path} ({data.row_count} rows, splits {data.splits})")
