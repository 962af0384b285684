"""Sweeps (sweeps.plan) from the new-run form and the API, queued as one run group; and what the group page
plots of them: each run's differing config values against a metric's last, highest or lowest value.

POST /runs/new/sweep/        the form's config as the base of the sweep; the first post lists the runs
POST /api/sweeps/            {"name", "preset" | "config", "overrides"?, "base_model"?, "dataset"?,
                              "sweep": {...}, "dry_run"?}: 201 with the group and its runs
GET  /runs/compare/sweep/?group=NAME | ?ids=1,2&metric=NAME   the parallel-coordinates data (JSON)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from catalog.models import BaseModel
from core.openapi import extend_schema
from core.params import int_or_none
from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from runs import forms
from runs.api import RunCreateSerializer, RunSerializer, catalog_picks
from runs.configuring import build_config, posted_dataset, shown, validate_name
from runs.models import QuotaExceeded, Run
from runs.views import over_quota, render_new

from dapo.runconfig import RunConfig
from sweeps import form as sweep_panel
from sweeps import plan as sweep_plan

Errors = dict[str, str]
Planned = sweep_plan.Planned


def queue(owner: Any, name: str, planned: Planned, **fields: Any) -> tuple[str, list[Run]]:
    """Save the sweep's runs as one new group (never an older group of the same name) in one transaction:
    all or none, their tasks sent once it commits. Returns the group's name and the runs. Past the owner's
    quota (the whole sweep counted at once): ``QuotaExceeded``, and no run is queued."""
    group = Run.objects.free_group(owner, name.strip())
    with transaction.atomic():
        Run.reserve_for(
            owner, runs=len(planned), steps=sum(config.optim.total_steps for _, _, config in planned)
        )
        runs = [
            Run.create_queued(owner=owner, name=run_name, config=config, group=group, **fields)
            for run_name, _, config in planned
        ]
    return group, runs


def compare_url(group: str) -> str:
    return f"{reverse('compare:compare')}?{urlencode({'group': group})}"


def check_and_plan(
    name: Any, raw_sweep: Any, build: Callable[[dict[str, Any]], tuple[RunConfig | None, Errors]]
) -> tuple[Planned, Errors]:
    """The sweep's runs, or every problem at once: the name's, the sweep's and (when the sweep itself is
    unusable) the base config's, each run's config made by ``build`` as a single run's would be."""
    errors = validate_name(name)
    sweep, sweep_errors = sweep_plan.parse(raw_sweep)
    if sweep is None:
        _, base_errors = build({})
        return [], {**errors, **sweep_errors, **base_errors}
    if errors:
        return [], errors
    return sweep_plan.plan(sweep, name, build)


# ---- the new-run form ------------------------------------------------------------------------------------


@require_POST
def launch_sweep(request: HttpRequest) -> HttpResponse:
    """The form's config with each run's swept values on top, every config validated as a single run's
    (all or none), queued as one group, then its comparison. The first post lists the runs it would queue,
    on the form, with a button that confirms."""
    values, errors = forms.parse_post(request.POST)
    name = request.POST.get("name", "").strip()
    preset = request.POST.get("preset", "")
    state = sweep_panel.form_state(request.POST) | {"open": True}
    raw, text_errors = sweep_panel.from_form(state)
    planned: Planned = []
    if errors:  # a field's text could not be read: the sweep's own problems are shown beside them
        _, sweep_errors = sweep_plan.parse(raw)
        errors = {**validate_name(name), **errors, **sweep_errors}
    else:
        dataset = posted_dataset(request.POST)

        def build(combo: dict[str, Any]) -> tuple[RunConfig | None, Errors]:
            return build_config(config=forms.unflatten({**values, **combo}), dataset=dataset)

        planned, errors = check_and_plan(name, raw, build)
    errors |= text_errors  # the panel's own words for text it could not read
    if errors:
        messages.error(request, "The sweep was not queued: fix what is marked below.")
        state["errors"] = {k: m for k, m in errors.items() if k.startswith("sweep") or "the sweep's run" in m}
        field_errors = {k: m for k, m in errors.items() if not k.startswith("sweep")}
        return render_new(
            request, values, field_errors, preset=preset, name=name, parent=None, status=400, sweep=state
        )
    if request.POST.get("sweep_confirm") != "yes":  # many runs from one click: say which, ask once more
        state["planned"] = [run_name for run_name, _, _ in planned]
        return render_new(request, values, {}, preset=preset, name=name, parent=None, sweep=state)
    picks = {
        "base_model": BaseModel.objects.filter(pk=int_or_none(request.POST.get("base_model")) or 0).first(),
        "dataset": posted_dataset(request.POST),
    }
    fields = {"preset": preset if preset in forms.presets_data() else "", **picks}
    try:
        group, runs = queue(request.user, name, planned, **fields)
    except QuotaExceeded as e:
        return over_quota(request, e, values, preset=preset, name=name, parent=None, sweep=state)
    messages.info(request, f"Queued {len(runs)} runs as the group {group!r}.")
    return redirect(compare_url(group))


# ---- the API -----------------------------------------------------------------------------------------------


class SweepCreateSerializer(RunCreateSerializer):
    """The body of POST /api/sweeps/: a run's body (the base of every run) plus the sweep."""

    sweep = serializers.DictField(
        help_text='{"mode": "grid" | "random", "fields": {"optim.lr": [1e-5, 2e-5] | {"low": 1e-6, '
        '"high": 1e-4, "scale": "log"}}, "runs": N (random), "seed": S (random), "cap": C (default 20, '
        "at most 30)}"
    )
    dry_run = serializers.BooleanField(required=False, help_text="List the runs without queuing them (200).")


class SweepResultSerializer(serializers.Serializer):
    group = serializers.CharField()
    count = serializers.IntegerField()
    compare_url = serializers.CharField()
    runs = serializers.ListField(child=serializers.DictField())


BODY_KEYS = ("name", "preset", "config", "overrides", "base_model", "dataset", "sweep", "dry_run")


class SweepCreate(APIView):
    """Queue a grid or random sweep as one run group: every run's config is validated as POST /api/runs/
    validates one (the run's swept values on top of ``overrides``), and one invalid run refuses them all."""

    serializer_class = SweepResultSerializer

    @extend_schema(request=SweepCreateSerializer, responses={201: SweepResultSerializer})
    def post(self, request: Request) -> Response:
        body = request.data if isinstance(request.data, dict) else None
        if body is None:
            return _invalid({"body": "must be a JSON object"})
        unknown = sorted(sweep_plan.shown_key(k) for k in body if k not in BODY_KEYS)
        if unknown:
            return _invalid({k: f"unknown field; valid fields: {', '.join(BODY_KEYS)}" for k in unknown})
        dry_run = body.get("dry_run", False)
        if not isinstance(dry_run, bool):
            return _invalid({"dry_run": f"must be true or false, got {shown(dry_run)}"})
        picks, errors = catalog_picks(body, request.user)
        overrides = body.get("overrides")
        if overrides is not None and not isinstance(overrides, dict):
            errors["overrides"] = "must be an object of dotted field names to values"
        if errors:
            return _invalid(errors)

        def build(combo: dict[str, Any]) -> tuple[RunConfig | None, Errors]:
            """A single run's validation (POST /api/runs/), the run's swept values over ``overrides``."""
            merged = {**(overrides or {}), **combo}
            return build_config(
                preset=body.get("preset"), config=body.get("config"), overrides=merged, **picks
            )

        planned, errors = check_and_plan(body.get("name"), body.get("sweep"), build)
        if errors:
            return _invalid(errors)
        name = body["name"].strip()
        if dry_run:
            runs = [{"name": run_name, "values": combo} for run_name, combo, _ in planned]
            group = Run.objects.free_group(request.user, name)
            return Response({"group": group, "count": len(runs), "queued": False, "runs": runs})
        preset = body.get("preset") if body.get("config") is None else ""
        try:
            group, queued = queue(request.user, name, planned, preset=preset or "", **picks)
        except QuotaExceeded as e:
            return Response(e.body(), status=status.HTTP_409_CONFLICT)
        return Response(
            {
                "group": group,
                "count": len(queued),
                "queued": True,
                "compare_url": compare_url(group),
                "runs": [RunSerializer(run).data for run in queued],
            },
            status=status.HTTP_201_CREATED,
        )


def _invalid(errors: Errors) -> Response:
    return Response({"detail": "invalid sweep", "errors": errors}, status=status.HTTP_400_BAD_REQUEST)
