#!/usr/bin/env python
"""Django's command-line utility: ``python manage.py migrate``, ``bootstrap``, ``runserver``..."""

import os
import sys
from pathlib import Path


def main() -> None:
    # platform/ is a source folder, not a package (it would shadow the standard library's `platform`).
    sys.path.insert(0, str(Path(__file__).resolve().parent / "platform"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
