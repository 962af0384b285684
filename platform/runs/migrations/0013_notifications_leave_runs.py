from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0012_run_quotas"),
    ]

    # The notification models moved to the notifications app with their tables (db_table keeps the names):
    # only Django's record of the models changes, no table does.
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name="notificationsettings",
                    name="user",
                ),
                migrations.DeleteModel(
                    name="Notification",
                ),
                migrations.DeleteModel(
                    name="NotificationSettings",
                ),
            ],
            database_operations=[],
        ),
    ]
