"""Sharing tells nothing about who exists: the owner may share a run (or a saved comparison) only with the
users and groups they share a group with (a superuser: anyone), and a name outside that circle gets the
very answer a name that exists nowhere gets. The run page's group menu lists only the owner's groups."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from runs.models import Run, SavedComparison

from tests.platform.fixtures import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def outsider(django_user_model: Any) -> Any:
    """carol, in a group of her own that alice is not in."""
    carol = make_user(django_user_model, "carol", "carol-pass-123")
    Group.objects.create(name="carols-lab").user_set.add(carol)
    return carol


def _patch(api: Any, run: Run, **body: Any) -> Any:
    return api.patch(f"/api/runs/{run.pk}/", body, format="json")


def _error(response: Any, field: str, name: str) -> str:
    """The field's message with the name it was about replaced, to compare two answers."""
    assert response.status_code == 400, response.json()
    return response.json()["errors"][field].replace(repr(name), "NAME")


def test_a_user_outside_the_owners_groups_reads_as_unknown(api, alice_run, team, outsider):
    hidden = _error(_patch(api, alice_run, shared_users=["carol"]), "shared_users", "carol")
    unknown = _error(_patch(api, alice_run, shared_users=["nobody"]), "shared_users", "nobody")
    assert hidden == unknown
    assert not alice_run.shared_users.exists()
    assert _patch(api, alice_run, shared_users=["bob"]).status_code == 200  # bob: in her team


def test_a_group_the_owner_is_not_in_reads_as_unknown(api, alice_run, team, outsider):
    hidden = _error(_patch(api, alice_run, shared_groups=["carols-lab"]), "shared_groups", "carols-lab")
    unknown = _error(_patch(api, alice_run, shared_groups=["no-such-lab"]), "shared_groups", "no-such-lab")
    assert hidden == unknown and not alice_run.shared_groups.exists()
    assert _patch(api, alice_run, shared_groups=["team"]).status_code == 200


def test_the_share_form_answers_alike_and_lists_only_the_owners_groups(
    alice_client, alice_run, team, outsider
):
    answers = []
    for name in ("carol", "nobody"):
        page = alice_client.post(f"/runs/{alice_run.pk}/share/", {"users": name}, follow=True)
        answers.append(page.content.decode().replace(f"&#x27;{name}&#x27;", "NAME"))
    assert "Not shared" in answers[0] and _messages(answers[0]) == _messages(answers[1])
    page = alice_client.get(f"/runs/{alice_run.pk}/").content.decode()
    assert '<option value="team"' in page and "carols-lab" not in page
    suggested = page.split('id="share-suggestions">')[1].split("</p>")[0]
    assert suggested == "In your groups: bob"  # her teammates only, never everyone on the site


def test_existing_shares_stay_savable(api, alice_run, team, outsider):
    """A share an administrator made (carol) does not block the owner's next edit of the list."""
    alice_run.shared_users.add(outsider)
    assert _patch(api, alice_run, shared_users=["carol", "bob"]).status_code == 200
    assert set(alice_run.shared_users.values_list("username", flat=True)) == {"bob", "carol"}


def test_a_superuser_shares_with_anyone_and_sees_every_group(alice_run, outsider, django_user_model):
    root = Client()
    root.force_login(make_user(django_user_model, "root", "x", is_superuser=True, is_staff=True))
    response = root.post(f"/runs/{alice_run.pk}/share/", {"users": "carol", "groups": ["carols-lab"]})
    assert response.status_code == 302 and alice_run.shared_users.filter(username="carol").exists()
    assert "carols-lab" in root.get(f"/runs/{alice_run.pk}/").content.decode()


def test_a_saved_comparison_shares_within_the_owners_groups_too(
    alice, alice_client, alice_run, team, outsider
):
    saved = SavedComparison.objects.create(owner=alice, name="study", run_ids=[alice_run.pk])
    saved.runs.set([alice_run])
    url = f"/runs/compare/saved/{saved.pk}/share/"
    for form, name in (({"users": "carol"}, "carol"), ({"groups": ["carols-lab"]}, "carols-lab")):
        page = alice_client.post(url, form, follow=True).content.decode()
        assert f"no {'group' if 'groups' in form else 'user'} named &#x27;{name}&#x27;" in page
    assert not saved.shared_users.exists() and not saved.shared_groups.exists()
    page = alice_client.get(saved.get_absolute_url()).content.decode()
    assert '<option value="team"' in page and "carols-lab" not in page
    alice_client.post(f"/runs/compare/saved/{saved.pk}/share/", {"users": "bob"})
    assert list(saved.shared_users.values_list("username", flat=True)) == ["bob"]


def _messages(html: str) -> list[str]:
    return [line.strip() for line in html.splitlines() if 'class="msg msg-' in line]
