"""The memory plan in the platform: the launch checks of a run's model (its family, its memory), and the
plan beside the new-run form.

``dapo.learner.memory_plan`` (torch-free) estimates per-GPU memory from the config and the model's
config.json; here the model folder is found (confined to the model roots, like the launch's path check)
and read.
"""

from __future__ import annotations

from typing import Any

from catalog.models import BaseModel
from catalog.paths import PathError, check_model_path
from core.params import int_or_none
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from dapo.learner.families import check_family
from dapo.learner.memory_plan import PlanError, check_fits, estimate, read_model_config
from dapo.runconfig import ConfigError, RunConfig
from runs import forms

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


@require_POST
def plan_data(request: HttpRequest) -> JsonResponse:
    """The new-run form's fields (as posted) → {"plan": MemoryPlan.to_dict() | null, "reason": why not,
    "checked": whether the launch enforces it (GPU runs)}. Always 200: the form shows the reason."""
    values, errors = forms.parse_post(request.POST)
    if errors:
        return JsonResponse({"plan": None, "reason": "fix the fields marked in the form", "checked": False})
    data: dict[str, Any] = forms.unflatten(values)
    entry = BaseModel.objects.filter(pk=int_or_none(request.POST.get("base_model")) or 0).first()
    if entry is not None:
        data.setdefault("model", {})["path"] = entry.path
    try:
        cfg = RunConfig.from_dict(data)
    except ConfigError as e:
        return JsonResponse({"plan": None, "reason": _first(e.errors), "checked": False})
    try:
        model_config = read_model_config(check_model_path(cfg.model.path))
    except (PathError, OSError, ValueError) as e:
        return JsonResponse({"plan": None, "reason": f"model.path: {str(e)[:200]}", "checked": False})
    if model_config is None:
        return JsonResponse({"plan": None, "reason": "the model folder has no config.json", "checked": False})
    try:
        plan = estimate(cfg, model_config)
    except PlanError as e:
        return JsonResponse({"plan": None, "reason": str(e), "checked": False})
    return JsonResponse({"plan": plan.to_dict(), "reason": "", "checked": cfg.model.device != "cpu"})


def _first(errors: Errors) -> str:
    name, message = next(iter(errors.items()))
    return f"{name}: {message}"[:300]
