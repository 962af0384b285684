"""The API of a user's notification settings. The checks are the page's own
(notifications.preferences.validate_settings): a 400 names each bad field and nothing changes.

GET   /api/notifications/     webhook URL, e-mail on/off, the notification address and whether it is
                              verified, stall minutes, the account e-mail (read only), the last 20 deliveries
PATCH /api/notifications/     {"webhook_url"?, "email"?, "stall_minutes"?, "address"?}: a new address is
                              mailed a verification link; "account_email" is a 403 (the browser's
                              /accounts/email/ page, with the password, changes it)
POST  /api/notifications/verification/   mail the unverified address a new link: 202 (429 past the limit)
POST  /api/notifications/test/           "Send a test": 200, a list of the deliveries (429 past the limit)
"""

from __future__ import annotations

from typing import Any

from core.openapi import caller, extend_schema, invalid, object_body
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from notifications.address import Outcome, mail_link
from notifications.delivery import email_configured, send_test
from notifications.models import Notification, NotificationSettings
from notifications.preferences import (
    ACCOUNT_EMAIL_REFUSED,
    SETTINGS_FIELDS,
    current_settings,
    recent_deliveries,
    refused_test,
    save_settings,
    validate_settings,
)

# ---- notification settings ----------------------------------------------------------------------------


class DeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = Notification
        fields = [
            "id",
            "run",
            "event",
            "channel",
            "target",
            "status",
            "attempts",
            "last_error",
            "created_at",
            "sent_at",
        ]


class NotificationSettingsSerializer(serializers.Serializer):
    """The body of PATCH /api/notifications/ (any of the fields) and the settings in the answers."""

    webhook_url = serializers.CharField(
        required=False, allow_blank=True, help_text="Under a DAPO_WEBHOOK_URLS prefix; empty: no webhook."
    )
    email = serializers.BooleanField(required=False, help_text="E-mail the address (needs mail settings).")
    stall_minutes = serializers.IntegerField(
        required=False, help_text="A running run without a new step for this long stalled (0: never)."
    )
    address = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="Where e-mail notifications go, once verified (a new one is mailed a link); never the "
        "login e-mail.",
    )
    address_verified = serializers.BooleanField(read_only=True)
    address_status = serializers.CharField(
        read_only=True, help_text='"verified", "unverified — check your mail (resend: ...)", or empty.'
    )
    account_email = serializers.CharField(
        read_only=True,
        help_text="The login e-mail: changes only at /accounts/email/ (a PATCH of it is a 403).",
    )


RESEND = "resend: POST /api/notifications/verification/"


def _settings_answer(user: Any) -> dict[str, Any]:
    prefs = NotificationSettings.of(user)
    return {
        **current_settings(user),
        "address_verified": prefs.address_verified,
        "address_status": prefs.address_status().replace("(resend)", f"({RESEND})"),
        "account_email": user.email,
        "email_configured": email_configured(),
        "deliveries": DeliverySerializer(recent_deliveries(user), many=True).data,
    }


def _refused(outcome: Outcome) -> Response:
    """A request that sent nothing: 429 with ``Retry-After`` when a limit said no, else 400."""
    if outcome.refusal is None:
        return Response({"detail": outcome.message}, status=status.HTTP_400_BAD_REQUEST)
    seconds = outcome.refusal.retry_after_s()
    return Response(
        {"detail": outcome.message, "retry_after": seconds},
        status=status.HTTP_429_TOO_MANY_REQUESTS,
        headers={"Retry-After": str(seconds)},
    )


class NotificationSettingsView(APIView):
    """Your notification settings and your last 20 deliveries (each with its state and last error)."""

    serializer_class = NotificationSettingsSerializer

    def get(self, request: Request) -> Response:
        return Response(_settings_answer(caller(request)))

    @extend_schema(request=NotificationSettingsSerializer, responses={200: NotificationSettingsSerializer})
    def patch(self, request: Request) -> Response:
        """Change any of the fields; those left out keep their values. The checks of the settings page
        (the webhook allowlist, the minutes' range, an address for e-mail): a 400 names each bad field and
        nothing is saved. A new ``address`` starts unverified and is mailed a link (``verification_mail``
        says how that went); nothing is mailed there until its owner opens it, logged in. ``account_email``
        is a 403: the login e-mail changes only at /accounts/email/, with the password."""
        body, errors = object_body(request, SETTINGS_FIELDS)
        if "account_email" in body:  # a token must never be enough to redirect password resets
            return Response({"detail": ACCOUNT_EMAIL_REFUSED}, status=status.HTTP_403_FORBIDDEN)
        known = {k: v for k, v in body.items() if k in SETTINGS_FIELDS}
        values, problems = validate_settings(**{**current_settings(caller(request)), **known})
        errors = {**problems, **errors}
        if errors:
            return invalid("invalid notification settings", errors)
        _, mailed = save_settings(caller(request), values)
        answer = _settings_answer(caller(request))
        return Response({**answer, "verification_mail": mailed.message} if mailed else answer)


class AddressVerificationView(APIView):
    """Mail your unverified notification address a new verification link (earlier links stop working)."""

    @extend_schema(request=None, responses={202: None, 400: None, 429: None})
    def post(self, request: Request) -> Response:
        """202 when the link went; 400 saying why not (no unverified address, no mail server); 429 with
        ``retry_after`` past ``DAPO_NOTIFY_VERIFY_PER_HOUR``."""
        outcome = mail_link(NotificationSettings.of(caller(request)))
        if not outcome.ok:
            return _refused(outcome)
        return Response({"detail": outcome.message}, status=status.HTTP_202_ACCEPTED)


class NotificationTestView(APIView):
    """ "Send a test", as the settings page's button: one attempt per channel now."""

    @extend_schema(request=None, responses={200: DeliverySerializer(many=True)})
    def post(self, request: Request) -> Response:
        """200 with the deliveries (each with its state and error; an e-mail to an unverified address is
        "skipped"); 400 when nothing is set up; 429 with ``retry_after`` past
        ``DAPO_NOTIFY_TEST_PER_HOUR``."""
        refused = refused_test(caller(request))
        if refused:
            return _refused(refused)
        rows = send_test(caller(request))
        return Response(DeliverySerializer(rows, many=True).data)


# ---- saved views of the runs list ---------------------------------------------------------------------
