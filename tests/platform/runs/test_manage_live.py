"""The management API on the real server (daphne over HTTP, a token): PATCH, the list's filter, sort and
columns, a share, DELETE; another user's private run is a 404 and a read-only share refuses writes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.platform.support import make_fake_assets, report
from tests.worker import stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


def _call(base: str, token: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    request = urllib.request.Request(f"{base}{path}", data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, json.loads(raw) if raw.startswith(b"{") else raw


def test_the_management_api_on_the_real_server(alice, bob, team, tmp_path, queued):
    from rest_framework.authtoken.models import Token
    from runs.models import Run

    from dapo.runconfig.presets import get_preset

    paths = make_fake_assets(tmp_path)
    made = {}
    for name, lr, acc in (("small", 1e-5, 0.9), ("big", 1e-3, 0.4)):
        config = get_preset("tiny_cpu").with_overrides({**paths, "optim.lr": lr})
        made[name] = Run.create_queued(owner=alice, name=name, config=config, preset="tiny_cpu")
        made[name].record_step(report(1, **{"val__acc/mean@4": acc}))
    alice_key, bob_key = Token.objects.create(user=alice).key, Token.objects.create(user=bob).key
    small, big = made["small"].pk, made["big"].pk
    folder = tmp_path / "var" / "runs" / str(big)
    folder.mkdir(parents=True)
    (folder / "state.pt").write_bytes(b"x")
    env = stack.environment(tmp_path / "var", DJANGO_ALLOWED_HOSTS="127.0.0.1")
    port = stack.free_port()
    base = f"http://127.0.0.1:{port}"
    with stack.daphne(env, tmp_path / "daphne.log", port), ThreadPoolExecutor(1) as pool:

        def call(*args: Any) -> tuple[int, Any]:
            return pool.submit(_call, base, *args).result()

        q = urlencode({"filter": "val/acc/mean@4 > 0.8 and optim.lr < 1e-4", "columns": "optim.lr"})
        status, body = call(alice_key, "GET", f"/api/runs/?{q}")
        assert status == 200 and [(r["id"], r["columns"]) for r in body["results"]] == [
            (small, {"optim.lr": 1e-5})
        ]
        status, body = call(alice_key, "GET", "/api/runs/?sort=-optim.lr")
        assert [r["id"] for r in body["results"]] == [big, small]
        status, body = call(alice_key, "GET", "/api/runs/?" + urlencode({"filter": "optim.lr <<"}))
        assert status == 400 and "filter" in body
        change = {"name": "small lr", "tags": ["baseline"], "notes": "# best"}
        status, body = call(alice_key, "PATCH", f"/api/runs/{small}/", change)
        assert status == 200 and (body["name"], body["tags"], body["notes"]) == (
            "small lr",
            ["baseline"],
            "# best",
        )
        assert call(alice_key, "PATCH", f"/api/runs/{small}/", {"tags": "x" * 50})[0] == 400
        assert call(bob_key, "GET", f"/api/runs/{small}/")[0] == 404
        assert call(alice_key, "PATCH", f"/api/runs/{small}/", {"shared_users": ["bob"]})[0] == 200
        assert call(bob_key, "GET", f"/api/runs/{small}/")[0] == 200
        assert call(bob_key, "PATCH", f"/api/runs/{small}/", {"name": "mine"})[0] == 403
        assert call(bob_key, "DELETE", f"/api/runs/{small}/")[0] == 403
        assert call(bob_key, "DELETE", f"/api/runs/{big}/")[0] == 404
        assert call(alice_key, "DELETE", f"/api/runs/{big}/")[0] == 204
        assert call(alice_key, "GET", f"/api/runs/{big}/")[0] == 404
        assert not folder.exists()
    names = list(Run.objects.order_by("pk").values_list("name", flat=True))
    assert names == ["small lr"]
