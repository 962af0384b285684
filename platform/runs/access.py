"""Who may see and who may change a run or a saved comparison: the one place the rule lives.

Read: the owner; a superuser; a user the run is shared with, by name or through a Django group; and a user
a saved comparison is shared with, for the comparison's runs that its owner owns (sharing a comparison
shares the curves in it, never a run its owner could only read). Write (rename, tag, notes, archive,
share, cancel, resume, export, delete): the owner and a superuser only. Checkpoints (fork, evaluate a
checkpoint, export, resume): whatever reads a run's weights needs write access too (``checkpoints=True``,
``checkpoint_runs``), so a share lends a run's curves and samples, never a copy of its model.

Sharing names only people the sharer already knows: the users and groups they share a group with (a
superuser: everyone), plus those the run is already shared with (``shareable_users``,
``shareable_groups``); another name reads as one that does not exist.

Everyone else gets a 404 (another user's private run looks missing; the websocket closes as for a
missing run), so an id tells a stranger nothing; a reader who tries to write gets a 403 that says the run
is shared read-only. Pages, the API and the websocket all ask here (``run_for``, ``find_run``,
``visible_runs``).
"""

from __future__ import annotations

from typing import Any, TypeVar

from core.params import int_or_none
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.db.models import F, Q, QuerySet
from django.http import Http404, HttpRequest

from runs.models import Run, SavedComparison

READ_ONLY = "This run is shared with you read-only: only its owner can change it."
CHECKPOINTS_READ_ONLY = (
    "This run is shared with you read-only: only its owner can use its checkpoints (fork, evaluate, "
    "export, resume). Clone & edit copies its config without the weights."
)


def _groups(user: Any) -> QuerySet:
    return user.groups.all()


def shared_comparisons(user: Any) -> QuerySet[SavedComparison]:
    """Comparisons shared with this user (by name or group), not their own."""
    return SavedComparison.objects.filter(Q(shared_users=user) | Q(shared_groups__in=_groups(user)))


RunSet = TypeVar("RunSet", bound=QuerySet[Run])


def readable(runs: RunSet, user: Any) -> RunSet:
    """``runs`` narrowed to those ``user`` may read (see the module's rule). No join in the result: each
    sharing path is an ``IN (subquery)``, so counts, ``values()`` and ``update()`` work as on a plain set."""
    if user is None or not user.is_authenticated:
        return runs.none()
    if user.is_superuser:
        return runs
    groups = _groups(user)
    by_name = Run.shared_users.through.objects.filter(user=user).values("run_id")
    by_group = Run.shared_groups.through.objects.filter(group__in=groups).values("run_id")
    in_comparison = Run.objects.filter(
        saved_comparisons__in=shared_comparisons(user).values("pk"),
        owner=F("saved_comparisons__owner"),
    ).values("pk")
    return runs.filter(Q(owner=user) | Q(pk__in=by_name) | Q(pk__in=by_group) | Q(pk__in=in_comparison))


def visible_runs(user: Any) -> QuerySet[Run]:
    """Every run ``user`` may read."""
    return readable(Run.objects.all(), user)


def writable_runs(user: Any) -> QuerySet[Run]:
    """Every run this user may change: their own (a superuser: all)."""
    if user is None or not user.is_authenticated:
        return Run.objects.none()
    return Run.objects.all() if user.is_superuser else Run.objects.filter(owner=user)


def can_write(user: Any, run: Run) -> bool:
    return bool(user is not None and user.is_authenticated and (user.is_superuser or run.owner_id == user.pk))


def can_use_checkpoints(user: Any, run: Run) -> bool:
    """Whether ``user`` may start anything from ``run``'s weights (fork, evaluate, export, resume): the
    owner's permission, as writing. A reader could otherwise fork a shared run and export the fork."""
    return can_write(user, run)


def checkpoint_runs(user: Any) -> QuerySet[Run]:
    """Every run whose checkpoints ``user`` may use (menus of checkpoints offer these only)."""
    return writable_runs(user)


def find_run(user: Any, run_id: Any) -> Run | None:
    """The run ``run_id`` (an int or its digits) if ``user`` may read it; None for anything else."""
    pk = int_or_none(run_id)
    if pk is None:
        return None
    return visible_runs(user).select_related("owner", "parent").filter(pk=pk).first()


def still_readable(user_id: int, run_id: int) -> bool:
    """Whether the user, as the database has them now (still active, still a superuser or not), may still
    read the run: an open websocket asks this again when access may have changed (runs.consumers)."""
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    return user is not None and find_run(user, run_id) is not None


def run_for(
    request: HttpRequest | Any, run_id: Any, *, write: bool = False, checkpoints: bool = False
) -> Run:
    """The run for this request's user, or ``Http404`` (the API answers it as 404 too); with ``write``,
    ``PermissionDenied`` (403) for a reader who is not its owner; with ``checkpoints`` the same for a
    reader, with a message that names the checkpoint actions."""
    run = find_run(request.user, run_id)
    if run is None:
        raise Http404("No such run.")
    if checkpoints:
        checked_checkpoints(request.user, run)
    if write and not can_write(request.user, run):
        raise PermissionDenied(READ_ONLY)
    return run


def checked_checkpoints(user: Any, run: Run) -> Run:
    """``run`` (one ``user`` may read) if they may use its checkpoints; ``PermissionDenied`` otherwise."""
    if not can_use_checkpoints(user, run):
        raise PermissionDenied(CHECKPOINTS_READ_ONLY)
    return run


def shareable_users(user: Any, *, already: QuerySet | None = None) -> QuerySet:
    """Users ``user`` may name in a share: those in one of their groups, themselves, and the ``already``
    shared (ids); a superuser: everyone. Names outside read as unknown, so a share form is no directory."""
    everyone = get_user_model().objects.all()
    if user.is_superuser:
        return everyone
    in_groups = get_user_model().groups.through.objects.filter(group__in=_groups(user)).values("user_id")
    known = Q(pk=user.pk) | Q(pk__in=in_groups)
    return everyone.filter(known | Q(pk__in=already) if already is not None else known)


def shareable_groups(user: Any, *, already: QuerySet | None = None) -> QuerySet[Group]:
    """Groups ``user`` may share with (their own, and the ``already`` shared, as ids); a superuser: all."""
    if user.is_superuser:
        return Group.objects.order_by("name")
    own = Q(pk__in=_groups(user).values("pk"))
    return Group.objects.filter(own | Q(pk__in=already) if already is not None else own).order_by("name")


def readable_comparisons(user: Any) -> QuerySet[SavedComparison]:
    """Saved comparisons this user owns or that are shared with them (a superuser: all)."""
    if user is None or not user.is_authenticated:
        return SavedComparison.objects.none()
    if user.is_superuser:
        return SavedComparison.objects.all()
    return SavedComparison.objects.filter(Q(owner=user) | Q(pk__in=shared_comparisons(user).values("pk")))


def comparison_for(user: Any, comparison_id: Any, *, write: bool = False) -> SavedComparison:
    """A saved comparison this user may read (404 otherwise); with ``write``, 403 unless they own it."""
    pk = int_or_none(comparison_id)
    found = readable_comparisons(user).filter(pk=pk).first() if pk is not None else None
    if found is None:
        raise Http404("No such comparison.")
    if write and not (user.is_superuser or found.owner_id == user.pk):
        raise PermissionDenied("This comparison is shared with you read-only: only its owner can change it.")
    return found
