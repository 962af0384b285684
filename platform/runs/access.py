"""Which runs a user may see: one lookup for the pages, the API and the websocket.

The rule is ``Run.objects.visible_to`` (owners see their runs, a superuser sees all, an anonymous user
none). A run the user may not see answers exactly like a missing one: a 404 for pages and the API, a
closed socket for the websocket, so an id tells a stranger nothing.
"""

from __future__ import annotations

from typing import Any

from config.params import int_or_none
from django.http import Http404, HttpRequest

from runs.models import Run, RunQuerySet


def visible_runs(user: Any) -> RunQuerySet:
    """The runs ``user`` may see."""
    return Run.objects.visible_to(user)


def find_run(user: Any, run_id: Any) -> Run | None:
    """The run ``run_id`` (an int or its digits) if ``user`` may see it; None for anything else."""
    pk = int_or_none(run_id)
    if pk is None:
        return None
    return visible_runs(user).select_related("owner", "parent").filter(pk=pk).first()


def run_for(request: HttpRequest | Any, run_id: Any) -> Run:
    """The run for this request's user, or ``Http404`` (the API answers it as 404 too)."""
    run = find_run(request.user, run_id)
    if run is None:
        raise Http404("No such run.")
    return run
