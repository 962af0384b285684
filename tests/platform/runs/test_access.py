"""runs.access: the one lookup of "a run this user may see"."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser
from django.http import Http404
from django.test import RequestFactory
from runs.access import find_run, run_for, visible_runs

pytestmark = pytest.mark.django_db


def _request(user):
    request = RequestFactory().get("/")
    request.user = user
    return request


def test_the_owner_finds_the_run_by_id_or_digits(alice, alice_run):
    assert find_run(alice, alice_run.pk) == alice_run
    assert find_run(alice, str(alice_run.pk)) == alice_run
    assert run_for(_request(alice), alice_run.pk) == alice_run


def test_anyone_else_gets_the_same_answer_as_for_a_missing_run(alice_run, bob):
    for user in (bob, AnonymousUser()):
        assert find_run(user, alice_run.pk) is None
        with pytest.raises(Http404, match="No such run"):
            run_for(_request(user), alice_run.pk)
    with pytest.raises(Http404, match="No such run"):
        run_for(_request(bob), 10**9)


@pytest.mark.parametrize("raw", [None, "", "abc", "0", str(10**30), True])
def test_a_malformed_id_finds_nothing(alice, alice_run, raw):
    assert find_run(alice, raw) is None


def test_visible_runs_is_the_models_rule(alice, bob, alice_run):
    assert list(visible_runs(alice)) == [alice_run]
    assert list(visible_runs(bob)) == []
