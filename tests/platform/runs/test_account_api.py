"""/api/notifications/ and /api/views/: the settings pages' checks through the API, owner only, token or
session, a 400 naming each bad field with nothing changed."""

from __future__ import annotations

import pytest
from notifications.models import Notification, NotificationSettings
from notifications.preferences import MAX_STALL_MINUTES
from runs.models import SavedView

pytestmark = pytest.mark.django_db

HOOKS = "https://hooks.example/services/"


@pytest.fixture
def hooks(settings):
    settings.DAPO_WEBHOOK_URLS = [HOOKS]


# ---- notification settings ----------------------------------------------------------------------------


def test_notification_settings_read_and_patch_by_token(api, alice, hooks):
    first = api.get("/api/notifications/").json()
    assert {k: first[k] for k in ("webhook_url", "email", "stall_minutes", "address")} == {
        "webhook_url": "",
        "email": False,
        "stall_minutes": 15,
        "address": "",
    }
    assert first["deliveries"] == [] and first["email_configured"] is False
    answer = api.patch("/api/notifications/", {"webhook_url": HOOKS + "alice", "stall_minutes": 30}, "json")
    assert answer.status_code == 200, answer.json()
    assert (answer.json()["webhook_url"], answer.json()["stall_minutes"]) == (HOOKS + "alice", 30)
    answer = api.patch("/api/notifications/", {"stall_minutes": 0}, format="json")  # the URL is kept
    prefs = NotificationSettings.objects.get(user=alice)
    assert (prefs.webhook_url, prefs.stall_minutes, prefs.email) == (HOOKS + "alice", 0, False)


@pytest.mark.parametrize(
    "body, field, text",
    [
        ({"webhook_url": "https://evil.example/x"}, "webhook_url", "not under an allowed webhook prefix"),
        ({"webhook_url": "ftp://hooks.example/services/a"}, "webhook_url", "http:// or https://"),
        ({"webhook_url": 7}, "webhook_url", "A URL as text"),
        ({"stall_minutes": -1}, "stall_minutes", "A whole number of minutes"),
        ({"stall_minutes": MAX_STALL_MINUTES + 1}, "stall_minutes", "A whole number of minutes"),
        ({"stall_minutes": 2.5}, "stall_minutes", "A whole number of minutes"),
        ({"stall_minutes": True}, "stall_minutes", "A whole number of minutes"),
        ({"email": "yes"}, "email", "On or off"),
        ({"email": True, "address": "a@example.org"}, "email", "not configured on this server"),
        ({"address": "not-an-address"}, "address", "Not an e-mail address"),
        ({"colour": "red"}, "colour", "unknown field"),
    ],
)
def test_a_bad_notification_field_is_a_400_that_names_it_and_changes_nothing(
    api, alice, hooks, body, field, text
):
    NotificationSettings.objects.create(user=alice, webhook_url=HOOKS + "a", stall_minutes=20)
    answer = api.patch("/api/notifications/", {"stall_minutes": 5, **body}, format="json")
    assert answer.status_code == 400
    assert text in answer.json()["errors"][field] and answer.json()["detail"]
    prefs = NotificationSettings.objects.get(user=alice)
    assert (prefs.webhook_url, prefs.stall_minutes) == (HOOKS + "a", 20)  # not even the good field
    alice.refresh_from_db()
    assert alice.email == ""


def test_email_needs_an_address_and_mail_settings(api, alice, settings, mailoutbox):
    settings.DAPO_EMAIL_NOTIFICATIONS = True
    answer = api.patch("/api/notifications/", {"email": True}, format="json")
    assert answer.status_code == 400 and "need an address" in answer.json()["errors"]["address"]
    answer = api.patch("/api/notifications/", {"email": True, "address": "alice@lab.example"}, format="json")
    assert answer.status_code == 200 and answer.json()["email"] is True
    assert answer.json()["address"] == "alice@lab.example" and answer.json()["address_verified"] is False
    assert "verification link was mailed to alice@lab.example" in answer.json()["verification_mail"]
    assert [m.to for m in mailoutbox] == [["alice@lab.example"]]
    alice.refresh_from_db()
    assert alice.email == ""  # the notification address is not the login e-mail


def test_deliveries_are_the_callers_last_twenty_with_state_and_error(api, alice, bob, bob_api):
    for i in range(25):
        Notification.objects.create(
            user=alice, event="failed", channel="webhook", target=HOOKS, text=f"n{i}", last_error=f"HTTP 5{i}"
        )
    Notification.objects.create(user=bob, event="test", channel="webhook", target=HOOKS, text="bob's")
    deliveries = api.get("/api/notifications/").json()["deliveries"]
    assert len(deliveries) == 20 and deliveries[0]["last_error"] == "HTTP 524"
    assert {d["status"] for d in deliveries} == {"pending"} and all(d["target"] == HOOKS for d in deliveries)
    assert [d["event"] for d in bob_api.get("/api/notifications/").json()["deliveries"]] == ["test"]


def test_the_api_needs_a_login_and_takes_a_session(anon_client, alice_client):
    assert anon_client.get("/api/notifications/").status_code in (401, 403)
    assert anon_client.get("/api/views/").status_code in (401, 403)
    assert alice_client.get("/api/notifications/").status_code == 200


# ---- saved views --------------------------------------------------------------------------------------


def test_views_are_saved_listed_replaced_and_deleted_by_their_owner(api, alice, bob, bob_api):
    body = {
        "name": "small lr",
        "filter": "optim.lr < 1e-4",
        "sort": "-val/acc/mean@4",
        "columns": ["optim.lr", "val/acc/mean@4"],
        "archived": "all",
    }
    answer = api.post("/api/views/", body, format="json")
    assert answer.status_code == 201, answer.json()
    view = answer.json()
    assert {k: view[k] for k in body} == body and view["url"].startswith("/runs/?")
    again = api.post("/api/views/", {**body, "columns": "optim.lr", "archived": ""}, format="json")
    assert again.status_code == 200 and again.json()["id"] == view["id"]  # the same name: replaced
    assert (again.json()["columns"], again.json()["archived"]) == (["optim.lr"], "active")
    SavedView.objects.create(owner=bob, name="bob's")
    assert [v["name"] for v in api.get("/api/views/").json()] == ["small lr"]
    assert bob_api.delete(f"/api/views/{view['id']}/").status_code == 404  # not bob's
    assert SavedView.objects.filter(pk=view["id"]).exists()
    assert api.delete(f"/api/views/{view['id']}/").status_code == 204
    assert api.delete(f"/api/views/{view['id']}/").status_code == 404
    assert [v["name"] for v in bob_api.get("/api/views/").json()] == ["bob's"]


@pytest.mark.parametrize(
    "body, field, text",
    [
        ({"filter": "optim.lr <"}, "filter", ""),
        ({"filter": "no.such.key > 1"}, "filter", "no.such.key"),
        ({"sort": "-no.such.key"}, "sort", "no.such.key"),
        ({"columns": ["optim.lr", "nope.nope"]}, "columns", "nope.nope"),
        ({"columns": [1, 2]}, "columns", "list of strings"),
        ({"columns": ",".join(f"optim.lr{i}" for i in range(13))}, "columns", ""),
        ({"archived": "deleted"}, "archived", "active, archived, all"),
        ({"name": ""}, "name", "1 to 100 characters"),
        ({"name": "x" * 101}, "name", "1 to 100 characters"),
        ({"name": 5}, "name", "1 to 100 characters"),
        ({"owner": "bob"}, "owner", "unknown field"),
    ],
)
def test_a_bad_view_is_a_400_that_names_the_field_and_saves_nothing(api, body, field, text):
    answer = api.post("/api/views/", {"name": "v", **body}, format="json")
    assert answer.status_code == 400
    assert field in answer.json()["errors"] and text in answer.json()["errors"][field]
    assert not SavedView.objects.exists()


def test_the_filter_error_is_the_one_the_page_shows(api, alice_client):
    answer = api.post("/api/views/", {"name": "v", "filter": "optim.lr <"}, format="json")
    message = answer.json()["errors"]["filter"]
    page = alice_client.post("/runs/views/", {"name": "v", "filter": "optim.lr <"}, follow=True)
    assert message and message in page.content.decode().replace("&lt;", "<").replace("&#x27;", "'")
    assert not SavedView.objects.exists()


def test_a_json_body_that_is_not_an_object_is_a_400(api):
    assert api.post("/api/views/", ["name"], format="json").status_code == 400
    assert api.patch("/api/notifications/", "x", format="json").status_code == 400


def test_the_schema_and_the_docs_page_list_the_settings_endpoints(api, alice_client):
    pytest.importorskip("drf_spectacular")
    schema = api.get("/api/schema/").content.decode()
    docs = alice_client.get("/api/docs/").content.decode()
    for path in ("/api/notifications/", "/api/views/", "/api/views/{view_id}/"):
        assert path in schema and f"<code>{path}</code>" in docs, path
    assert "stall_minutes" in schema and "archived" in schema
