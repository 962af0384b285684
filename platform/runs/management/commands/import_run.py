"""``python manage.py import_run DIR --owner USER [--name NAME]``: a finished verl run as an external run.

DIR holds the run's files as verl wrote them (``dapo.integrations.verl``: ``metrics.jsonl`` or a console
log, ``rollout/``, ``validation/``, ``config.json`` or ``.hydra/config.yaml``). Every file is checked first;
a bad one stops the import with its name and line, and nothing is written (runs.external_import).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from runs.external_import import ImportProblem, VerlFiles, import_verl


class Command(BaseCommand):
    help = "Import a finished verl run (its metric records, rollout and validation dumps) for a user."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("dir", type=Path, help="the folder of the verl run's files")
        parser.add_argument("--owner", required=True, help="the username the run will belong to")
        parser.add_argument("--name", help="the run's name (default: the folder's)")

    def handle(self, *args: Any, **options: Any) -> None:
        owner = get_user_model().objects.filter(username=options["owner"]).first()
        if owner is None:
            raise CommandError(f"no user {options['owner']!r}")
        root: Path = options["dir"]
        try:
            run = import_verl(owner, options["name"] or root.resolve().name, VerlFiles.from_folder(root))
        except ImportProblem as e:
            raise CommandError("nothing imported:\n  " + "\n  ".join(e.problems)) from None
        samples = run.samples.count()
        self.stdout.write(
            self.style.SUCCESS(f"imported run #{run.pk} {run.name!r}: {run.step} steps, {samples} samples")
        )
