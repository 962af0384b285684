"""Who may see and who may change a run or a saved comparison: the one place the rule lives.

Read: the owner; a superuser; a user the run is shared with, by name or through a Django group; and a user
a saved comparison is shared with, for the comparison's runs that its owner owns (sharing a comparison
shares the curves in it, never a run its owner could only read). Write (rename, tag, notes, archive,
share, cancel, resume, export, delete): the owner and a superuser only.

Everyone else gets a 404 (another user's private run looks missing); a reader who tries to write gets a
403 that says the run is shared read-only. Pages, the API and the websocket all ask here
(``run_for``/``readable_runs``); nothing else filters runs by owner.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import F, Q, QuerySet
from django.http import Http404

from runs.models import Run, SavedComparison

MAX_ID = 2**63 - 1
READ_ONLY = "This run is shared with you read-only: only its owner can change it."


def _groups(user: Any) -> QuerySet:
    return user.groups.all()


def shared_comparisons(user: Any) -> QuerySet[SavedComparison]:
    """Comparisons shared with this user (by name or group), not their own."""
    return SavedComparison.objects.filter(Q(shared_users=user) | Q(shared_groups__in=_groups(user)))


def readable(runs: QuerySet[Run], user: Any) -> QuerySet[Run]:
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


def readable_runs(user: Any) -> QuerySet[Run]:
    """Every run this user may read."""
    return readable(Run.objects.all(), user)


def writable_runs(user: Any) -> QuerySet[Run]:
    """Every run this user may change: their own (a superuser: all)."""
    if user is None or not user.is_authenticated:
        return Run.objects.none()
    return Run.objects.all() if user.is_superuser else Run.objects.filter(owner=user)


def can_write(user: Any, run: Run) -> bool:
    return bool(user is not None and user.is_authenticated and (user.is_superuser or run.owner_id == user.pk))


def run_id_or_404(raw: Any) -> int:
    """A URL's run id as an int the database can compare; 404 for anything else."""
    try:
        run_id = int(raw)
    except (TypeError, ValueError):
        raise Http404("No such run.") from None
    if not 0 < run_id <= MAX_ID:
        raise Http404("No such run.")
    return run_id


def run_for(user: Any, run_id: Any, *, write: bool = False, related: tuple[str, ...] = ()) -> Run:
    """The run if ``user`` may read it (404 otherwise); with ``write``, 403 for a reader who is not its
    owner. ``related``: select_related names."""
    pk = run_id_or_404(run_id)
    runs = readable_runs(user)
    run = (runs.select_related(*related) if related else runs).filter(pk=pk).first()
    if run is None:
        raise Http404("No such run.")
    if write and not can_write(user, run):
        raise PermissionDenied(READ_ONLY)
    return run


def run_or_none(user: Any, run_id: Any) -> Run | None:
    """The run if ``user`` may read it, else None (the websocket closes with its not-found code)."""
    try:
        return run_for(user, run_id)
    except Http404:
        return None


def readable_comparisons(user: Any) -> QuerySet[SavedComparison]:
    """Saved comparisons this user owns or that are shared with them (a superuser: all)."""
    if user is None or not user.is_authenticated:
        return SavedComparison.objects.none()
    if user.is_superuser:
        return SavedComparison.objects.all()
    return SavedComparison.objects.filter(Q(owner=user) | Q(pk__in=shared_comparisons(user).values("pk")))


def comparison_for(user: Any, comparison_id: Any, *, write: bool = False) -> SavedComparison:
    """A saved comparison this user may read (404 otherwise); with ``write``, 403 unless they own it."""
    try:
        pk = int(comparison_id)
    except (TypeError, ValueError):
        raise Http404("No such comparison.") from None
    found = readable_comparisons(user).filter(pk=pk).first() if 0 < pk <= MAX_ID else None
    if found is None:
        raise Http404("No such comparison.")
    if write and not (user.is_superuser or found.owner_id == user.pk):
        raise PermissionDenied("This comparison is shared with you read-only: only its owner can change it.")
    return found
