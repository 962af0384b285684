"""The paper's ablation ladder (dapo.runconfig.presets.ablation_ladder) launched as one run group.

POST /runs/new/ladder/   the new-run form's config as the base of six ablation runs, then their comparison

Two fields of its own: ``ladder_demo`` (on: the demo setting, dapo.runconfig.presets.DEMO_LADDER_SETTING,
where the response limit bites so the length rungs act) and ``ladder_steps`` (each rung's steps; empty:
the form's ``optim.total_steps``).
"""

from __future__ import annotations

from urllib.parse import urlencode

from catalog.models import BaseModel
from core.params import BadInteger, int_or_none, int_param
from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST
from runs import forms
from runs.configuring import build_config, posted_dataset, validate_name
from runs.models import QuotaExceeded, Run
from runs.views import over_quota, render_new

from dapo.runconfig import ConfigError, RunConfig
from dapo.runconfig.presets import DEMO_LADDER_SETTING, ablation_ladder

LADDER_SEP = " · "
MAX_RUNG_STEPS = 10_000_000


@require_POST
def launch_ladder(request: HttpRequest) -> HttpResponse:
    """The six rungs of dapo.runconfig.presets.ablation_ladder on the form's config, queued as one group in
    one transaction (all or none), then their comparison. Errors come back on the form, like a single run's.
    The first post only shows the six runs it would queue, on the form, with a button that confirms."""
    values, errors = forms.parse_post(request.POST)
    name = request.POST.get("name", "").strip()
    dataset = posted_dataset(request.POST)
    base, config_errors = (
        (None, {}) if errors else build_config(config=forms.unflatten(values), dataset=dataset)
    )
    errors = {**validate_name(name), **errors, **config_errors}
    demo, steps, ladder_errors = _ladder_fields(request)
    errors |= ladder_errors
    rungs: list[tuple[str, RunConfig]] = []
    if base is not None and not errors:
        rungs, errors = _rungs(base, name, demo_setting=demo, steps=steps)
    preset = request.POST.get("preset", "")
    if errors:
        messages.error(request, "The ablation ladder was not queued: fix the fields marked below.")
        return render_new(request, values, errors, preset=preset, name=name, parent=None, status=400)
    if request.POST.get("ladder_confirm") != "yes":  # six runs from one click: say which, ask once more
        names = [f"{name}{LADDER_SEP}{rung}" for rung, _ in rungs]
        first = rungs[0][1]
        plan = {
            "steps": first.optim.total_steps,
            "total": sum(c.optim.total_steps for _, c in rungs),
            "max_response_length": first.rollout.max_response_length,
            "buffer": first.algorithm.overlong_buffer_len,
            "demo": demo,
        }
        return render_new(
            request, values, {}, preset=preset, name=name, parent=None, ladder_runs=names, ladder_plan=plan
        )
    picks = {
        "base_model": BaseModel.objects.filter(pk=int_or_none(request.POST.get("base_model")) or 0).first(),
        "dataset": dataset,
    }
    group = Run.objects.free_group(request.user, name)
    try:
        with transaction.atomic():  # all or none: past the quota, no rung is queued
            Run.reserve_for(request.user, runs=len(rungs), steps=sum(c.optim.total_steps for _, c in rungs))
            for rung, config in rungs:
                Run.create_queued(
                    owner=request.user,
                    name=f"{name}{LADDER_SEP}{rung}",
                    config=config,
                    preset=rung,
                    group=group,
                    **picks,
                )
    except QuotaExceeded as e:
        return over_quota(request, e, values, preset=preset, name=name, parent=None)
    return redirect(f"{reverse('compare:compare')}?{urlencode({'group': group})}")


def _ladder_fields(request: HttpRequest) -> tuple[bool, int | None, dict[str, str]]:
    """(demo setting on, steps per rung or None, errors) from the ladder's own fields."""
    demo = request.POST.get("ladder_demo") in ("on", "true", "1", "yes")
    try:
        steps = int_param(request.POST, "ladder_steps", low=1, high=MAX_RUNG_STEPS)
    except BadInteger as e:
        return demo, None, {"ladder_steps": e.reason}
    return demo, steps, {}


def _rungs(
    base: RunConfig, name: str, *, demo_setting: bool, steps: int | None
) -> tuple[list[tuple[str, RunConfig]], dict[str, str]]:
    try:
        rungs = ablation_ladder(base, demo_setting=demo_setting, steps=steps)
    except ConfigError as e:
        changed = set(DEMO_LADDER_SETTING)
        return [], {
            k: f"{m} (in a rung of the ablation ladder, which changes this field"
            + (", or in its demo setting)" if demo_setting and k in changed else ")")
            for k, m in e.errors.items()
        }
    longest = max(len(LADDER_SEP + rung) for rung, _ in rungs)
    if len(name) + longest > 200:
        return [], {"name": f"is too long for the ladder's run names ({200 - longest} characters at most)"}
    return rungs, {}
