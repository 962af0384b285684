"""The run log on the run page (followed in chunks of whole lines), as a download, and through the API."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient
from runs import run_log

pytestmark = pytest.mark.django_db


def _write(run, text: bytes):
    path = run_log.log_path(run.pk)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text)
    return path


def test_chunks_are_whole_lines_and_a_line_being_written_waits(alice_run):
    _write(alice_run, b"one\ntwo\nthr")
    chunk = run_log.read_chunk(alice_run.pk, offset=0)
    assert (chunk["text"], chunk["next_offset"], chunk["size"]) == ("one\ntwo\n", 8, 11)
    assert run_log.read_chunk(alice_run.pk, offset=8)["text"] == ""
    _write(alice_run, b"one\ntwo\nthree\n")
    assert run_log.read_chunk(alice_run.pk, offset=8)["text"] == "three\n"


def test_a_tail_starts_at_a_line_and_an_offset_past_the_end_reads_from_the_start(alice_run):
    _write(alice_run, b"alpha\nbravo\ncharlie\n")
    tail = run_log.read_chunk(alice_run.pk, tail=10)  # the last 10 bytes begin inside "bravo"
    assert (tail["text"], tail["offset"]) == ("charlie\n", 12)
    assert run_log.read_chunk(alice_run.pk, offset=999)["text"] == "alpha\nbravo\ncharlie\n"
    assert run_log.read_chunk(alice_run.pk + 1000, offset=0)["exists"] is False


def test_the_run_page_has_the_log_panel_and_follows_the_log(alice_client, alice_run):
    _write(alice_run, b"Traceback (most recent call last):\nValueError: <b>bad</b>\n")
    html = alice_client.get(f"/runs/{alice_run.pk}/").content.decode()
    assert 'id="run-log-panel"' in html and f"/runs/{alice_run.pk}/log.txt" in html
    data = alice_client.get(f"/runs/{alice_run.pk}/log/?tail=65536").json()
    assert data["text"].endswith("ValueError: <b>bad</b>\n") and data["status"] == "queued"
    assert alice_client.get(f"/runs/{alice_run.pk}/log/?offset=-1").status_code == 400


def test_the_log_downloads_as_a_text_attachment(alice_client, alice_run):
    assert alice_client.get(f"/runs/{alice_run.pk}/log.txt").status_code == 404  # no log yet
    _write(alice_run, b"step 1\nstep 2\n")
    response = alice_client.get(f"/runs/{alice_run.pk}/log.txt")
    assert response.status_code == 200 and b"".join(response.streaming_content) == b"step 1\nstep 2\n"
    assert response["Content-Disposition"] == f'attachment; filename="run-{alice_run.pk}.log"'


def test_another_users_log_is_not_found(bob_client, alice_run, bob):
    _write(alice_run, b"secret\n")
    assert bob_client.get(f"/runs/{alice_run.pk}/log/").status_code == 404
    assert bob_client.get(f"/runs/{alice_run.pk}/log.txt").status_code == 404
    api = APIClient()
    api.force_authenticate(bob)
    assert api.get(f"/api/runs/{alice_run.pk}/log/").status_code == 404


def test_the_api_serves_the_same_chunks(alice_run, alice):
    _write(alice_run, b"a\nb\n")
    api = APIClient()
    api.force_authenticate(alice)
    data = api.get(f"/api/runs/{alice_run.pk}/log/?offset=2").json()
    assert (data["text"], data["offset"], data["next_offset"]) == ("b\n", 2, 4)
    assert api.get(f"/api/runs/{alice_run.pk}/log/?offset=x").status_code == 400
    assert APIClient().get(f"/api/runs/{alice_run.pk}/log/").status_code in (401, 403)
