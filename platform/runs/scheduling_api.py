"""Staff's levers on the queue: a run's priority and pre-emption (the API, and the forms of the run page).

POST /api/runs/<id>/priority/  {"priority": int in -100..100}: higher goes first in the queue (the
                               scheduler runs a pass at once); 400 for anything else
POST /api/runs/<id>/preempt/   a running training run checkpoints at its next step boundary and goes back
                               to the queue (worker.sink); it resumes from that checkpoint, no step lost.
                               A queued run holds nothing: 409

Staff only: anyone else gets 403 with the reason (401 without credentials). Staff act on any run, whoever
owns it (the run page offers the forms only where they can see the run; the admin offers both for every
run). The same rules back the admin's list_editable priority and its "Pre-empt" action (runs.admin).
"""

from __future__ import annotations

from typing import Any

from core.openapi import extend_schema
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect
from django.views.decorators.http import require_POST
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs import dispatch
from runs.events import publish, status_event
from runs.models import Kind, Run, Status
from runs.scheduling import queue_entry

PRIORITY_MIN, PRIORITY_MAX = -100, 100
NOT_STAFF = (
    "Only staff may {what}: ask an administrator (a staff account can, here or in admin › Runs › Runs)."
)


class PrioritySerializer(serializers.Serializer):
    priority = serializers.IntegerField(
        min_value=PRIORITY_MIN, max_value=PRIORITY_MAX, help_text="Higher first in the queue; default 0."
    )


def parse_priority(value: Any) -> tuple[int | None, str]:
    """A priority from a form or a JSON body: (the number, "") or (None, what is wrong)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None, f"priority must be a whole number from {PRIORITY_MIN} to {PRIORITY_MAX}"
    try:
        number = int(value)
    except ValueError:
        return None, f"priority must be a whole number from {PRIORITY_MIN} to {PRIORITY_MAX}, got {value!r}"
    if not PRIORITY_MIN <= number <= PRIORITY_MAX:
        return None, f"priority must be from {PRIORITY_MIN} to {PRIORITY_MAX}, got {number}"
    return number, ""


def set_priority(run: Run, priority: int) -> None:
    """Store it and re-rank the queue once the change commits; the run's pages hear of it."""
    Run.objects.filter(pk=run.pk).update(priority=priority)
    run.priority = priority
    dispatch.schedule_on_commit()
    publish(run.pk, status_event(run))


def preempt_refusal(run: Run) -> str:
    """Why ``run`` cannot be pre-empted ("" when it can)."""
    if run.kind != Kind.TRAINING:
        return f"run #{run.pk} is not a training run ({run.kind}): only training runs are scheduled"
    if run.status == Status.QUEUED:
        return (
            f"run #{run.pk} is queued: it holds nothing to give back; lower its priority instead "
            "(POST /api/runs/<id>/priority/)"
        )
    if run.status != Status.RUNNING:
        return f"run #{run.pk} is {run.status}: only a running run can be pre-empted"
    if run.cancel_requested:
        return f"run #{run.pk} is being cancelled: it stops at its next step boundary anyway"
    return ""


def _staff_run(run_id: int) -> Run:
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        raise Http404(f"No run #{run_id}.")
    return run


class RunPriority(APIView):
    serializer_class = PrioritySerializer

    def post(self, request: Request, run_id: int) -> Response:
        """Set a run's priority (staff): higher goes first among the runs that fit."""
        if not request.user.is_staff:
            return Response({"detail": NOT_STAFF.format(what="change a run's priority")}, status=403)
        run = _staff_run(run_id)
        value = request.data.get("priority") if isinstance(request.data, dict) else None
        strict = isinstance(value, int) and not isinstance(value, bool)  # JSON: a number, not "5"
        priority, problem = parse_priority(value) if strict else (None, parse_priority(None)[1])
        if priority is None:
            return Response({"detail": problem, "errors": {"priority": problem}}, status=400)
        set_priority(run, priority)
        return Response({"id": run.pk, "priority": priority, "queue": queue_entry(run, request.user)})


class RunPreempt(APIView):
    @extend_schema(request=None, responses={200: None, 409: None})
    def post(self, request: Request, run_id: int) -> Response:
        """Pre-empt a running training run (staff): it checkpoints at its next step boundary, goes back to
        the queue, and later resumes from that checkpoint."""
        if not request.user.is_staff:
            return Response({"detail": NOT_STAFF.format(what="pre-empt a run")}, status=403)
        run = _staff_run(run_id)
        if why := preempt_refusal(run):
            return Response({"detail": why}, status=status.HTTP_409_CONFLICT)
        if not run.request_preempt(request.user.get_username()):
            return Response({"detail": preempt_refusal(run) or "the run ended meanwhile"}, status=409)
        publish(run.pk, status_event(run))
        return Response({"id": run.pk, "outcome": "pre-empting", "preempt_requested": True})


@require_POST
def priority_form(request: HttpRequest, run_id: int) -> HttpResponse:
    if not request.user.is_staff:
        return HttpResponseForbidden(NOT_STAFF.format(what="change a run's priority"))
    run = _staff_run(run_id)
    priority, problem = parse_priority(request.POST.get("priority", ""))
    if priority is None:
        messages.error(request, f"Priority not changed: {problem}.")
    else:
        set_priority(run, priority)
        messages.success(request, f"Priority of run #{run.pk} set to {priority}.")
    return redirect("runs:detail", run_id=run.pk)


@require_POST
def preempt_form(request: HttpRequest, run_id: int) -> HttpResponse:
    if not request.user.is_staff:
        return HttpResponseForbidden(NOT_STAFF.format(what="pre-empt a run"))
    run = _staff_run(run_id)
    why = preempt_refusal(run)
    if why or not run.request_preempt(request.user.get_username()):
        messages.error(request, f"Not pre-empted: {why or 'the run ended meanwhile'}.")
    else:
        publish(run.pk, status_event(run))
        messages.success(
            request, f"Run #{run.pk} is pre-empted at its next step boundary; it goes back to the queue."
        )
    return redirect("runs:detail", run_id=run.pk)
