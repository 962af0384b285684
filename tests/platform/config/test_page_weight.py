"""What a page costs on the wire: HTML and JSON gzipped for a browser that accepts it, plotly named only by
the pages that draw charts, and an icon for every page (no 404 in the console)."""

from __future__ import annotations

import gzip

import pytest
from django.test import Client
from runs.models import Kind, Run

pytestmark = pytest.mark.django_db
PLOTLY = "vendor/plotly-4.1.2.min"


def test_a_run_page_travels_gzipped(alice_client, alice_run):
    plain = alice_client.get(f"/runs/{alice_run.pk}/")
    packed = alice_client.get(f"/runs/{alice_run.pk}/", HTTP_ACCEPT_ENCODING="gzip, deflate, br")
    assert "Content-Encoding" not in plain and packed["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in packed["Vary"]
    html = gzip.decompress(packed.content)
    assert html.startswith(b"<!doctype html>") and b'id="run-data"' in html
    assert len(packed.content) < len(plain.content) / 3


def test_the_api_travels_gzipped_too(api, alice_run):
    response = api.get(f"/api/runs/{alice_run.pk}/", HTTP_ACCEPT_ENCODING="gzip")
    assert response["Content-Encoding"] == "gzip" and gzip.decompress(response.content).startswith(b"{")


def test_plotly_is_loaded_only_by_pages_with_charts(alice_client, alice_run, alice):
    evaluation = Run.objects.create(owner=alice, name="e", kind=Kind.EVALUATION, config={})
    assert PLOTLY in alice_client.get(f"/runs/{alice_run.pk}/").content.decode()
    for url in ("/runs/", "/runs/new/", "/runs/evaluate/", f"/runs/{evaluation.pk}/evaluation/"):
        response = alice_client.get(url)
        assert response.status_code == 200 and PLOTLY not in response.content.decode(), url


def test_every_page_names_an_icon_and_favicon_ico_is_never_a_404(alice_client):
    assert 'rel="icon" href="/static/favicon.svg"' in alice_client.get("/runs/").content.decode()
    anonymous = Client()
    redirect = anonymous.get("/favicon.ico")
    assert redirect.status_code == 301 and redirect["Location"] == "/static/favicon.svg"
    icon = anonymous.get("/static/favicon.svg")
    assert icon.status_code == 200 and icon["Content-Type"].startswith("image/svg+xml")
