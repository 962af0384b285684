"""Webhook URLs are compared to the allowlist after normalisation (issue #25, round 3): a path with ``..``,
``%2e%2e`` or an encoded slash that a server or proxy would resolve out of an allowed prefix is refused when
saved (page and API) and again before each attempt."""

from __future__ import annotations

from typing import Any

import pytest
from notifications.delivery import deliver_due, webhook_problem
from notifications.models import Channel, Notification, NotificationSettings

from tests.platform.runs.test_notifications import Hook

pytestmark = pytest.mark.django_db

PREFIX = "https://hooks.slack.com/services/"


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.slack.com/services/../admin",
        "https://hooks.slack.com/services/T0/../../admin",
        "https://hooks.slack.com/services/%2e%2e/admin",
        "https://hooks.slack.com/services/%2E%2E/admin",
        "https://hooks.slack.com/services/.%2e/admin",
        "https://hooks.slack.com/services/%2e%2e",
        "https://hooks.slack.com/services/..",
        "https://hooks.slack.com/services/..%2fadmin",
        "https://hooks.slack.com/services/..%2Fadmin",
        "https://hooks.slack.com/services/..%5cadmin",
        "https://hooks.slack.com/services/..\\admin",
    ],
)
def test_dot_segments_that_leave_the_prefix_are_refused(settings, url):
    settings.DAPO_WEBHOOK_URLS = [PREFIX]
    assert webhook_problem(url) is not None


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.slack.com/services/T0/../B0/x",
        "https://hooks.slack.com/services/T0/./B0/x",
        "https://hooks.slack.com/services/T0/%2e/x",
        "https://hooks.slack.com/services/T0/x?next=../../admin",
    ],
)
def test_dot_segments_that_stay_under_the_prefix_are_allowed(settings, url):
    settings.DAPO_WEBHOOK_URLS = [PREFIX]
    assert webhook_problem(url) is None


def test_a_prefix_with_dot_segments_is_normalised_too(settings):
    settings.DAPO_WEBHOOK_URLS = ["https://hooks.slack.com/services/x/../"]  # means /services/
    assert webhook_problem("https://hooks.slack.com/services/T0/B0") is None
    assert webhook_problem("https://hooks.slack.com/admin") is not None


def test_the_api_refuses_an_escaping_webhook_with_a_400_that_names_it(alice, api, settings):
    settings.DAPO_WEBHOOK_URLS = [PREFIX]
    answer = api.patch("/api/notifications/", {"webhook_url": PREFIX + "%2e%2e/admin"}, format="json")
    assert (
        answer.status_code == 400
        and "not under an allowed webhook prefix" in answer.json()["errors"]["webhook_url"]
    )
    assert not NotificationSettings.objects.filter(user=alice).exists()


def test_a_stored_escaping_webhook_is_never_called(alice, settings: Any):
    hook = Hook()
    try:
        settings.DAPO_WEBHOOK_URLS = [hook.url.rsplit("/", 1)[0] + "/"]  # .../hooks/
        escaping = hook.url.rsplit("/", 1)[0] + "/%2e%2e/admin"  # saved before the fix
        Notification.objects.create(
            user=alice, event="test", channel=Channel.WEBHOOK, target=escaping, text="x"
        )
        assert deliver_due() == 0
        assert hook.received == [] and "not under an allowed" in Notification.objects.get().last_error
    finally:
        hook.close()
