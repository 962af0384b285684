"""Per-user quotas (runs.models.quotas): one user cannot hold the workers with a run of 10,000,000 steps or a
thousand queued runs. Every launch (the form, the API, a fork, a sweep, a ladder, an evaluation, a
resume) past the cap on queued+running runs or on their summed ``optim.total_steps`` is refused with a 409
whose message names the cap, the current use and who can raise it, and nothing is queued. An
administrator's quota row raises (or sets) a user's caps; superusers are exempt unless a row names them."""

from __future__ import annotations

from typing import Any

import pytest
from catalog.models import BaseModel, Dataset
from django.test import Client
from runs.models import Run

from tests.platform.compare.test_views import ladder_form
from tests.platform.fixtures import make_user
from tests.platform.runs.test_views import _form
from tests.platform.sweeps.test_views import sweep_form

pytestmark = pytest.mark.django_db


@pytest.fixture
def small_quota(settings: Any) -> None:
    """Two runs at once, 100 steps in all (alice_run holds 10 of them)."""
    settings.DAPO_QUOTA_RUNS, settings.DAPO_QUOTA_STEPS = 2, 100


def _body(paths: dict[str, str], steps: int, name: str = "big") -> dict[str, Any]:
    return {"name": name, "preset": "tiny_cpu", "overrides": {**paths, "optim.total_steps": steps}}


def _names_cap_use_and_admin(detail: str, *words: str) -> None:
    assert "administrator" in detail and all(w in detail for w in words), detail


def test_a_run_of_ten_million_steps_is_refused_by_default(api, paths, queued):
    response = api.post("/api/runs/", _body(paths, 10_000_000), format="json")
    assert response.status_code == 409, response.json()
    _names_cap_use_and_admin(response.json()["detail"], "10,000,000", "100,000", "hold 0 training steps")
    assert response.json()["quota"] == {"cap": "steps", "limit": 100_000, "used": 0, "requested": 10_000_000}
    assert not Run.objects.exists() and queued == []


def test_the_runs_cap_counts_queued_and_running_runs_only(api, alice_run, paths, queued, small_quota):
    assert api.post("/api/runs/", _body(paths, 10, "second"), format="json").status_code == 201
    refused = api.post("/api/runs/", _body(paths, 10, "third"), format="json")
    assert refused.status_code == 409
    _names_cap_use_and_admin(refused.json()["detail"], "2 runs queued or running", "at most 2")
    assert not Run.objects.filter(name="third").exists()
    alice_run.request_cancel()  # a finished run holds nothing
    assert api.post("/api/runs/", _body(paths, 10, "third"), format="json").status_code == 201


def test_the_form_refuses_past_the_cap_and_keeps_what_was_typed(
    alice_client, alice_run, paths, queued, small_quota
):
    response = alice_client.post("/runs/new/", _form(paths, name="long one", **{"optim.total_steps": "500"}))
    html = response.content.decode()
    assert response.status_code == 409 and "Not queued" in html and "administrator" in html
    assert 'value="long one"' in html and 'value="500"' in html  # nothing typed is lost
    assert not Run.objects.filter(name="long one").exists() and queued == []


def test_a_fork_past_the_cap_is_refused(alice_client, alice_run, paths, queued, small_quota, tmp_path):
    folder = tmp_path / "ckpt" / "step_000002"
    folder.mkdir(parents=True)
    (folder / "state.pt").write_bytes(b"weights")
    alice_run.record_checkpoint(2, str(folder))
    form = _form(
        paths, name="fork", checkpoint=str(alice_run.checkpoints.get().pk), **{"optim.total_steps": "95"}
    )
    response = alice_client.post(f"/runs/new/?fork={alice_run.pk}", form)
    assert response.status_code == 409 and "Not queued" in response.content.decode()
    assert not Run.objects.filter(name="fork").exists()


def test_a_sweep_counts_all_its_runs_at_once(api, alice_client, paths, queued, small_quota):
    body = {**_body(paths, 10, "sw"), "sweep": {"mode": "grid", "fields": {"optim.lr": [1e-5, 2e-5, 3e-5]}}}
    response = api.post("/api/sweeps/", body, format="json")
    assert response.status_code == 409 and "this launch adds 3" in response.json()["detail"]
    rows = [{"field": "optim.lr", "kind": "list", "values": "1e-5, 2e-5, 3e-5"}]
    form = {**sweep_form(paths, rows, **{"optim.total_steps": "10"}), "sweep_confirm": "yes"}
    page = alice_client.post("/runs/new/sweep/", form)
    assert page.status_code == 409 and "Not queued" in page.content.decode()
    assert not Run.objects.exists() and queued == []


def test_a_ladder_past_the_cap_queues_no_rung(alice_client, paths, queued, settings):
    settings.DAPO_QUOTA_RUNS = 5  # the ladder has six rungs
    response = alice_client.post("/runs/new/ladder/", ladder_form(paths))
    assert response.status_code == 409 and "this launch adds 6" in response.content.decode()
    assert not Run.objects.exists() and queued == []


def test_an_evaluation_counts_as_a_run(api, alice_run, paths, queued, settings):
    settings.DAPO_QUOTA_RUNS = 1
    Dataset.objects.create(name="arith", path=paths["data.train_path"], val_path=paths["data.val_path"])
    body = {"name": "eval", "base_model": "x", "datasets": ["arith"]}
    BaseModel.objects.create(name="x", path=paths["model.path"])
    response = api.post("/api/evaluations/", body, format="json")
    assert response.status_code == 409 and "at most 1" in response.json()["detail"]
    assert not Run.objects.filter(name="eval").exists()


def test_resume_past_the_cap_is_refused_and_the_run_stays(
    api, alice_client, alice_run, paths, small_quota, tmp_path
):
    folder = tmp_path / "ckpt" / "step_000002"
    folder.mkdir(parents=True)
    (folder / "state.pt").write_bytes(b"weights")
    alice_run.record_checkpoint(2, str(folder))
    alice_run.request_cancel()
    assert api.post("/api/runs/", _body(paths, 91, "fills the steps"), format="json").status_code == 201
    response = api.post(f"/api/runs/{alice_run.pk}/resume/")
    assert response.status_code == 409 and response.json()["quota"]["cap"] == "steps"
    page = alice_client.post(f"/runs/{alice_run.pk}/resume/", follow=True)
    assert "Not queued" in page.content.decode()
    assert Run.objects.get(pk=alice_run.pk).status == "cancelled"


def test_an_admin_quota_row_raises_one_users_cap(api, alice, paths, queued):
    from runs.models import RunQuota

    RunQuota.objects.create(user=alice, max_steps=20_000_000)
    assert api.post("/api/runs/", _body(paths, 10_000_000), format="json").status_code == 201


def test_superusers_are_exempt_unless_a_row_names_them(django_user_model, paths, queued):
    from runs.models import RunQuota

    root = make_user(django_user_model, "root", "x", is_superuser=True, is_staff=True)
    client = Client()
    client.force_login(root)

    def launch(name: str) -> int:
        return client.post(
            "/api/runs/", _body(paths, 10_000_000, name), content_type="application/json"
        ).status_code

    assert launch("root's long run") == 201
    RunQuota.objects.create(user=root, max_steps=1000)
    assert launch("another") == 409


def test_the_admin_edits_quotas(django_user_model, alice):
    from runs.models import RunQuota

    root = Client()
    root.force_login(make_user(django_user_model, "root", "x", is_superuser=True, is_staff=True))
    page = root.get("/admin/runs/runquota/add/")
    assert page.status_code == 200 and "max_steps" in page.content.decode()
    response = root.post("/admin/runs/runquota/add/", {"user": alice.pk, "max_runs": "3", "max_steps": ""})
    assert response.status_code == 302
    assert RunQuota.objects.get(user=alice).max_runs == 3
