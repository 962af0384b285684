"""The paper's ablation ladder (dapo.presets.ablation_ladder) launched as one run group.

POST /runs/new/ladder/   the new-run form's config as the base of six ablation runs, then their comparison
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from catalog.models import BaseModel, Dataset
from config.params import int_or_none
from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST
from runs import forms
from runs.configuring import build_config, validate_name
from runs.models import Run
from runs.views import render_new

from dapo.config import ConfigError, RunConfig
from dapo.presets import ablation_ladder

LADDER_SEP = " · "


@require_POST
def launch_ladder(request: HttpRequest) -> HttpResponse:
    """The six rungs of dapo.presets.ablation_ladder on the form's config, queued as one group in one
    transaction (all or none), then their comparison. Errors come back on the form, like a single run's.
    The first post only shows the six runs it would queue, on the form, with a button that confirms."""
    values, errors = forms.parse_post(request.POST)
    name = request.POST.get("name", "").strip()
    base, config_errors = (None, {}) if errors else build_config(config=forms.unflatten(values))
    errors = {**validate_name(name), **errors, **config_errors}
    rungs: list[tuple[str, RunConfig]] = []
    if base is not None and not errors:
        rungs, errors = _rungs(base, name)
    preset = request.POST.get("preset", "")
    if errors:
        messages.error(request, "The ablation ladder was not queued: fix the fields marked below.")
        return render_new(request, values, errors, preset=preset, name=name, parent=None, status=400)
    if request.POST.get("ladder_confirm") != "yes":  # six runs from one click: say which, ask once more
        names = [f"{name}{LADDER_SEP}{rung}" for rung, _ in rungs]
        return render_new(request, values, {}, preset=preset, name=name, parent=None, ladder_runs=names)
    picks = {
        "base_model": BaseModel.objects.filter(pk=int_or_none(request.POST.get("base_model")) or 0).first(),
        "dataset": Dataset.objects.filter(pk=int_or_none(request.POST.get("dataset")) or 0).first(),
    }
    group = free_group(request.user, name)
    with transaction.atomic():
        for rung, config in rungs:
            Run.create_queued(
                owner=request.user,
                name=f"{name}{LADDER_SEP}{rung}",
                config=config,
                preset=rung,
                group=group,
                **picks,
            )
    return redirect(f"{reverse('compare:compare')}?{urlencode({'group': group})}")


def _rungs(base: RunConfig, name: str) -> tuple[list[tuple[str, RunConfig]], dict[str, str]]:
    try:
        rungs = ablation_ladder(base)
    except ConfigError as e:
        return [], {
            k: f"{m} (in a rung of the ablation ladder, which changes this field)"
            for k, m in e.errors.items()
        }
    longest = max(len(LADDER_SEP + rung) for rung, _ in rungs)
    if len(name) + longest > 200:
        return [], {"name": f"is too long for the ladder's run names ({200 - longest} characters at most)"}
    return rungs, {}


def free_group(user: Any, name: str) -> str:
    """``name``, or ``name (2)``, ``name (3)``...: a ladder (or a sweep, runs.sweep_views) never joins an
    older group of the same name."""
    taken = set(Run.objects.filter(owner=user, group__startswith=name).values_list("group", flat=True))
    group, k = name, 1
    while group in taken:
        k += 1
        group = f"{name} ({k})"
    return group
