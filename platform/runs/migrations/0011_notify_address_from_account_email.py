"""Existing settings: the notification address starts as the account e-mail it used to be, UNVERIFIED.

Until this release any API token could rewrite the account e-mail (issue #25), so an address found here may
be one an attacker set: marking it verified would keep mailing them. Users with e-mail on see "unverified —
check your mail (resend)" on the notifications page, and their e-mail notifications are recorded as skipped
until they open the link; ``manage.py send_notify_verifications`` mails every such user a link at once.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations


def copy_account_email(apps: Any, schema_editor: Any) -> None:
    settings_model = apps.get_model("runs", "NotificationSettings")
    for prefs in settings_model.objects.filter(address="").select_related("user"):
        if prefs.user.email:
            prefs.address, prefs.address_verified_at = prefs.user.email, None
            prefs.save(update_fields=["address", "address_verified_at"])


class Migration(migrations.Migration):
    dependencies = [("runs", "0010_notify_address_verified_and_rate_limits")]

    operations = [migrations.RunPython(copy_account_email, migrations.RunPython.noop)]
