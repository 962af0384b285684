import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("runs", "0013_notifications_leave_runs"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    # The tables exist already (created by the runs app, whose names they keep): only Django's record of
    # the models is created here.
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="NotificationSettings",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "webhook_url",
                            models.CharField(
                                blank=True, help_text="Slack-compatible incoming webhook.", max_length=1000
                            ),
                        ),
                        (
                            "email",
                            models.BooleanField(default=False, help_text="E-mail the notification address."),
                        ),
                        (
                            "address",
                            models.EmailField(
                                blank=True,
                                help_text="Where e-mail notifications go, once verified; never the account's login e-mail.",
                                max_length=254,
                            ),
                        ),
                        (
                            "address_verified_at",
                            models.DateTimeField(
                                blank=True,
                                help_text="When the owner opened the link mailed to the address.",
                                null=True,
                            ),
                        ),
                        (
                            "verify_nonce",
                            models.CharField(
                                blank=True,
                                help_text="Names the newest verification link; cleared when it is used.",
                                max_length=32,
                            ),
                        ),
                        (
                            "stall_minutes",
                            models.PositiveIntegerField(
                                default=15,
                                help_text="A running run without a new step for this long stalled (0: never).",
                            ),
                        ),
                        (
                            "user",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="notification_settings",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runs_notificationsettings",
                    },
                ),
                migrations.CreateModel(
                    name="Notification",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "event",
                            models.CharField(
                                choices=[
                                    ("succeeded", "Succeeded"),
                                    ("failed", "Failed"),
                                    ("stalled", "Stalled"),
                                    ("test", "Test"),
                                ],
                                max_length=16,
                            ),
                        ),
                        (
                            "channel",
                            models.CharField(
                                choices=[("webhook", "Webhook"), ("email", "Email")], max_length=16
                            ),
                        ),
                        ("target", models.CharField(help_text="The URL or e-mail address.", max_length=1000)),
                        ("text", models.TextField()),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("pending", "Pending"),
                                    ("sent", "Sent"),
                                    ("failed", "Failed"),
                                    ("throttled", "Throttled"),
                                    ("skipped", "Skipped"),
                                ],
                                default="pending",
                                max_length=16,
                            ),
                        ),
                        ("attempts", models.IntegerField(default=0)),
                        ("next_attempt_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("last_error", models.TextField(blank=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("sent_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "run",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="runs.run",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="notifications",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runs_notification",
                        "ordering": ["-created_at", "-id"],
                        "indexes": [
                            models.Index(fields=["status", "next_attempt_at"], name="notification_due")
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
