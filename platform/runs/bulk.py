"""Actions on many runs at once: the runs list's "Cancel", "Archive", "Restore" and "Delete…" on the ticked
runs, and ``POST /api/runs/bulk/`` {"action", "ids"}.

Each acts only on the runs the user may change (their own; a superuser: any, as runs.access says): a run
shared with them is refused with a message that names its owner, a run they cannot see reads as missing
(as a 404 would), and the others are still acted on. Delete asks once more on a page that lists the runs
and what goes, confirmed by typing how many runs (a run's own delete asks for its number); the API's
delete, like ``DELETE /api/runs/<id>/``, does not ask.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

from core.openapi import extend_schema
from core.params import BadInteger, to_int
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs import access, manage
from runs.events import publish, status_event
from runs.external import refusal
from runs.models import Run, RunGone

ACTIONS = ("cancel", "archive", "restore", "delete")
MAX_RUNS = 200
"""Runs one bulk action may name (the list shows 100 at a time)."""
PAST = {"cancel": "cancelled", "archive": "archived", "restore": "restored", "delete": "deleted"}


class BulkError(ValueError):
    """A request that names no action or no readable list of runs: ``field`` and the message."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


@dataclass
class Selection:
    """The runs a bulk action may change, in the order named, and why each other id is refused."""

    runs: list[Run] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)


def parse_ids(raw: Any) -> list[int]:
    """Run ids from a JSON list, or form values each holding one id or several separated by commas;
    duplicates once, the first order kept. Raises BulkError."""
    items = raw if isinstance(raw, list) else [raw] if raw not in (None, "") else []
    parts: list[Any] = []
    for item in items:
        if isinstance(item, str):
            parts.extend(p for p in item.split(",") if p.strip())
        else:
            parts.append(item)
    if not parts:
        raise BulkError("ids", "tick at least one run (ids: a list of run numbers)")
    if len(parts) > MAX_RUNS:
        raise BulkError("ids", f"at most {MAX_RUNS} runs at once (got {len(parts)})")
    try:
        return list(dict.fromkeys(to_int(p, "ids", low=1) for p in parts))
    except BadInteger as e:
        raise BulkError("ids", e.reason) from None


def parse_action(raw: Any) -> str:
    if raw not in ACTIONS:
        raise BulkError("action", f"must be one of {', '.join(ACTIONS)}")
    return str(raw)


def select(user: Any, ids: list[int], action: str) -> Selection:
    """Split ``ids`` into the runs ``user`` may ``action`` and the refused ones, each with its reason."""
    visible = {r.pk: r for r in access.visible_runs(user).select_related("owner").filter(pk__in=ids)}
    chosen = Selection()
    for pk in ids:
        run = visible.get(pk)
        if run is None:
            chosen.refused[pk] = f"#{pk}: no such run among yours"
        elif not access.can_write(user, run):
            chosen.refused[pk] = (
                f"#{pk} {run.name!r} is {run.owner.get_username()}'s, shared with you read-only: "
                f"only its owner can {action} it"
            )
        else:
            chosen.runs.append(run)
    return chosen


def apply(action: str, runs: list[Run]) -> tuple[dict[int, str], dict[int, str]]:
    """Do ``action`` on each run: ({id: outcome}, {id: why it changed nothing}). Outcomes: cancel,
    "cancelled" or "cancelling", or "already <status>" for a run that had ended; archive and restore,
    "archived" or "restored"; delete, "deleted". A run deleted meanwhile (another tab) is refused."""
    done: dict[int, str] = {}
    refused: dict[int, str] = {}
    for run in runs:
        try:
            if action == "cancel" and (why := refusal(run, "cancel")):
                refused[run.pk] = why
            elif action == "cancel":
                was_final = run.is_final
                outcome = run.request_cancel()
                done[run.pk] = f"already {outcome}" if was_final else outcome
                publish(run.pk, status_event(run))
            elif action in ("archive", "restore"):
                manage.apply_changes(run, {"archived": action == "archive"})
                done[run.pk] = "archived" if action == "archive" else "restored"
            else:
                manage.delete_run(run)
                done[run.pk] = "deleted"
        except RunGone:
            refused[run.pk] = f"#{run.pk} was deleted meanwhile, by another request"
    return done, refused


def summary(action: str, done: dict[int, str], refused: dict[int, str]) -> tuple[str, str]:
    """(what was done, what was refused) as sentences for the page's messages ('' when nothing)."""
    by_outcome: dict[str, list[int]] = {}
    for pk, outcome in done.items():
        by_outcome.setdefault(outcome, []).append(pk)
    said = []
    for outcome, ids in by_outcome.items():
        runs = ", ".join(f"#{pk}" for pk in ids)
        if outcome.startswith("already "):
            said.append(f"{runs} {outcome}, not cancelled")
        else:
            said.append(f"{outcome.capitalize()} {runs}")
    note = "; ".join(said) + "." if said else ""
    if "cancelling" in by_outcome:
        note += " A running run stops at its next step boundary."
    if action == "archive" and done:
        note += " The list hides archived runs unless you show them."
    refusal = f"Not {PAST[action]}: " + "; ".join(refused.values()) + "." if refused else ""
    return note.strip(), refusal


# ---- the runs list's form ----------------------------------------------------------------------------


def _list_url(back: str) -> str:
    """The runs list with the query it was showing (``back``: a query string only, never a URL)."""
    query = urlencode(parse_qsl(back.lstrip("?"))[:20])
    return f"{reverse('runs:list')}?{query}" if query else reverse("runs:list")


@require_POST
def bulk_action(request: HttpRequest) -> HttpResponse:
    """POST /runs/bulk/: action, ids (ticked), back (the list's query); for delete, confirm (the count)."""
    back = request.POST.get("back", "")
    try:
        action = parse_action(request.POST.get("action"))
        ids = parse_ids(request.POST.getlist("ids"))
    except BulkError as e:
        messages.error(request, f"Nothing changed: {e.field} {e}.")
        return redirect(_list_url(back))
    chosen = select(request.user, ids, action)
    if action == "delete" and chosen.runs:
        typed = request.POST.get("confirm")
        if typed is None or typed.strip() != str(len(chosen.runs)):
            return _confirm_delete(request, chosen, ids, back, wrong=typed is not None)
    done, gone = apply(action, chosen.runs)
    note, refusal = summary(action, done, {**chosen.refused, **gone})
    if note:
        messages.info(request, note)
    if refusal:
        messages.error(request, refusal)
    return redirect(_list_url(back))


def _confirm_delete(
    request: HttpRequest, chosen: Selection, ids: list[int], back: str, *, wrong: bool
) -> HttpResponse:
    summaries = [(run, manage.deletion_summary(run)) for run in chosen.runs]
    context = {
        "rows": summaries,
        "count": len(chosen.runs),
        "refused": list(chosen.refused.values()),
        "ids": ",".join(str(pk) for pk in ids),
        "back": back,
        "back_url": _list_url(back),
        "bytes": sum(s["bytes"] for _, s in summaries),
        "running": sum(1 for _, s in summaries if s["running"]),
        "error": f"Type the number of runs, {len(chosen.runs)}, to confirm." if wrong else "",
    }
    return render(request, "runs/bulk_delete.html", context, status=400 if wrong else 200)


# ---- the API ---------------------------------------------------------------------------------------------


class BulkSerializer(serializers.Serializer):
    """The body of POST /api/runs/bulk/."""

    action = serializers.ChoiceField(choices=ACTIONS)
    ids = serializers.ListField(child=serializers.IntegerField(min_value=1), max_length=MAX_RUNS)


class RunBulk(APIView):
    serializer_class = BulkSerializer

    @extend_schema(request=BulkSerializer, responses={200: None})
    def post(self, request: Request) -> Response:
        """Cancel, archive, restore or delete several of your runs: {"action", "ids": [...]}. Answers
        {"action", "done": {id: outcome}, "refused": {id: why}}; a run shared with you or not yours is
        refused (and the others still done). Delete does not ask again, as DELETE /api/runs/<id>/."""
        body = request.data if isinstance(request.data, dict) else {}
        try:
            action = parse_action(body.get("action"))
            ids = parse_ids(body.get("ids"))
        except BulkError as e:
            return Response(
                {"detail": "invalid bulk action", "errors": {e.field: str(e)}},
                status=status.HTTP_400_BAD_REQUEST,
            )
        chosen = select(request.user, ids, action)
        done, gone = apply(action, chosen.runs)
        refused = {**chosen.refused, **gone}
        return Response(
            {
                "action": action,
                "done": {str(k): v for k, v in done.items()},
                "refused": {str(k): v for k, v in refused.items()},
            }
        )
