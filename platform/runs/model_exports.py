"""Exporting a run's checkpoint as a HuggingFace model folder, registered in the model catalog.

The web process validates the request (a checkpoint of the run that is still on disk, a free catalog
name) and queues ``worker.tasks.export_model``; the worker (which may import torch) writes the folder with
``dapo.learner.export`` under a model root and registers it as a ``catalog.BaseModel``, so a new run or an
evaluation can start from it. Lifecycle: queued → running → done | failed (with the reason).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from catalog.models import BaseModel
from django.db import transaction

from runs import dispatch
from runs.configuring import validate_name
from runs.models import ExportStatus, ModelExport

Errors = dict[str, str]


def steps_on_disk(run: Any) -> list[int]:
    """Steps of the run's recorded checkpoints whose weights are still on disk (not pruned), ascending."""
    return [c.step for c in run.checkpoints.order_by("step") if (Path(c.path) / "state.pt").is_file()]


def request_export(
    run: Any, user: Any, step: Any = None, name: Any = None
) -> tuple[ModelExport | None, Errors]:
    """Validate and queue an export of ``run`` at ``step`` (None: its newest checkpoint on disk) named
    ``name`` in the catalog (None: "<run name> step <N>"). Returns the export, or None and the errors.
    A run deleted meanwhile raises ``RunGone`` (404), rather than "no checkpoint on disk"."""
    run.reload()
    steps = steps_on_disk(run)
    if not steps:
        return None, {"step": "the run has no checkpoint on disk to export"}
    if step is None:
        step = steps[-1]
    elif isinstance(step, str) and step.strip().isascii() and step.strip().isdigit():
        step = int(step.strip())  # a form's field
    if isinstance(step, bool) or not isinstance(step, int):
        return None, {"step": f"must be an integer step; steps on disk: {_listed(steps)}"}
    if step not in steps:
        return None, {"step": f"no checkpoint of step {step} on disk; steps on disk: {_listed(steps)}"}
    if name is None or (isinstance(name, str) and not name.strip()):
        name = f"{run.name} step {step}"[:200]
    errors = validate_name(name)
    if errors:
        return None, errors
    name = name.strip()
    taken = ModelExport.objects.filter(name=name).exclude(status=ExportStatus.FAILED).exists()
    if taken or BaseModel.objects.filter(name=name).exists():
        return None, {"name": f"a model named {name!r} is already in the catalog (or being exported)"}
    with transaction.atomic():
        type(run).lock(run.pk)  # deleted meanwhile: a 404 (runs.models.RunGone), no export of nothing
        export = ModelExport.objects.create(run=run, step=step, name=name, requested_by=user)
        dispatch.on_commit("export_model", export.pk)
    return export, {}


def _listed(steps: list[int]) -> str:
    return ", ".join(map(str, steps[-20:])) + (f" (and {len(steps) - 20} older)" if len(steps) > 20 else "")
