"""Our own 404 and 500 pages, each with a way back; the API keeps answering JSON."""

from __future__ import annotations

import pytest
from config import urls as site_urls
from django.test import Client
from django.urls import path

pytestmark = pytest.mark.django_db


def _boom(request):
    raise RuntimeError("a bug")


urlpatterns = [path("boom/", _boom), *site_urls.urlpatterns]


@pytest.mark.parametrize("debug", [True, False])
@pytest.mark.parametrize("url", ["/runs/999999/", "/no/such/page/", "/runs/1/samples/77/"])
def test_a_missing_page_is_ours_and_leads_back(alice_client, settings, debug, url):
    settings.DEBUG = debug
    response = alice_client.get(url)
    html = response.content.decode()
    assert response.status_code == 404
    assert 'id="error-404"' in html and 'href="/runs/"' in html and "Back to the runs" in html
    assert "URLconf" not in html and "Using the URLconf" not in html  # no list of the site's URL patterns


def test_the_api_still_answers_json_404(alice_client):
    response = alice_client.get("/api/runs/999999/")
    assert response.status_code == 404 and response["Content-Type"] == "application/json"


def test_a_server_error_is_our_page_when_not_debugging(alice, settings):
    settings.DEBUG = False
    settings.ROOT_URLCONF = __name__
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    response = client.get("/boom/")
    html = response.content.decode()
    assert response.status_code == 500 and 'id="error-500"' in html and "Back to the runs" in html
    assert "a bug" not in html
