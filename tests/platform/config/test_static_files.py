"""Static files once collected: pages name fingerprinted copies, served gzipped and cached for good; with
nothing collected, pages name the plain files and still load."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db

PLOTLY = re.compile(r'src="(/static/vendor/plotly-4\.1\.2\.min(?:\.[0-9a-f]{12})?\.js)"')


def _page_and_plotly(alice, run):
    client = Client()  # a new handler: WhiteNoise reads the settings and the collected files afresh
    client.force_login(alice)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    src = PLOTLY.search(html).group(1)
    return src, client.get(src, HTTP_ACCEPT_ENCODING="gzip, br")


def test_collected_files_are_fingerprinted_gzipped_and_cached_for_good(alice, alice_run, settings, tmp_path):
    settings.STATIC_ROOT = tmp_path / "static"
    settings.DAPO_STATIC_HASHED = True
    call_command("collectstatic", interactive=False, verbosity=0)
    src, response = _page_and_plotly(alice, alice_run)
    assert re.fullmatch(r"/static/vendor/plotly-4\.1\.2\.min\.[0-9a-f]{12}\.js", src), src
    body = b"".join(response.streaming_content)
    raw = (tmp_path / "static" / "vendor" / "plotly-4.1.2.min.js").stat().st_size
    assert response.status_code == 200 and response["Content-Encoding"] == "gzip"
    assert response["Cache-Control"] == "max-age=315360000, public, immutable"
    assert len(body) < raw / 3  # 4.8 MB of plotly travels as ~1.5 MB


def test_without_a_collect_pages_name_the_plain_files(alice, alice_run, settings, tmp_path):
    settings.STATIC_ROOT = tmp_path / "empty"
    settings.STATIC_ROOT.mkdir()
    settings.DAPO_STATIC_HASHED = True
    src, response = _page_and_plotly(alice, alice_run)
    assert src == "/static/vendor/plotly-4.1.2.min.js" and response.status_code == 200


def test_with_hashing_off_a_collected_copy_is_never_named(alice, alice_run, settings, tmp_path):
    """A test (DEBUG off under pytest-django) or a developer's server must not load a stale collected copy."""
    settings.STATIC_ROOT = tmp_path / "static"
    call_command("collectstatic", interactive=False, verbosity=0)
    settings.DAPO_STATIC_HASHED = False
    settings.DEBUG = False
    src, response = _page_and_plotly(alice, alice_run)
    assert src == "/static/vendor/plotly-4.1.2.min.js" and response.status_code == 200
