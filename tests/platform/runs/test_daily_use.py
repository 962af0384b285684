"""What bothered a new user in daily use: the ladder's confirmation, clone & edit, stale messages, the API's
error reports and docs."""

from __future__ import annotations

import pytest
from runs.models import Run

from dapo.runconfig.presets import ABLATION_LADDER

pytestmark = pytest.mark.django_db


def _form(paths, **changes):
    from runs.forms import presets_data

    values = {k: v for k, v in presets_data()["tiny_cpu"]["values"].items() if v is not False}
    values = {k: ("on" if v is True else v) for k, v in values.items()}
    return {**values, **paths, "name": "ladder", "preset": "tiny_cpu", **changes}


def test_the_ladder_first_shows_the_six_runs_and_queues_nothing(alice_client, paths, queued):
    response = alice_client.post("/runs/new/ladder/", _form(paths, **{"optim.lr": "3e-5"}))
    html = response.content.decode()
    assert response.status_code == 200 and not Run.objects.exists() and queued == []
    assert 'id="ladder-confirm"' in html and f"Queue {len(ABLATION_LADDER)} runs" in html
    for name, _, _ in ABLATION_LADDER:
        assert f"<li>ladder · {name}</li>" in html
    assert 'value="3e-05"' in html or 'value="3e-5"' in html  # the form keeps what was typed
    assert 'id="run-form" novalidate action="/runs/new/"' in html  # "Launch run" there still launches one run


def test_the_confirmed_ladder_queues_the_six_runs(
    alice_client, paths, queued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post("/runs/new/ladder/", _form(paths, ladder_confirm="yes"))
    assert response.status_code == 302 and Run.objects.count() == len(ABLATION_LADDER)
    # the scheduler sends as many as there are worker slots (DAPO_SCHEDULER_SLOTS, default 2); the rest wait
    assert (
        len(queued) == 2
        and Run.objects.filter(dispatched_at__isnull=True).count() == len(ABLATION_LADDER) - 2
    )


def test_clone_and_edit_says_which_run_it_copies(alice_client, alice_run):
    html = alice_client.get(f"/runs/new/?from={alice_run.pk}").content.decode()
    assert f"<title>Clone run #{alice_run.pk} · DAPO platform</title>" in html
    assert f'Clone &amp; edit run <a href="/runs/{alice_run.pk}/">#{alice_run.pk} alice-demo</a>' in html
    assert 'id="preset-notice"' in html  # where the form lists what a preset change overwrote
    assert "<title>New run · DAPO platform</title>" in alice_client.get("/runs/new/").content.decode()


def test_a_status_message_is_marked_so_the_run_page_drops_it_once_stale(alice_client, alice_run):
    alice_run.claim("w")
    html = alice_client.post(f"/runs/{alice_run.pk}/cancel/", follow=True).content.decode()
    note = "Cancelling: the run stops at its next step boundary."
    assert f'<li class="msg msg-info status-note">{note}</li>' in html


def test_the_api_reports_every_config_error_at_once(alice, paths):
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(alice)
    overrides = {**paths, "optim.nope": 1, "optim.lr": -1, "rollout.n": "eight", "rollout.top_p": 2.0}
    body = {"name": "x", "preset": "tiny_cpu", "overrides": overrides}
    response = api.post("/api/runs/", body, format="json")
    errors = response.json()["errors"]
    assert response.status_code == 400
    assert set(errors) == {"optim.nope", "optim.lr", "rollout.n", "rollout.top_p"}, errors
    assert errors["optim.lr"].startswith("must be")


def test_the_api_docs_page_lists_every_endpoint_for_a_logged_in_user(alice_client, anon_client):
    html = alice_client.get("/api/docs/").content.decode()
    for path in ("/api/runs/", "/api/runs/{run_id}/metrics/", "/api/runs/{run_id}/log/"):
        assert f"<code>{path}</code>" in html
    assert "<code>max_points</code>" in html and "<code>overrides</code>" in html
    response = anon_client.get("/api/docs/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_engine_menus_cpu_choice_is_explained(alice_client):
    html = alice_client.get("/runs/new/").content.decode()
    field = html.split('data-field="rollout.engine"', 1)[1]
    help_text = field.split('<p class="help">', 1)[1].split("</p>")[0]
    assert ">cpu</option>" in html and "cpu (the same hf" in help_text and "older name" in help_text


def test_a_comparison_of_one_run_says_run_not_runs(alice_client, alice_run):
    html = alice_client.get(f"/runs/compare/?ids={alice_run.pk}").content.decode()
    assert "Compare 1 run ·" in html and "Compare 1 runs" not in html
