"""The secret key of a site that was given none in ``DJANGO_SECRET_KEY``: generated once into
``DAPO_VAR_DIR/secret_key`` (readable by its owner only) and read from there by every later process, so
``make demo`` and ``manage.py`` work on a fresh clone without a key that anyone could know.

Several processes start at once (``make demo`` starts Daphne, the Celery worker and ``bootstrap``
together); they must agree on one key. A process writes its key to a file of its own and links it into
place, which fails when another got there first; then it reads the other's.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

FILE_NAME = "secret_key"
MIN_LENGTH = 50
"""Django's deploy check wants at least 50 characters."""


def stored_key(var_dir: Path) -> str:
    """The key in ``var_dir/secret_key``, generated there first when the file is missing."""
    path = var_dir / FILE_NAME
    if not path.exists():
        try:
            _create(path)
        except OSError as e:
            raise ImproperlyConfigured(
                f"DJANGO_SECRET_KEY is not set and {path} cannot be written ({e.strerror or e}): "
                "set DJANGO_SECRET_KEY"
            ) from None
    return _read(path)


def _create(path: Path) -> None:
    """Write a new key beside ``path`` (owner-only), then link it to ``path`` unless another process did."""
    own = path.with_name(f".{FILE_NAME}.{os.getpid()}.tmp")
    fd = os.open(own, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(64) + "\n")
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(own, path)
        except FileExistsError:
            pass  # another process linked its key first: that one is the site's
    finally:
        own.unlink(missing_ok=True)


def _read(path: Path) -> str:
    try:
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ImproperlyConfigured(f"cannot read {path} ({e}): set DJANGO_SECRET_KEY") from None
    if len(key) < MIN_LENGTH:
        raise ImproperlyConfigured(
            f"{path} holds no usable secret key (fewer than {MIN_LENGTH} characters): delete it to have a "
            "new one generated, or set DJANGO_SECRET_KEY"
        )
    return key
