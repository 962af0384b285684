"""Regression tests of what an attacker got through before (each fails on the code before its fix):

1. run data paths outside the dataset roots, and the reply telling whether a file exists there;
2. deeply nested JSON (API body, JSONL upload line, a column value) answered with a 500;
3. unthrottled password guessing on the login page and on /admin/login/;
4. API tokens that outlive a password change;
6. a websocket opened from another web app on the same host (same name, other port or scheme);
7. the OpenAPI schema readable without logging in.
(5, run names drawn as markup in chart legends, is a browser test: tests/e2e/test_plot_labels.py.)
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client
from rest_framework.authtoken.models import Token
from runs.models import Run

from dapo.data import jsonsafe
from dapo.runconfig.presets import get_preset
from tests.platform.runs.test_views import _form

pytestmark = pytest.mark.django_db(transaction=True)

OUTSIDE_MESSAGE = "must be inside one of the dataset roots"


def _token_client(user: Any) -> Client:
    token = Token.objects.create(user=user)
    return Client(HTTP_AUTHORIZATION=f"Token {token.key}")


def _create(client: Client, body: Any) -> Any:
    return client.post("/api/runs/", json.dumps(body), content_type="application/json")


@pytest.fixture
def secret(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A readable JSONL file outside every root, in the format a run would train on."""
    path = tmp_path_factory.mktemp("elsewhere") / "secret.jsonl"
    path.write_text(json.dumps({"prompt": "the secret prompt", "answer": "42"}) + "\n")
    return path


# ---- 1. paths ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["data.train_path", "data.val_path"])
def test_a_data_path_outside_the_roots_is_refused_without_saying_whether_it_exists(
    alice, paths, queued, secret, field
):
    api = _token_client(alice)
    answers = []
    for probe in (str(secret), str(secret.with_name("missing.jsonl")), "/root/.bash_history"):
        response = _create(api, {"name": "x", "preset": "tiny_cpu", "overrides": {**paths, field: probe}})
        assert response.status_code == 400, response.content
        answers.append(response.json()["errors"][field])
    assert OUTSIDE_MESSAGE in answers[0]
    assert len(set(answers)) == 1, answers  # the same words whether or not a file is there
    assert "no file" not in answers[0] and "secret" not in answers[0]
    assert Run.objects.count() == 0 and queued == []


def test_traversal_and_links_out_of_a_root_are_refused(alice, paths, queued, secret, tmp_path):
    root = Path(paths["data.train_path"]).parent
    (root / "link.jsonl").symlink_to(secret)
    (root / "folder").symlink_to(secret.parent, target_is_directory=True)
    api = _token_client(alice)
    up = "/".join([".."] * len(root.parts))
    for probe in (f"{root}/{up}{secret}", str(root / "link.jsonl"), str(root / "folder/secret.jsonl")):
        response = _create(
            api, {"name": "x", "preset": "tiny_cpu", "overrides": {**paths, "data.train_path": probe}}
        )
        assert (
            response.status_code == 400 and OUTSIDE_MESSAGE in response.json()["errors"]["data.train_path"]
        ), probe
    assert Run.objects.count() == 0


def test_a_whole_config_and_the_form_are_checked_the_same_way(alice, alice_client, paths, queued, secret):
    config = get_preset("tiny_cpu").with_overrides(paths).to_dict()
    config["data"]["train_path"] = str(secret)
    response = _create(_token_client(alice), {"name": "x", "config": config})
    assert response.status_code == 400 and OUTSIDE_MESSAGE in response.json()["errors"]["data.train_path"]

    page = alice_client.post("/runs/new/", _form(paths, **{"data.train_path": str(secret)}))
    assert page.status_code == 400 and OUTSIDE_MESSAGE in page.content.decode()
    assert Run.objects.count() == 0


def test_a_path_inside_the_roots_is_still_accepted_and_a_missing_one_named(alice, paths, queued):
    api = _token_client(alice)
    assert _create(api, {"name": "ok", "preset": "tiny_cpu", "overrides": paths}).status_code == 201
    missing = str(Path(paths["data.train_path"]).with_name("missing.jsonl"))
    response = _create(
        api, {"name": "x", "preset": "tiny_cpu", "overrides": {**paths, "data.train_path": missing}}
    )
    assert response.status_code == 400 and response.json()["errors"]["data.train_path"].startswith(
        "no file at"
    )


def test_the_worker_checks_the_paths_again_before_it_opens_a_file(alice_run, settings, tmp_path):
    from catalog.paths import PathError

    from worker import tasks

    assert tasks.resolved_config(alice_run).data.train_path.endswith("train.jsonl")
    settings.DAPO_DATASET_ROOTS = [tmp_path / "narrowed"]  # the root moved after the run was queued
    with pytest.raises(PathError, match=r"^data\.train_path must be inside one of the dataset roots"):
        tasks.resolved_config(alice_run)


# ---- 2. deep JSON --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"name": "x", "preset": "tiny_cpu", "overrides": ' + '{"a": ' * 900 + "1" + "}" * 900 + "}",
        "[" * 65 + "]" * 65,
    ],
    ids=["100k-brackets", "900-deep-object", "65-levels"],
)
def test_deeply_nested_json_to_the_api_is_a_400(alice, queued, body):
    response = _token_client(alice).post("/api/runs/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert "nested deeper than 64 levels" in response.json()["detail"]
    assert Run.objects.count() == 0


def test_an_oversized_api_body_is_a_413(alice, settings, queued):
    settings.DAPO_API_MAX_BODY_BYTES = 1000
    body = json.dumps({"name": "x" * 2000, "preset": "tiny_cpu"})
    response = _token_client(alice).post("/api/runs/", body, content_type="application/json")
    assert response.status_code == 413 and "larger than 1000 bytes" in response.json()["detail"]


def _upload(client: Client, name: str, content: bytes) -> Any:
    f = io.BytesIO(content)
    f.name = name
    return client.post("/datasets/upload/", {"name": "deep", "description": "", "train": f})


GOOD_ROW = {"prompt": "Compute 1+1.", "answer": "2"}
DEEP_COLUMN = {"prompt": "p", "answer": "1", "extra": json.loads("[" * 100 + "]" * 100)}


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "deep.jsonl",
            f"{json.dumps(GOOD_ROW)}\n{'[' * 100_000}{']' * 100_000}\n",
            "row 2: nested deeper than 64",
        ),
        (
            "deep.jsonl",
            f"{json.dumps(GOOD_ROW)}\n{json.dumps(DEEP_COLUMN)}\n",
            "row 2: nested deeper than 64",
        ),
    ],
    ids=["100k-brackets", "100-deep-column"],
)
def test_an_upload_with_deep_nesting_names_the_row_and_imports_nothing(alice_client, name, content, message):
    from catalog.models import Dataset

    response = _upload(alice_client, name, content.encode())
    assert response.status_code == 400
    assert message in response.content.decode().replace("&#x27;", "'")
    assert Dataset.objects.count() == 0


def test_a_json_data_file_with_deep_nesting_is_a_data_error(tmp_path):
    from dapo.data.problems import DataError, load_problems

    column = tmp_path / "column.json"
    column.write_text(json.dumps([GOOD_ROW, DEEP_COLUMN]))
    with pytest.raises(DataError, match=r"row 2: column 'extra' is nested deeper than 63 levels"):
        load_problems(column)
    brackets = tmp_path / "brackets.json"
    brackets.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataError, match="nested deeper than Python's parser can read"):
        load_problems(brackets)


def test_depth_is_counted_without_recursion():
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    assert jsonsafe.depth(deep, limit=64) == 65  # stops counting past the limit, no RecursionError
    assert jsonsafe.depth({"a": [1, {"b": []}]}) == 4 and jsonsafe.depth(3) == 0
    with pytest.raises(jsonsafe.TooDeep):
        jsonsafe.loads("[" * 100_000 + "]" * 100_000)


# ---- 3. login throttling -------------------------------------------------------------------------------


def _login(path: str, username: str, password: str, address: str = "10.0.0.1") -> Any:
    client = Client(REMOTE_ADDR=address)
    client.get(path)
    return client.post(path, {"username": username, "password": password, "next": "/runs/"})


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_five_wrong_passwords_lock_the_account_even_for_the_right_one(alice, django_user_model, path):
    alice.is_staff = True
    alice.save()
    for _ in range(django_settings.AXES_FAILURE_LIMIT - 1):
        assert _login(path, "alice", "wrong").status_code == 200  # the form again, with its error
    assert _login(path, "alice", "wrong").status_code == 429  # the limit-th failure locks
    locked = _login(path, "alice", "alice-pass-123", address="10.0.0.2")  # another address: the account
    assert locked.status_code == 429 and "Too many failed logins" in locked.content.decode()
    assert "_auth_user_id" not in locked.client.session


def test_one_address_guessing_many_accounts_is_locked(alice, bob):
    for i in range(django_settings.AXES_FAILURE_LIMIT):
        _login("/accounts/login/", f"user{i}", "guess", address="10.0.0.9")
    assert _login("/accounts/login/", "bob", "bob-pass-123", address="10.0.0.9").status_code == 429
    assert _login("/accounts/login/", "bob", "bob-pass-123", address="10.0.0.10").status_code == 302


def test_a_success_clears_the_count(alice):
    for _ in range(django_settings.AXES_FAILURE_LIMIT - 1):
        _login("/accounts/login/", "alice", "wrong")
    assert _login("/accounts/login/", "alice", "alice-pass-123").status_code == 302
    for _ in range(django_settings.AXES_FAILURE_LIMIT - 1):
        _login("/accounts/login/", "alice", "wrong")
    assert _login("/accounts/login/", "alice", "alice-pass-123").status_code == 302


# ---- 4. tokens die with the password -------------------------------------------------------------------


def test_changing_the_password_revokes_the_api_token(alice, alice_client):
    api = _token_client(alice)
    assert api.get("/api/runs/").status_code == 200
    response = alice_client.post(
        "/accounts/password_change/",
        {
            "old_password": "alice-pass-123",
            "new_password1": "a-new-pass-456",
            "new_password2": "a-new-pass-456",
        },
    )
    assert response.status_code == 302
    assert api.get("/api/runs/").status_code == 401
    assert not Token.objects.filter(user=alice).exists()


def test_set_password_anywhere_revokes_and_a_login_rehash_does_not(alice):
    _token_client(alice)
    alice.refresh_from_db()
    assert alice.check_password("alice-pass-123")  # may re-hash and save: the token stays
    assert Token.objects.filter(user=alice).exists()
    alice.set_password("another-pass-789")
    alice.save()
    assert not Token.objects.filter(user=alice).exists()


# ---- 6. websocket origin -------------------------------------------------------------------------------


def _handshake(alice: Any, run: Run, origin: bytes, host: bytes = b"testserver", scheme: str = "ws") -> bool:
    from config.asgi import application

    client = Client()
    client.force_login(alice)
    cookie = (
        f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
    )
    headers = [(b"origin", origin), (b"host", host), (b"cookie", cookie.encode())]

    async def attempt() -> bool:
        communicator = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=headers)
        communicator.scope["scheme"] = scheme
        connected, _ = await communicator.connect()
        await communicator.disconnect()
        return connected

    return async_to_sync(attempt)()


def test_a_websocket_from_another_port_or_scheme_of_the_same_host_is_refused(alice, alice_run, settings):
    assert _handshake(alice, alice_run, b"http://testserver")
    assert not _handshake(alice, alice_run, b"http://testserver:9999")
    assert not _handshake(alice, alice_run, b"https://testserver")
    assert not _handshake(
        alice, alice_run, b"http://evil.example", host=b"evil.example"
    )  # not an allowed host
    assert _handshake(alice, alice_run, b"http://testserver:8000", host=b"testserver:8000")
    assert _handshake(alice, alice_run, b"https://testserver", host=b"testserver", scheme="wss")
    assert not _handshake(alice, alice_run, b"null")
    settings.CSRF_TRUSTED_ORIGINS = ["https://dapo.example.org"]  # a TLS proxy in front of daphne
    assert _handshake(alice, alice_run, b"https://dapo.example.org")
    assert not _handshake(alice, alice_run, b"https://dapo.example.org:8443")


# ---- 7. the schema -------------------------------------------------------------------------------------


def test_the_api_schema_needs_a_login(alice):
    if not django_settings.HAS_SPECTACULAR:
        pytest.skip("drf-spectacular is not installed")
    assert Client().get("/api/schema/").status_code == 401
    assert _token_client(alice).get("/api/schema/").status_code == 200
