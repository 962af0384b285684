"""Notifications: a run that succeeds, fails or stalls tells its owner, by webhook and by e-mail.

Each user's settings (``NotificationSettings``, the page /accounts/notifications/) name a webhook URL, whether
to e-mail, the notification address (its own field, never the login e-mail; nothing is mailed there until its
owner opened the link mailed to it, notifications.address), and after how many minutes without a new step a
running run counts as stalled. An event becomes one ``Notification`` row per channel (an outbox):
``Run.finish`` queues the finished and failed ones, ``detect_stalls`` the stalled ones, and ``deliver_due``
sends them. Both passes run in a thread of every Celery worker's main process (``worker.tasks.Notifier``,
every ``DAPO_NOTIFY_INTERVAL_S``), never as tasks: a task would wait behind the training run that holds the
worker's pool slot. Rows are claimed with conditional UPDATEs, so several workers never send one twice.

Webhooks: a POST of Slack-compatible JSON ``{"text": "..."}`` (the run's name, status, step and a link to its
page at ``DAPO_SITE_URL``), only to URLs under a prefix the administrator lists in ``DAPO_WEBHOOK_URLS``
(notifications.webhook_urls; checked when saved and again before each attempt), redirects refused, a 2xx
answer within ``WEBHOOK_TIMEOUT_S`` counts as delivered. A failed attempt is logged and retried after
5 s, 20 s and 80 s; then the row is marked failed. The settings page shows every recent delivery with its
last error.
E-mail goes through Django's mail settings (``DJANGO_EMAIL_*``) when an administrator configured them, at
most ``DAPO_NOTIFY_MAIL_PER_HOUR`` a user: past it, and to an unverified address, the row records why it was
not sent (throttled, skipped).
The browser's own notifications (tab title, desktop notification) need nothing here: the run page follows
the run's status events.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.error
import urllib.request
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.mail import send_mail
from django.db.models import F
from django.utils import timezone
from runs import throttle

from notifications.models import Channel, Delivery, Event, Notification, NotificationSettings
from notifications.webhook_urls import webhook_problem

if TYPE_CHECKING:
    from runs.models import Run

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_S = 10.0
MAX_ATTEMPTS = 4
RETRY_DELAYS_S = (5, 20, 80)
"""Pause after the first, second and third failed attempt."""
CLAIM_S = 60
"""A claimed row is not picked again for this long (a worker died while sending: another one retries)."""
UNVERIFIED = "not sent: this address is unverified — check your mail (resend on the notifications page)"


# ---- configuration ------------------------------------------------------------------------------------


def email_configured() -> bool:
    return bool(getattr(settings, "DAPO_EMAIL_NOTIFICATIONS", False))


def run_url(run: Run) -> str:
    return f"{settings.DAPO_SITE_URL.rstrip('/')}/runs/{run.pk}/"


# ---- events -------------------------------------------------------------------------------------------


def message(run: Run, event: str) -> str:
    """The text of a notification: what happened to which run, where it stands, and a link."""
    steps = f"step {run.step}/{run.total_steps}" if run.total_steps else f"step {run.step}"
    head = f"DAPO run #{run.pk} \u201c{run.name}\u201d"
    if event == Event.SUCCEEDED:
        acc = next((v for k, v in (run.latest_metrics or {}).items() if k.startswith("val/acc/mean@")), None)
        detail = f"succeeded at {steps}" + (f" (val acc {acc:.3f})" if isinstance(acc, float) else "")
    elif event == Event.FAILED:
        detail = f"failed at {steps}: {(run.error or 'no reason given').splitlines()[-1][:300]}"
    else:
        minutes = NotificationSettings.of(run.owner).stall_minutes
        detail = f"stalled: no step, validation or checkpoint for {minutes} min (at {steps})"
    return f"{head} {detail}. {run_url(run)}"


def queue(run: Run | None, user: Any, event: str, text: str) -> list[Notification]:
    """One row per channel the user set up (none when they set up nothing): pending, or, for e-mail to an
    unverified address or past the hourly limit, a record of why it was not sent."""
    prefs = NotificationSettings.of(user)
    rows = []
    if prefs.webhook_url:
        rows.append(
            Notification(
                user=user, run=run, event=event, channel=Channel.WEBHOOK, target=prefs.webhook_url, text=text
            )
        )
    if prefs.email and prefs.address and email_configured():
        rows.append(_email(user, prefs, run, event, text))
    return Notification.objects.bulk_create(rows)


def _email(user: Any, prefs: NotificationSettings, run: Run | None, event: str, text: str) -> Notification:
    """The e-mail row of an event: pending only to a verified address within ``DAPO_NOTIFY_MAIL_PER_HOUR``;
    otherwise recorded (skipped, throttled) with the reason, so no mail is dropped without a trace."""
    note = Notification(
        user=user, run=run, event=event, channel=Channel.EMAIL, target=prefs.address, text=text
    )
    if not prefs.address_verified:
        note.status, note.last_error = Delivery.SKIPPED, UNVERIFIED
    elif refused := _mail_refusal(user):
        note.status = Delivery.THROTTLED
        note.last_error = (
            f"not sent: {refused.limit.count} e-mails an hour is this account's limit "
            f"({refused.limit.setting}); the next can go after {refused.retry_at:%H:%M} UTC"
        )
    return note


def _mail_refusal(user: Any) -> throttle.Refusal | None:
    """Whether the hourly e-mail limit is reached, counting the user's e-mails sent or on their way."""
    limit = throttle.NOTIFY_MAIL
    since = timezone.now() - limit.window
    mails = Notification.objects.filter(
        user=user,
        channel=Channel.EMAIL,
        created_at__gt=since,
        status__in=(Delivery.PENDING, Delivery.SENT, Delivery.FAILED),
    )
    return throttle.refusal(limit, list(mails.values_list("created_at", flat=True)))


def run_finished(run: Run) -> None:
    """Called by ``Run.finish``: a success or a failure notifies the owner (a cancel was their own doing).
    Never raises: the run's status is written already, and a notification is worth less than the run."""
    if run.status not in (Event.SUCCEEDED, Event.FAILED):
        return
    try:
        queue(run, run.owner, run.status, message(run, run.status))
    except Exception:
        log.exception("run %s: could not queue its notifications", run.pk)


def stall_clock(run: Run) -> datetime | None:
    """When the stall clock of a running run started: its last sign of life in this attempt. That is the
    latest of the attempt's claim and start, its last step, and its last phase (a generation round, a
    validation, a checkpoint: ``Run.record_activity``). A step recorded before a cancel never counts for
    the attempt that resumes it, since the claim comes later."""
    marks = [run.running_since, run.attempt_started_at, run.last_step_at, run.last_active_at]
    return max((m for m in marks if m is not None), default=run.started_at)


def detect_stalls(now: datetime | None = None) -> list[int]:
    """Mark running runs without a sign of life (``stall_clock``) for their owner's ``stall_minutes`` as
    stalled (once per stall: a step or a phase clears the mark) and notify their owners. Returns the ids
    newly marked."""
    from runs.models import Run, Status

    now = now or timezone.now()
    marked = []
    running = Run.objects.filter(status=Status.RUNNING, stalled_at__isnull=True).select_related("owner")
    for run in running:
        minutes = NotificationSettings.of(run.owner).stall_minutes
        since = stall_clock(run)
        if not minutes or since is None or now - since < timedelta(minutes=minutes):
            continue
        if Run.objects.filter(pk=run.pk, status=Status.RUNNING, stalled_at__isnull=True).update(
            stalled_at=now
        ):
            run.refresh_from_db()
            queue(run, run.owner, Event.STALLED, message(run, Event.STALLED))
            marked.append(run.pk)
    return marked


# ---- delivery -----------------------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001
        raise urllib.error.HTTPError(req.full_url, code, f"redirect to {newurl} refused", headers, fp)


_OPENER = urllib.request.build_opener(_NoRedirect)


def post_webhook(url: str, text: str) -> None:
    """One POST of ``{"text": text}``; raises with the reason unless the answer is 2xx."""
    problem = webhook_problem(url)
    if problem:
        raise ValueError(f"webhook {problem}")
    body = json.dumps({"text": text}).encode()
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "dapo-platform"},
    )
    try:
        with _OPENER.open(request, timeout=WEBHOOK_TIMEOUT_S) as response:
            response.read(65536)
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"HTTP {e.code}: {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise RuntimeError(f"{type(e).__name__}: {getattr(e, 'reason', e)}") from None


def send(note: Notification) -> None:
    """One attempt at one notification; raises with the reason when it failed."""
    if note.channel == Channel.WEBHOOK:
        post_webhook(note.target, note.text)
    else:
        subject = re.sub(r"\s+https?://\S+$", "", note.text)[:150]
        send_mail(subject, note.text, None, [note.target], fail_silently=False)


def deliver(note: Notification, now: datetime | None = None) -> bool:
    """Attempt a claimed notification and record the outcome; True when it was delivered."""
    now = now or timezone.now()
    try:
        send(note)
    except Exception as e:
        error = str(e)[:2000] or type(e).__name__
        final = note.attempts >= MAX_ATTEMPTS
        delay = RETRY_DELAYS_S[min(note.attempts, len(RETRY_DELAYS_S)) - 1]
        log.warning(
            "notification %s (%s to %s) attempt %d failed: %s%s",
            note.pk,
            note.channel,
            note.target,
            note.attempts,
            error,
            "; giving up" if final else f"; retrying in {delay} s",
        )
        Notification.objects.filter(pk=note.pk).update(
            status=Delivery.FAILED if final else Delivery.PENDING,
            last_error=error,
            next_attempt_at=now + timedelta(seconds=delay),
        )
        return False
    Notification.objects.filter(pk=note.pk).update(
        status=Delivery.SENT, sent_at=timezone.now(), last_error=""
    )
    return True


def deliver_due(now: datetime | None = None) -> int:
    """Send every pending notification whose time has come (claiming each first); returns how many went."""
    now = now or timezone.now()
    sent = 0
    due = Notification.objects.filter(status=Delivery.PENDING, next_attempt_at__lte=now).order_by(
        "next_attempt_at"
    )
    for note in list(due[:100]):
        claimed = Notification.objects.filter(
            pk=note.pk, status=Delivery.PENDING, attempts=note.attempts, next_attempt_at__lte=now
        ).update(attempts=F("attempts") + 1, next_attempt_at=now + timedelta(seconds=CLAIM_S))
        if not claimed:
            continue  # another worker has it
        note.attempts += 1
        sent += deliver(note, now)
    return sent


def send_test(user: Any) -> list[Notification]:
    """ "Send a test" (the settings page, the API): one attempt per channel now, recorded like any other (an
    e-mail to an unverified address or past the limit only recorded, as ``queue`` does)."""
    page = f"{settings.DAPO_SITE_URL.rstrip('/')}/accounts/notifications/"
    text = f"DAPO notifications work: this is a test from {page}"
    rows = queue(None, user, Event.TEST, text)
    for note in (n for n in rows if n.status == Delivery.PENDING):
        Notification.objects.filter(pk=note.pk).update(attempts=1)
        note.attempts = 1
        deliver(note)
        note.refresh_from_db()
    return rows
