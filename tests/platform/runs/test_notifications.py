"""Notifications: webhooks against a real HTTP server on 127.0.0.1 (retries, redirects, the allowlist),
e-mail through Django's locmem backend, stall detection on a clock the test controls, the settings page."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.utils import timezone
from notifications.delivery import MAX_ATTEMPTS, deliver_due, detect_stalls, webhook_problem
from notifications.models import Channel, Delivery, Notification, NotificationSettings
from runs.models import Run, Status
from runs.run_state import run_state

from dapo.loop.report import RunInfo, StepReport

pytestmark = pytest.mark.django_db


class Hook:
    """A webhook receiver on 127.0.0.1: answers each POST with the next scripted status (then 200)."""

    def __init__(self, statuses=()):
        self.statuses = list(statuses)
        self.received: list[tuple[str, dict]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.received.append((self.path, json.loads(body)))
                status = hook.statuses.pop(0) if hook.statuses else 200
                self.send_response(status)
                if status in (301, 302, 307):
                    self.send_header("Location", "/elsewhere")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/alice"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook(settings):
    made: list[Hook] = []

    def make(statuses=()):
        h = Hook(statuses)
        settings.DAPO_WEBHOOK_URLS = [h.url.rsplit("/", 1)[0] + "/"]
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def running(run: Run, at=None) -> Run:
    run.claim("w1")
    run.start(RunInfo(run_dir="/tmp/x", total_steps=10, start_step=1, config={}))
    if at is not None:
        Run.objects.filter(pk=run.pk).update(
            attempt_started_at=at, last_step_at=at, running_since=at, last_active_at=at
        )
        run.refresh_from_db()
    return run


def test_a_failed_run_posts_slack_json_and_retries_a_5xx_with_backoff(alice, alice_run, hook, settings):
    settings.DAPO_SITE_URL = "https://dapo.example.org"
    h = hook([500])
    NotificationSettings.objects.create(user=alice, webhook_url=h.url)
    running(alice_run)
    alice_run.finish("failed", "RuntimeError: CUDA out of memory", worker_id="w1")
    (note,) = Notification.objects.all()
    assert (note.event, note.channel, note.status) == ("failed", Channel.WEBHOOK, Delivery.PENDING)

    now = timezone.now()
    assert deliver_due(now) == 0  # the server answered 500
    note.refresh_from_db()
    assert (note.status, note.attempts, note.last_error) == (
        Delivery.PENDING,
        1,
        "HTTP 500: Internal Server Error",
    )
    assert note.next_attempt_at == now + timedelta(seconds=5)
    assert deliver_due(now + timedelta(seconds=4)) == 0 and len(h.received) == 1  # not yet due
    assert deliver_due(now + timedelta(seconds=5)) == 1
    note.refresh_from_db()
    assert (note.status, note.attempts, note.last_error) == (Delivery.SENT, 2, "")
    path, body = h.received[-1]
    assert path == "/hooks/alice" and list(body) == ["text"]
    assert (
        f"run #{alice_run.pk} \u201calice-demo\u201d failed at step 0/10: RuntimeError: CUDA out of memory"
        in body["text"]
    )
    assert body["text"].endswith(f"https://dapo.example.org/runs/{alice_run.pk}/")
    assert deliver_due(now + timedelta(hours=1)) == 0  # sent once


def test_a_redirect_is_refused_and_a_dead_hook_gives_up_after_the_last_attempt(alice, alice_run, hook):
    h = hook([302, 302, 302, 302])
    NotificationSettings.objects.create(user=alice, webhook_url=h.url)
    running(alice_run).finish("succeeded", worker_id="w1")
    now = timezone.now()
    for i in range(MAX_ATTEMPTS):
        deliver_due(now + timedelta(hours=i))
    note = Notification.objects.get()
    assert (note.status, note.attempts) == (Delivery.FAILED, MAX_ATTEMPTS)
    assert note.last_error == f"HTTP 302: redirect to {h.url.rsplit('/', 2)[0]}/elsewhere refused"
    assert [p for p, _ in h.received] == ["/hooks/alice"] * MAX_ATTEMPTS  # never followed to /elsewhere
    assert deliver_due(now + timedelta(days=1)) == 0


def test_a_hook_no_longer_allowed_is_not_called(alice, alice_run, hook, settings):
    h = hook()
    NotificationSettings.objects.create(user=alice, webhook_url=h.url)
    running(alice_run).finish("succeeded", worker_id="w1")
    settings.DAPO_WEBHOOK_URLS = ["https://hooks.slack.com/"]  # narrowed since the user saved the URL
    deliver_due()
    note = Notification.objects.get()
    assert "not under an allowed webhook prefix" in note.last_error and not h.received


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://hooks.slack.com/services/T0/B0/x", True),
        ("https://HOOKS.slack.com:443/services/x", True),
        ("https://hooks.slack.com.evil.example/services/x", False),
        ("https://hooks.slack.com/servicesX", False),
        ("http://hooks.slack.com/services/x", False),
        ("https://hooks.slack.com:8443/services/x", False),
        ("https://user:pw@hooks.slack.com/services/x", False),
        ("https://hooks.slack.com/services/x y", False),
        ("file:///etc/passwd", False),
        ("http://127.0.0.1:9/services/x", False),
    ],
)
def test_webhooks_must_lie_under_an_allowed_prefix(settings, url, ok):
    settings.DAPO_WEBHOOK_URLS = ["https://hooks.slack.com/services"]
    assert (webhook_problem(url) is None) is ok


def test_email_goes_to_the_verified_notification_address(alice, alice_run, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.DAPO_EMAIL_NOTIFICATIONS = True
    alice.email = "alice@example.org"  # the login e-mail: not where notifications go
    alice.save()
    NotificationSettings.objects.create(
        user=alice, email=True, address="alice@lab.example", address_verified_at=timezone.now()
    )
    running(alice_run).finish("succeeded", worker_id="w1")
    assert deliver_due() == 1
    (message,) = mail.outbox
    assert message.to == ["alice@lab.example"]
    assert message.subject == f"DAPO run #{alice_run.pk} \u201calice-demo\u201d succeeded at step 0/10."
    assert f"/runs/{alice_run.pk}/" in message.body


def test_no_email_unless_the_server_has_mail_configured(alice, alice_run, settings):
    settings.DAPO_EMAIL_NOTIFICATIONS = False
    NotificationSettings.objects.create(
        user=alice, email=True, address="alice@lab.example", address_verified_at=timezone.now()
    )
    running(alice_run).finish("succeeded", worker_id="w1")
    assert not Notification.objects.exists()


def test_a_cancelled_run_notifies_nobody(alice, alice_run, hook):
    NotificationSettings.objects.create(user=alice, webhook_url=hook().url)
    running(alice_run).finish("cancelled", worker_id="w1")
    assert not Notification.objects.exists()


def test_a_run_without_a_step_for_the_owners_minutes_stalls_once(alice, alice_run, hook):
    h = hook()
    NotificationSettings.objects.create(user=alice, webhook_url=h.url, stall_minutes=10)
    t0 = timezone.now()
    run = running(alice_run, at=t0)
    assert detect_stalls(t0 + timedelta(minutes=9, seconds=59)) == []
    assert detect_stalls(t0 + timedelta(minutes=10)) == [run.pk]
    run.refresh_from_db()
    assert run_state(run)["stalled"] is True and run.status == Status.RUNNING
    assert detect_stalls(t0 + timedelta(minutes=30)) == []  # one notification per stall
    deliver_due(t0 + timedelta(minutes=30))
    ((_, body),) = h.received
    assert "stalled: no step, validation or checkpoint for 10 min (at step 0/10)" in body["text"]
    # a new step clears the mark; the next stall counts from that step
    run.record_step(StepReport(step=1, metrics={"x": 1.0}), worker_id="w1")
    run.refresh_from_db()
    assert run_state(run)["stalled"] is False
    assert detect_stalls(run.last_step_at + timedelta(minutes=5)) == []
    assert detect_stalls(run.last_step_at + timedelta(minutes=11)) == [run.pk]


def test_a_resumed_run_counts_from_its_new_attempt_not_from_the_step_before_the_cancel(alice, alice_run):
    """Cancelled 33 minutes after its last step, then resumed: the new attempt is not stalled 6 s in,
    neither between the claim and the trainer's start (loading the model) nor after it."""
    NotificationSettings.objects.create(user=alice, stall_minutes=10)
    t0 = timezone.now() - timedelta(minutes=40)
    run = running(alice_run, at=t0)
    run.record_step(StepReport(step=1, metrics={"x": 1.0}), worker_id="w1")
    run.record_checkpoint(1, "/tmp/x/checkpoints/step-1", worker_id="w1")
    Run.objects.filter(pk=run.pk).update(last_step_at=t0, last_active_at=t0)
    run.refresh_from_db()
    run.finish("cancelled", worker_id="w1")
    assert run.resume()
    run.claim("w2")  # the second attempt: 33+ minutes after the last step
    now = timezone.now()
    assert detect_stalls(now + timedelta(seconds=6)) == []  # still loading: the claim counts
    run.start(RunInfo(run_dir="/tmp/x", total_steps=10, start_step=2, config={}))
    assert detect_stalls(now + timedelta(seconds=6)) == []
    assert detect_stalls(now + timedelta(minutes=9)) == []
    assert detect_stalls(timezone.now() + timedelta(minutes=10, seconds=1)) == [run.pk]


def test_a_phase_such_as_a_long_validation_is_a_sign_of_life(alice, alice_run):
    """A step whose validation runs longer than the stall minutes is not a stall: the validation's start
    (the trainer's on_activity, recorded by the platform's sink) restarts the clock."""
    from worker.sink import PlatformSink

    NotificationSettings.objects.create(user=alice, stall_minutes=10)
    t0 = timezone.now() - timedelta(minutes=8)
    run = running(alice_run, at=t0)
    PlatformSink(run, "w1").on_activity("step 10: validation")
    assert detect_stalls(t0 + timedelta(minutes=12)) == []  # 12 min after the step, 4 into validation
    assert detect_stalls(timezone.now() + timedelta(minutes=10, seconds=1)) == [run.pk]
    # a sign of life from a worker that lost the lease counts for nothing
    Run.objects.filter(pk=run.pk).update(stalled_at=None, last_active_at=t0)
    assert not PlatformSink(run, "w-other").run.record_activity(worker_id="w-other")
    assert detect_stalls(t0 + timedelta(minutes=10, seconds=1)) == [run.pk]


def test_stall_detection_defaults_to_15_minutes_and_zero_turns_it_off(alice, bob, alice_run, paths, queued):
    t0 = timezone.now()
    running(alice_run, at=t0)
    from dapo.runconfig.presets import get_preset

    bobs = Run.create_queued(owner=bob, name="b", config=get_preset("tiny_cpu").with_overrides(paths))
    running(bobs, at=t0)
    NotificationSettings.objects.create(user=bob, stall_minutes=0)
    assert detect_stalls(t0 + timedelta(minutes=14)) == []
    assert detect_stalls(t0 + timedelta(hours=5)) == [alice_run.pk]


def test_the_worker_notifier_marks_and_announces_a_stall(alice, alice_run, hook):
    from worker.tasks import notify

    h = hook()
    NotificationSettings.objects.create(user=alice, webhook_url=h.url, stall_minutes=1)
    t0 = timezone.now() - timedelta(minutes=2)
    running(alice_run, at=t0)
    assert notify() == [alice_run.pk]
    assert len(h.received) == 1 and Notification.objects.get().status == Delivery.SENT


# ---- the settings page ------------------------------------------------------------------------------


def test_the_settings_page_saves_valid_settings_only(alice, alice_client, hook):
    h = hook()
    page = alice_client.get("/accounts/notifications/")
    assert page.status_code == 200 and b"Webhook URL" in page.content
    bad = alice_client.post(
        "/accounts/notifications/",
        {"webhook_url": "https://evil.example/x", "stall_minutes": "5", "action": "save"},
    )
    assert bad.status_code == 400 and b"not under an allowed webhook prefix" in bad.content
    bad = alice_client.post("/accounts/notifications/", {"webhook_url": h.url, "stall_minutes": "-3"})
    assert bad.status_code == 400 and b"A whole number of minutes" in bad.content
    assert not NotificationSettings.objects.exists()  # nothing half-saved
    ok = alice_client.post(
        "/accounts/notifications/", {"webhook_url": h.url, "stall_minutes": "20", "action": "save"}
    )
    assert ok.status_code == 302
    prefs = NotificationSettings.objects.get(user=alice)
    assert (prefs.webhook_url, prefs.stall_minutes, prefs.email) == (h.url, 20, False)


def test_send_a_test_reports_success_and_failure_on_the_page(alice, alice_client, hook):
    h = hook([503])
    NotificationSettings.objects.create(user=alice, webhook_url=h.url)
    page = alice_client.post("/accounts/notifications/", {"action": "test"}, follow=True)
    assert b"failed: HTTP 503" in page.content
    assert b'data-status="failed"' not in page.content  # one attempt failed; the row is still pending
    page = alice_client.post("/accounts/notifications/", {"action": "test"}, follow=True)
    assert f"Test webhook sent to {h.url}".encode() in page.content
    assert [b["text"] for _, b in h.received][-1].startswith("DAPO notifications work")
