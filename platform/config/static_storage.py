"""Static files: fingerprinted, compressed and cached for good once collected; plain in development.

``collectstatic`` (the Docker image, ``make demo``) writes every file under a name with a hash of its
content (``js/run_detail.3f2a9c1b7d0e.js``) beside a gzip copy, and a manifest. Pages then name the
hashed files, which WhiteNoise serves compressed with ``Cache-Control: max-age=315360000, immutable``: a
browser loads plotly's 4.8 MB bundle once, ~1.4 MB on the wire, and never asks again; a changed file
gets a new name. Without a manifest entry (nothing collected: tests, a checkout's first ``runserver``) a
page names the plain file, which WhiteNoise serves from frontend/static (``WHITENOISE_USE_FINDERS``).

Hashed names are used when ``DAPO_STATIC_HASHED`` is on (default: when not debugging), and only then, so
that a test (pytest-django turns DEBUG off) never reads a copy collected earlier; ``make demo`` turns it on
after collecting, so the demo loads like production. Collected files are a snapshot: while a
process that uses them runs, an edited file under frontend/static shows only after the next collect.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.staticfiles.storage import StaticFilesStorage
from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticStorage(CompressedManifestStaticFilesStorage):
    manifest_strict = False  # a file missing from the manifest is named plainly (below), not an error

    def url(self, name: Any, force: bool = False) -> str:
        if not (force or settings.DAPO_STATIC_HASHED):  # however DEBUG is set (tests turn it off)
            return StaticFilesStorage.url(self, name)
        try:
            return super().url(name, force=True)
        except ValueError:  # not collected: the plain name, which WhiteNoise finds in frontend/static
            return StaticFilesStorage.url(self, name)
