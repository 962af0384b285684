"""``python manage.py bootstrap``: the first user and the demo catalog entries. Safe to run again.

1. Creates the superuser ``admin`` if missing, with a password generated once and kept in
   ``<DAPO_VAR_DIR>/admin-password.txt`` (mode 600), so every run prints the same credentials.
2. Builds the demo model and data into assets/demo when ``dapo.data.demo`` can and they are missing
   (``--no-build`` skips it), then registers them in the catalog (idempotent, by name).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from catalog.paths import PathError
from catalog.registry import register_dataset, register_model
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

DEMO_DIR = "assets/demo"
DEMO_MODEL = "demo-tiny-llama"
DEMO_DATASET = "demo-arithmetic"


class Command(BaseCommand):
    help = "Create the admin user (once) and register the demo model and dataset in the catalog."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--no-build", action="store_true", help="do not build a missing demo")
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, **options: Any) -> None:
        username, password = self.ensure_admin(options["username"])
        if not options["no_build"]:
            self.build_demo()
        self.register_demo()
        self.stdout.write(self.style.SUCCESS(f"Log in at /accounts/login/ as {username} / {password}"))

    def ensure_admin(self, username: str) -> tuple[str, str]:
        User = get_user_model()
        path = Path(settings.DAPO_VAR_DIR) / "admin-password.txt"
        password = path.read_text(encoding="utf-8").strip() if path.is_file() else ""
        if User.objects.filter(username=username).exists():
            return username, password or "(set before; not in admin-password.txt)"
        password = password or secrets.token_urlsafe(12)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(password + "\n", encoding="utf-8")
        os.chmod(path, 0o600)
        User.objects.create_superuser(username=username, email="", password=password)
        self.stdout.write(f"Created superuser {username} (password kept in {path})")
        return username, password

    def build_demo(self) -> None:
        if (Path(settings.BASE_DIR) / DEMO_DIR / "model").is_dir():
            return
        try:
            from dapo.data.demo import ensure_demo
        except ImportError:
            self.stdout.write("dapo.data.demo is not available: the demo is not built")
            return
        self.stdout.write(f"Building the demo into {DEMO_DIR} (a few minutes on CPU)...")
        ensure_demo(Path(settings.BASE_DIR) / DEMO_DIR)

    def register_demo(self) -> None:
        root = Path(DEMO_DIR)
        try:
            model = register_model(DEMO_MODEL, str(root / "model"), "Tiny Llama pre-trained on arithmetic")
            data = register_dataset(
                DEMO_DATASET,
                str(root / "data" / "train.parquet"),
                str(root / "data" / "test.parquet"),
                "Synthetic arithmetic problems in the DAPO-Math-17k schema",
            )
        except PathError as e:
            self.stdout.write(
                self.style.WARNING(
                    f"Demo not registered: {e}. Build it: python -m dapo.data.demo --out {DEMO_DIR}"
                )
            )
            return
        self.stdout.write(
            f"Catalog: model {model.name} ({model.size_label} parameters), dataset {data.name} "
            f"({data.row_count} rows)"
        )
