"""Who may open what, over EVERY URL pattern of the project: the test walks Django's URL resolver, so a page
added later is covered the day it lands. URL arguments come from real objects (alice's run, one of its
samples, a problem index, a dataset); an argument of a new name gets a default by its converter, and the
test says so if that leaves alice herself with a 404.

- anonymous: a redirect to a login page (pages), 401/403 (API), or a page on the public list;
- bob on alice's run-scoped URLs, GET and POST: 404 (or 403); alice's run unchanged;
- bob anywhere else: no trace of alice's run in the answer;
- every page alice can open: a Content-Security-Policy header, no inline script or event handler;
- never a 500 (the test client re-raises the view's exception).
Websocket routes are walked the same way; CSRF and API tokens are tested below.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from catalog.models import BaseModel, Dataset
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from rest_framework.authtoken.models import Token
from runs.models import Run, Sample, SavedComparison, SavedView
from runs.routing import websocket_urlpatterns
from runs.run_log import log_path

from tests.platform.runs.test_consumers import ws
from tests.platform.support import report

pytestmark = pytest.mark.django_db(transaction=True)

PRIVATE_NAME = "alice-private-run-7f3a9c"
PRIVATE_GROUP = "alice-private-group-51e2"
PUBLIC = {
    "accounts/login/",
    "accounts/password_reset/",
    "accounts/password_reset/done/",
    "accounts/reset/<uidb64>/<token>/",
    "accounts/reset/done/",
    "admin/login/",
    "api/schema/",
    "favicon.ico",  # a redirect to the static icon, which the login page shows too
}
"""Routes an anonymous visitor may open. Anything else must send them to a login page or refuse."""
RUN_SCOPED = ("run_id", "sample_pk", "sample_id", "problem_index", "comparison_id")
"""URL arguments that name something of one run: such URLs belong to the run's owner only."""
LOGIN_PAGES = ("/accounts/login/", "/admin/login/")
ROUTE_ARG = re.compile(r"<(?:(?P<conv>\w+):)?(?P<name>\w+)>")
REGEX_ARG = re.compile(r"\(\?P<(?P<name>\w+)>(?P<body>[^()]*)\)")
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.I)
INLINE_HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=|javascript:", re.I)


def walk(patterns: list[Any], prefix: str = "") -> list[str]:
    """Every route of the project, as the resolver's ``route`` strings."""
    out: list[str] = []
    for p in patterns:
        part = str(p.pattern).removeprefix("^") if prefix else str(p.pattern)  # as Django joins them
        if isinstance(p, URLResolver):
            out += walk(p.url_patterns, prefix + part)
        elif isinstance(p, URLPattern):
            out.append(prefix + part)
    return out


def concrete(route: str, values: dict[str, Any]) -> str:
    """A path for a route: <conv:name> and (?P<name>...) filled from ``values`` (an alternation of
    literals, as the admin's app_label, gives its first choice)."""

    def arg(name: str, conv: str | None = None, body: str | None = None) -> str:
        if body is not None and re.fullmatch(r"[\w|-]+", body):
            return body.split("|")[0]
        return str(values.get(name, 1 if conv == "int" else "x"))

    path = REGEX_ARG.sub(lambda m: arg(m["name"], body=m["body"]), route)  # first: "(?P<n>" holds "<n>"
    path = ROUTE_ARG.sub(lambda m: arg(m["name"], m["conv"]), path)
    return "/" + path.replace("^", "").replace("$", "").replace("\\", "")


@pytest.fixture
def cast(alice_run: Run) -> dict[str, Any]:
    alice_run.name, alice_run.group = PRIVATE_NAME, PRIVATE_GROUP
    alice_run.save(update_fields=["name", "group"])
    alice_run.record_step(report(1))
    log = log_path(alice_run.pk)  # the run's log exists once a worker started it; it names the run
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"[worker] run {alice_run.pk} {PRIVATE_NAME}: step 1\n")
    sample = Sample.objects.filter(run=alice_run).order_by("pk").first()
    assert sample is not None
    dataset = Dataset.objects.create(name="shared-arithmetic", path="assets/demo/data/train.parquet")
    model = BaseModel.objects.create(name="shared-model", path="assets/demo/model")
    saved = SavedComparison.objects.create(owner=alice_run.owner, name=PRIVATE_NAME, run_ids=[alice_run.pk])
    saved.runs.set([alice_run])
    view = SavedView.objects.create(owner=alice_run.owner, name=PRIVATE_GROUP, filter="status = queued")
    values = {
        "comparison_id": saved.pk,
        "view_id": view.pk,
        "run_id": alice_run.pk,
        "sample_pk": sample.pk,
        "sample_id": sample.pk,
        "problem_index": sample.problem_index,
        "dataset_id": dataset.pk,
        "object_id": alice_run.pk,
        "model_id": model.pk,
        "fmt": "jsonl",
        "uidb64": "MQ",
        "token": "set-password",
        "url": "x/",
    }
    routes = walk(get_resolver().url_patterns)
    paths = {route: concrete(route, values) for route in routes}
    for route, path in paths.items():  # each path exercises its own pattern, none is shadowed
        assert resolve(path).route == route, (route, path, resolve(path).route)
    return {"run": alice_run, "paths": paths, "comparison": saved}


def _run_scoped(route: str) -> bool:
    return not route.startswith("admin/") and any(f":{arg}>" in route for arg in RUN_SCOPED)


def _refused_anonymous(response: Any) -> bool:
    if response.status_code in (301, 302):
        return response["Location"].startswith(LOGIN_PAGES)
    return response.status_code in (401, 403, 404, 405)


def test_every_url_refuses_the_anonymous_visitor(cast, anon_client):
    assert len(cast["paths"]) >= 20  # the walk found the project's routes
    for route, path in cast["paths"].items():
        for method in (anon_client.get, anon_client.post):
            response = method(path)
            assert response.status_code < 500, (route, response.status_code)
            assert PRIVATE_NAME.encode() not in response.content, f"{route} shows alice's run to anyone"
            if route not in PUBLIC:
                assert _refused_anonymous(response), (
                    f"{method.__name__.upper()} {path}: {response.status_code}"
                )


def test_bob_never_reaches_alices_run_scoped_urls(cast, bob_client):
    scoped = [r for r in cast["paths"] if _run_scoped(r)]
    assert len(scoped) >= 6, scoped
    for route in scoped:
        path = cast["paths"][route]
        statuses = {bob_client.get(path).status_code, bob_client.post(path).status_code}
        # 405 for the method a view does not take; the other one reaches the view, which refuses bob
        assert statuses <= {403, 404, 405} and statuses & {403, 404}, (route, statuses)
    run = Run.objects.get(pk=cast["run"].pk)
    assert (run.status, run.cancel_requested, run.name) == ("queued", False, PRIVATE_NAME)


def test_bob_sees_no_trace_of_alices_run_anywhere(cast, bob_client):
    for route, path in cast["paths"].items():
        response = bob_client.get(path)
        assert response.status_code < 500, (route, response.status_code)
        if route.startswith("admin/") and route != "admin/login/":
            assert response.status_code in (302, 404), (route, response.status_code)  # bob is not staff
        body = b"".join(response) if response.streaming else response.content
        assert PRIVATE_NAME.encode() not in body and PRIVATE_GROUP.encode() not in body, route


def test_alice_opens_her_run_scoped_urls_and_pages_run_no_inline_script(cast, alice_client, settings):
    settings.CONTENT_SECURITY_POLICY_REPORT_ONLY = False  # as in production (debugging only reports)
    for route, path in cast["paths"].items():
        response = alice_client.get(path)
        assert response.status_code < 500, (route, response.status_code)
        if _run_scoped(route):  # the URL arguments are real: else the bob test above proves nothing
            assert response.status_code != 404, f"{route}: add its URL argument to the `cast` fixture"
        assert response.get("Content-Security-Policy"), route
        if response.status_code == 200 and response.get("Content-Type", "").startswith("text/html"):
            html = response.content.decode()
            assert not INLINE_SCRIPT.search(html), f"{route}: inline <script> (the CSP blocks it)"
            assert not INLINE_HANDLER.search(html), f"{route}: inline event handler or javascript: URL"


def test_every_websocket_route_checks_login_and_ownership(cast, bob):
    from runs import consumers

    assert websocket_urlpatterns
    for pattern in websocket_urlpatterns:
        if "run_id" not in str(pattern.pattern):  # the cluster page's: below
            continue
        path = concrete(str(pattern.pattern), {"run_id": cast["run"].pk})
        for user, code in ((None, consumers.CLOSE_UNAUTHENTICATED), (bob, consumers.CLOSE_NOT_FOUND)):
            comm = ws(path, user)

            async def body(comm: Any = comm) -> dict[str, Any]:
                await comm.connect(timeout=5)
                return await comm.receive_output(3)

            out = async_to_sync(body)()
            assert out == {"type": "websocket.close", "code": code}, (path, user, out)


def test_the_cluster_socket_wants_a_login_and_shows_bob_alices_run_by_number_only(cast, bob):
    from runs import consumers

    run = cast["run"]
    Run.objects.filter(pk=run.pk).update(status="running", dispatched_at=run.created_at)
    for user in (None, bob):
        comm = ws("/ws/cluster/", user)

        async def body(comm: Any = comm) -> dict[str, Any]:
            await comm.connect(timeout=5)
            out = await comm.receive_output(3)
            await comm.disconnect()
            return out

        out = async_to_sync(body)()
        if user is None:
            assert out == {"type": "websocket.close", "code": consumers.CLOSE_UNAUTHENTICATED}
            continue
        assert out["type"] == "websocket.send" and f'"id": {run.pk}' in out["text"]
        assert run.name not in out["text"] and "alice" in out["text"]  # the owner, never the run's name


OWNER_PAGES = ("runs/<id:run_id>/delete/",)


@pytest.mark.parametrize("how", ["user", "group", "comparison"])
def test_a_shared_reader_opens_every_run_scoped_page_and_changes_nothing(
    cast, bob, bob_client, alice_client, how
):
    """Shared with bob (by name, through a group, or through a shared comparison): every run-scoped URL
    alice can GET, bob can too; every POST to one of them is refused (403, 404 or 405); the websocket
    lets him watch. The run and the comparison are unchanged afterwards."""
    from django.contrib.auth.models import Group
    from runs import consumers

    run, saved = cast["run"], cast["comparison"]
    if how == "user":
        run.shared_users.add(bob)
        saved.shared_users.add(bob)
    elif how == "group":
        team = Group.objects.create(name="team")
        bob.groups.add(team)
        run.shared_groups.add(team)
        saved.shared_groups.add(team)
    else:
        saved.shared_users.add(bob)  # the comparison's runs come with it, read-only
    for route in [r for r in cast["paths"] if _run_scoped(r)]:
        path = cast["paths"][route]
        alice_status = alice_client.get(path).status_code
        if alice_status == 200:  # a page to change the run (delete's confirmation) is the owner's only
            assert bob_client.get(path).status_code == (403 if route in OWNER_PAGES else 200), route
        posted = bob_client.post(path, {"name": "bob was here", "confirm": PRIVATE_NAME, "users": "bob"})
        assert posted.status_code in (403, 404, 405), (route, posted.status_code)
    run = Run.objects.get(pk=run.pk)
    assert (run.status, run.cancel_requested, run.name, run.archived) == (
        "queued",
        False,
        PRIVATE_NAME,
        False,
    )
    assert SavedComparison.objects.filter(pk=saved.pk, name=PRIVATE_NAME).exists()
    comm = ws(f"/ws/runs/{run.pk}/", bob)

    async def body() -> dict[str, Any]:
        await comm.connect(timeout=5)
        out = await comm.receive_json_from(5)
        await comm.disconnect()
        return out

    out = async_to_sync(body)()
    assert out["type"] == "snapshot" and out["run"]["id"] == run.pk, out
    assert (
        consumers.CLOSE_NOT_FOUND
    )  # the unshared case: test_every_websocket_route_checks_login_and_ownership


# ---- CSRF ------------------------------------------------------------------------------------------------


def test_every_post_without_a_csrf_token_is_refused(cast, alice, queued):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    for route, path in cast["paths"].items():
        if route in ("accounts/login/", "admin/login/"):
            continue  # below, without a session
        response = client.post(path, {"action": "create", "name": "x"})
        assert response.status_code == 403, (route, response.status_code)
    anonymous = Client(enforce_csrf_checks=True)
    for path in ("/accounts/login/", "/admin/login/"):
        assert anonymous.post(path, {"username": "alice", "password": "alice-pass-123"}).status_code == 403
    run = Run.objects.get(pk=cast["run"].pk)
    assert not run.cancel_requested and not Token.objects.filter(user=alice).exists()


def test_a_form_with_its_csrf_token_goes_through(alice_run, alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    page = client.get(f"/runs/{alice_run.pk}/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token, "the run page has no CSRF token in its forms"
    response = client.post(f"/runs/{alice_run.pk}/cancel/", {"csrfmiddlewaretoken": token[1]})
    assert response.status_code == 302 and Run.objects.get(pk=alice_run.pk).status == "cancelled"


# ---- API tokens ------------------------------------------------------------------------------------------


def _api(key: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Token {key}")


def test_a_revoked_token_gets_401_at_once(alice_client, alice):
    alice_client.post("/accounts/token/", {"action": "create"})
    key = Token.objects.get(user=alice).key
    assert _api(key).get("/api/runs/").status_code == 200
    response = alice_client.post("/accounts/token/", {"action": "revoke"}, follow=True)
    assert b"revoked" in response.content and key.encode() not in response.content
    assert _api(key).get("/api/runs/").status_code == 401


def test_replacing_a_token_revokes_the_old_one(alice_client, alice):
    alice_client.post("/accounts/token/", {"action": "create"})
    old = Token.objects.get(user=alice).key
    response = alice_client.post("/accounts/token/", {"action": "create"})
    assert response.status_code == 302  # post-redirect-get: a reload does not replace it again
    new = Token.objects.get(user=alice).key
    assert new != old
    assert _api(old).get("/api/runs/").status_code == 401
    assert _api(new).get("/api/runs/").status_code == 200
    page = alice_client.get("/accounts/token/").content.decode()
    assert new in page and old not in page and 'id="token-created"' in page


def test_the_token_page_refuses_unknown_actions_and_anonymous_visitors(alice_client, alice, anon_client):
    assert alice_client.post("/accounts/token/", {"action": "steal"}).status_code == 400
    assert not Token.objects.filter(user=alice).exists()
    response = anon_client.post("/accounts/token/", {"action": "create"})
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert Token.objects.count() == 0


def test_an_invalid_or_malformed_token_gets_401(alice_run):
    for header in (
        "Token nope",
        "Token ",
        "Token a b",
        "Token \u00e9\u00e9",
        "Bearer x",
        "Token " + "a" * 5000,
    ):
        response = Client(HTTP_AUTHORIZATION=header).get(f"/api/runs/{alice_run.pk}/")
        assert response.status_code in (401, 403), (header[:20], response.status_code)
