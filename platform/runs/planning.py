"""The memory plan in the platform: the launch checks of a run's model (its family, its memory) and of
what it asks for (CPUs, GPUs) against the cluster, and the plan beside the new-run form.

``dapo.learner.memory_plan`` (torch-free) estimates per-GPU memory from the config and the model's
config.json; here the model folder is found (confined to the model roots, like the launch's path check)
and read. ``dapo.cluster.resources`` says what the run asks for; ``runs.models.ClusterCapacity`` is what
a training worker last saw of the machine or Ray cluster (none yet: nothing is checked, the run launches).
"""

from __future__ import annotations

from typing import Any

from catalog.models import BaseModel
from catalog.paths import PathError, check_model_path
from core.params import int_or_none
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from dapo.cluster.resources import request_for
from dapo.learner.families import check_family
from dapo.learner.memory_plan import PlanError, check_fits, estimate, read_model_config
from dapo.runconfig import ConfigError, RunConfig
from runs import forms
from runs.models import ClusterCapacity

Errors = dict[str, str]


def model_errors(cfg: RunConfig) -> Errors:
    """{setting: message} when the run's model cannot be trained (``dapo.learner.families``: not a causal
    LM) or a GPU run cannot fit ``execution.gpu_memory_gb``; {} when it can and fits, runs on the CPU, or
    its model folder has no readable config.json (the path check reports a bad folder)."""
    try:
        model_config = read_model_config(check_model_path(cfg.model.path))
    except (PathError, OSError, ValueError):
        return {}
    try:
        check_family(model_config)
        check_fits(cfg, model_config)
    except ConfigError as e:
        return e.errors
    return {}


NOT_CHECKED = (
    "No worker has recorded the {kind} cluster yet (it does when it starts a run), so this run is not "
    "checked against it: it launches."
)


def capacity_errors(cfg: RunConfig) -> Errors:
    """{setting: what is missing and the fix} when the last recorded capacity of the run's backend can never
    hold what it asks for; {} when it can, or when no worker has recorded one yet."""
    seen = ClusterCapacity.latest(cfg.execution.backend)
    if seen is None:
        return {}
    capacity, at = seen
    return request_for(cfg).errors(capacity, seen=f"{at:%Y-%m-%d %H:%M} UTC")


def resources_data(cfg: RunConfig, model_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the run asks for (``ResourceRequest.to_dict``: "text", the bundles, totals, memory per GPU) and
    how it stands against the last recorded capacity: "capacity" (its description, or None), "seen_at",
    "shortfall" (the reasons it can never be held; the launch refuses it), "note" (a sentence to show)."""
    request = request_for(cfg, model_config)
    out = request.to_dict()
    seen = ClusterCapacity.latest(cfg.execution.backend)
    if seen is None:
        kind = "Ray" if cfg.execution.backend == "ray" else "local"
        return out | {
            "capacity": None,
            "seen_at": None,
            "shortfall": [],
            "note": NOT_CHECKED.format(kind=kind),
        }
    capacity, at = seen
    shortfall = request.shortfall(capacity)
    verdict = f"Launch refused: {'; '.join(shortfall)}." if shortfall else "It fits."
    note = f"{capacity.describe()}, seen {at:%Y-%m-%d %H:%M} UTC. {verdict}"
    return out | {
        "capacity": capacity.describe(),
        "seen_at": at.isoformat(),
        "shortfall": shortfall,
        "note": note,
    }


def readable_model_config(cfg: RunConfig) -> dict[str, Any] | None:
    """The run's model config.json when its folder lies in the roots and has one; else None."""
    try:
        return read_model_config(check_model_path(cfg.model.path))
    except (PathError, OSError, ValueError):
        return None


@require_POST
def plan_data(request: HttpRequest) -> JsonResponse:
    """The new-run form's fields (as posted) → {"plan": MemoryPlan.to_dict() | null, "reason": why not,
    "checked": whether the launch enforces it (GPU runs), "resources": ``resources_data`` | null}. Always
    200: the form shows the reason."""
    values, errors = forms.parse_post(request.POST)
    if errors:
        return JsonResponse(
            {"plan": None, "reason": "fix the fields marked in the form", "checked": False, "resources": None}
        )
    data: dict[str, Any] = forms.unflatten(values)
    entry = BaseModel.objects.filter(pk=int_or_none(request.POST.get("base_model")) or 0).first()
    if entry is not None:
        data.setdefault("model", {})["path"] = entry.path
    try:
        cfg = RunConfig.from_dict(data)
    except ConfigError as e:
        return JsonResponse({"plan": None, "reason": _first(e.errors), "checked": False, "resources": None})
    body = {"plan": None, "checked": False, "resources": resources_data(cfg, readable_model_config(cfg))}
    try:
        model_config = read_model_config(check_model_path(cfg.model.path))
    except (PathError, OSError, ValueError) as e:
        return JsonResponse(body | {"reason": f"model.path: {str(e)[:200]}"})
    if model_config is None:
        return JsonResponse(body | {"reason": "the model folder has no config.json"})
    try:
        plan = estimate(cfg, model_config)
    except PlanError as e:
        return JsonResponse(body | {"reason": str(e)})
    return JsonResponse(body | {"plan": plan.to_dict(), "reason": "", "checked": cfg.model.device != "cpu"})


def _first(errors: Errors) -> str:
    name, message = next(iter(errors.items()))
    return f"{name}: {message}"[:300]
