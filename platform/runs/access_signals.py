"""Tell open run websockets when someone may have lost access, whatever made the change: the run page, the
API, the admin, a group's members edited, a comparison unshared or deleted, a user deactivated.

Each change that can take read access away (runs.access: a share by name or group, a group's members, a
shared comparison's users, groups and runs, a user's active or superuser flag) is caught here as a Django
signal, before it happens (the relations it removes are still there to be read), and
``events.access_changed`` asks the affected sockets, after the commit, to check again. A socket that
lost access closes (runs.consumers); the others carry on. Adding access needs no message.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models.signals import m2m_changed, post_save, pre_delete
from django.dispatch import receiver

from runs.events import access_changed
from runs.models import Run, SavedComparison

REMOVALS = ("pre_remove", "pre_clear")
User = get_user_model()


def affected(instance: Any) -> tuple[set[int], set[int]]:
    """(runs, users) whose sockets must check again when ``instance`` loses a relation or goes."""
    if isinstance(instance, Run):
        return {instance.pk}, set()
    if isinstance(instance, SavedComparison):
        return set(instance.runs.values_list("pk", flat=True)), set()
    if isinstance(instance, Group):
        return set(), set(instance.user_set.values_list("pk", flat=True))
    return set(), {instance.pk}  # a user


def _removed(sender: Any, instance: Any, action: str, **_: Any) -> None:
    if action in REMOVALS:
        runs, users = affected(instance)
        access_changed(runs=runs, users=users)


def _gone(sender: Any, instance: Any, **_: Any) -> None:
    runs, users = affected(instance)
    access_changed(runs=runs, users=users)


for through in (
    Run.shared_users.through,
    Run.shared_groups.through,
    SavedComparison.shared_users.through,
    SavedComparison.shared_groups.through,
    SavedComparison.runs.through,
    User.groups.through,
):
    m2m_changed.connect(_removed, sender=through, dispatch_uid=f"access-{through._meta.label}")
for model in (Group, SavedComparison, User):
    pre_delete.connect(_gone, sender=model, dispatch_uid=f"access-gone-{model._meta.label}")


@receiver(post_save, sender=User, dispatch_uid="access-user-saved")
def _user_saved(sender: Any, instance: Any, created: bool, update_fields: Any = None, **_: Any) -> None:
    """A user deactivated or no longer a superuser; a login's ``last_login`` changes nothing."""
    if not created and set(update_fields or ()) != {"last_login"}:
        access_changed(users={instance.pk})
