"""dapo.client against the real server: daphne and a Celery worker (the fast stand-in trainer of
tests/worker/fake_runner.py) on the test database and the test Redis database. Runs are created, listed,
waited for, cancelled and resumed through the client; metrics and samples read back; every error is the
API's message in the exception of its status."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from dapo import client as dapo_client
from dapo.client import (
    AuthenticationFailed,
    BadRequest,
    Client,
    Conflict,
    NotFound,
    PermissionDenied,
    RunFailed,
    RunTimeout,
)
from tests.platform.fixtures import alice, bob, isolated_settings  # noqa: F401 (fixtures)
from tests.platform.support import make_fake_assets
from tests.worker import stack

HOOKS = "https://hooks.example/services/"
"""The webhook prefix the server allows."""

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def server(django_db_setup: Any, django_db_blocker: Any, redis_url: str, tmp_path_factory: Any) -> Any:
    """daphne and a Celery worker sharing the test database; yields (base URL, the folder they write)."""
    var = tmp_path_factory.mktemp("client-var")
    env = stack.environment(
        var,
        DAPO_RUNNER="tests.worker.fake_runner:run",
        DAPO_MODEL_ROOTS=str(var),
        DAPO_DATASET_ROOTS=str(var),
        FAKE_STEP_SECONDS="0.1",
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
        DAPO_WEBHOOK_URLS=HOOKS,
    )
    port = stack.free_port()
    with stack.celery_worker(env, var / "celery.log"), stack.daphne(env, var / "daphne.log", port):
        yield f"http://127.0.0.1:{port}", var
    with django_db_blocker.unblock():
        stack.wait_for_other_sessions_to_leave()


def _client(server: Any, user: Any) -> Client:
    from rest_framework.authtoken.models import Token

    return Client(server[0], token=Token.objects.create(user=user).key, timeout=20)


@pytest.fixture
def overrides(server: Any) -> dict[str, Any]:
    return {**make_fake_assets(server[1]), "checkpoint.every_n_steps": 1}


def test_a_run_is_created_waited_for_and_read_back(server, alice, overrides):  # noqa: F811
    client = _client(server, alice)
    created = client.create_run(
        "client-run", preset="tiny_cpu", overrides={**overrides, "optim.total_steps": 3}
    )
    assert created["status"] == "queued" and created["config"]["optim"]["total_steps"] == 3
    run = client.wait_for_run(created["id"], timeout=90, interval=0.2, raise_on_failure=True)
    assert (run["status"], run["step"]) == ("succeeded", 3)
    assert [r["id"] for r in client.list_runs(status="succeeded")] == [created["id"]]
    assert client.list_runs(q="no-such-name") == []
    train = client.get_run(created["id"])["data_files"][0]  # recorded by the worker: the file's hash
    assert train["field"] == "data.train_path" and len(train["sha256"]) == 64 and train["dataset"] is None

    metrics = client.metrics(created["id"], ["critic/score/mean", "actor/entropy"])
    assert metrics["critic/score/mean"] == {"steps": [1, 2, 3], "values": pytest.approx([1 / 3, 2 / 3, 1.0])}
    assert set(metrics) == {"critic/score/mean", "actor/entropy"}
    assert client.metrics(created["id"], min_step=2)["train/acc/mean"]["steps"] == [2, 3]

    samples = list(client.samples(created["id"], page_size=5))  # 12 samples: three pages
    assert len(samples) == 12 and [s["step"] for s in samples] == [3] * 4 + [2] * 4 + [1] * 4
    assert [s["sample_index"] for s in samples[:4]] == [0, 1, 2, 3] and "Answer: 2" in samples[0]["response"]
    assert [s["step"] for s in client.samples(created["id"], step=2)] == [2] * 4
    assert list(client.samples(created["id"], acc=False)) == []


def test_wait_times_out_then_cancel_resume_and_a_failed_wait(server, alice, overrides):  # noqa: F811
    client = _client(server, alice)
    run_id = client.create_run("long", preset="tiny_cpu", overrides={**overrides, "optim.total_steps": 500})[
        "id"
    ]
    stack.wait_for(lambda: client.get_run(run_id)["step"] >= 1, 60, "the run's first step")
    with pytest.raises(
        RunTimeout, match=rf"run {run_id} is still running \(step \d+\) after 0.3 s"
    ) as waited:
        client.wait_for_run(run_id, timeout=0.3, interval=0.1)
    assert waited.value.run["id"] == run_id and waited.value.run["status"] == "running"
    assert client.cancel_run(run_id)["outcome"] == "cancelling"
    with pytest.raises(RunFailed, match=rf"run {run_id} cancelled"):
        client.wait_for_run(run_id, timeout=60, interval=0.2, raise_on_failure=True)
    from runs.models import Run

    checkpoint = Path(Run.objects.get(pk=run_id).last_checkpoint)
    (checkpoint / "state.pt").write_bytes(b"weights")  # what the real trainer saves; the stand-in does not
    resumed = client.resume_run(run_id)
    assert resumed["status"] == "queued"
    client.cancel_run(run_id)
    assert client.wait_for_run(run_id, timeout=60, interval=0.2)["status"] == "cancelled"


def test_bulk_runs_changes_only_your_own(server, alice, bob, overrides):  # noqa: F811
    client, bobs = _client(server, alice), _client(server, bob)
    body = {**overrides, "optim.total_steps": 500}
    mine = [client.create_run(f"mine-{i}", preset="tiny_cpu", overrides=body)["id"] for i in range(2)]
    theirs = bobs.create_run("bobs", preset="tiny_cpu", overrides=body)["id"]
    answer = client.bulk_runs("cancel", [*mine, theirs])
    assert set(answer["done"]) == {str(i) for i in mine} and list(answer["refused"]) == [str(theirs)]
    assert answer["refused"][str(theirs)] == f"#{theirs}: no such run among yours"  # unshared: missing
    for run_id in mine:
        assert client.wait_for_run(run_id, timeout=60, interval=0.2)["status"] == "cancelled"
    assert client.bulk_runs("delete", mine)["done"] == {str(i): "deleted" for i in mine}
    with pytest.raises(BadRequest, match="action: must be one of cancel, archive, restore, delete"):
        client.bulk_runs("explode", [theirs])
    bobs.cancel_run(theirs)
    bobs.wait_for_run(theirs, timeout=60, interval=0.2)


def test_errors_carry_the_apis_message(server, alice, bob, overrides):  # noqa: F811
    client, bobs = _client(server, alice), _client(server, bob)
    with pytest.raises(BadRequest) as bad:
        client.create_run("bad", preset="tiny_cpu", overrides={**overrides, "optim.lr": -1})
    assert bad.value.status == 400 and bad.value.detail == "invalid run" and "optim.lr" in bad.value.errors
    assert "HTTP 400: invalid run (optim.lr: " in str(bad.value)
    with pytest.raises(BadRequest, match="unknown preset 'nope'"):
        client.create_run("bad", preset="nope")
    with pytest.raises(BadRequest, match="status: must be one of queued"):
        client.list_runs(status="sleeping")
    run_id = client.create_run("mine", preset="tiny_cpu", overrides={**overrides, "optim.total_steps": 2})[
        "id"
    ]
    with pytest.raises(NotFound, match="HTTP 404: No such run."):
        bobs.get_run(run_id)  # another user's run is missing, not forbidden
    with pytest.raises(NotFound):
        bobs.cancel_run(run_id)
    client.wait_for_run(run_id, timeout=60, interval=0.2)
    with pytest.raises(Conflict, match="Only a failed or cancelled run with a checkpoint can be resumed"):
        client.resume_run(run_id)
    with pytest.raises(AuthenticationFailed, match="HTTP 401: Invalid token."):
        Client(server[0], token="0" * 40).list_runs()
    with pytest.raises(dapo_client.ServerUnreachable, match="no answer"):
        Client(f"http://127.0.0.1:{stack.free_port()}", token="x", timeout=2).list_runs()
    with pytest.raises(ValueError, match="an id is a positive integer"):
        client.get_run(0)


def test_a_client_without_a_token_says_where_to_get_one(monkeypatch):
    monkeypatch.delenv("DAPO_TOKEN", raising=False)
    with pytest.raises(ValueError, match=r"create one at http://h:1/accounts/token/"):
        Client("http://h:1/")
    monkeypatch.setenv("DAPO_TOKEN", "abc")
    monkeypatch.setenv("DAPO_URL", "http://example.org:9/")
    assert (Client().url, Client().token) == ("http://example.org:9", "abc")


def test_metrics_frame_needs_pandas_and_says_so(server, alice, monkeypatch):  # noqa: F811
    monkeypatch.setitem(sys.modules, "pandas", None)  # what an environment without pandas looks like
    with pytest.raises(
        ImportError,
        match=r"metrics_frame needs pandas, an optional extra: pip install pandas \(or .*\[frames\]",
    ):
        _client(server, alice).metrics_frame(1)


def test_metrics_frame_has_a_row_per_step_and_a_column_per_metric(server, alice, overrides):  # noqa: F811
    pandas = pytest.importorskip("pandas")  # not in the locks: the client imports it only when asked
    client = _client(server, alice)
    run_id = client.create_run("f", preset="tiny_cpu", overrides={**overrides, "optim.total_steps": 2})["id"]
    client.wait_for_run(run_id, timeout=60, interval=0.2)
    frame = client.metrics_frame(run_id, ["critic/score/mean"])
    assert isinstance(frame, pandas.DataFrame) and list(frame.index) == [1, 2] and frame.index.name == "step"


def test_the_catalog_through_the_client(server, alice, overrides, settings):  # noqa: F811
    from catalog.registry import register_dataset

    settings.DAPO_DATASET_ROOTS = [server[1]]  # where the server's processes read data files
    client = _client(server, alice)
    model_dir = Path(overrides["model.path"])
    with pytest.raises(BadRequest, match="cannot be used as a base model: no weights"):
        client.register_model("tiny", str(model_dir))  # the fake assets hold a config.json only
    with pytest.raises(BadRequest, match="must be inside one of the model roots"):
        client.register_model("evil", "/etc")
    assert client.models() == []
    dataset = register_dataset("sums", overrides["data.train_path"], overrides["data.val_path"])
    run_id = client.create_run(
        "on-sums", preset="tiny_cpu", dataset="sums", overrides={**overrides, "optim.total_steps": 400}
    )["id"]
    assert [(d["name"], d["version"]) for d in client.datasets("sums")] == [("sums", 1)]
    stack.wait_for(lambda: client.get_run(run_id)["status"] == "running", 60, "the run to start")
    with pytest.raises(
        PermissionDenied, match="sums v1 was added by the command line: only they or an admin"
    ):
        client.delete_dataset(dataset.pk)
    type(dataset).objects.filter(pk=dataset.pk).update(created_by=alice)
    with pytest.raises(Conflict, match=rf"sums v1 is in use by 1 queued or running run: #{run_id} 'on-sums'"):
        client.delete_dataset(dataset.pk)
    client.cancel_run(run_id)
    client.wait_for_run(run_id, timeout=60, interval=0.2)
    assert client.get_run(run_id)["data_files"][0]["dataset"]["version"] == 1
    client.delete_dataset(dataset.pk)
    assert client.datasets() == []


def test_notification_settings_and_saved_views_through_the_client(server, alice, bob):  # noqa: F811
    client, bobs = _client(server, alice), _client(server, bob)
    assert client.notification_settings()["stall_minutes"] == 15
    with pytest.raises(BadRequest, match="not under an allowed webhook prefix") as bad:
        client.update_notification_settings(webhook_url="https://evil.example/x", stall_minutes=5)
    assert set(bad.value.errors) == {"webhook_url"}
    assert client.notification_settings()["stall_minutes"] == 15  # nothing changed
    saved = client.update_notification_settings(webhook_url=HOOKS + "alice", stall_minutes=5)
    assert (saved["webhook_url"], saved["stall_minutes"], saved["deliveries"]) == (HOOKS + "alice", 5, [])
    assert bobs.notification_settings()["webhook_url"] == ""

    view = client.save_view("small lr", filter="optim.lr < 1e-4", sort="-step", columns=["optim.lr"])
    assert (view["filter"], view["columns"], view["archived"]) == ("optim.lr < 1e-4", ["optim.lr"], "active")
    with pytest.raises(BadRequest, match="filter: ") as bad:
        client.save_view("broken", filter="optim.lr <")
    assert set(bad.value.errors) == {"filter"}
    assert [v["name"] for v in client.saved_views()] == ["small lr"] and bobs.saved_views() == []
    with pytest.raises(NotFound):
        bobs.delete_view(view["id"])
    client.delete_view(view["id"])
    assert client.saved_views() == []
