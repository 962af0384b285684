"""The worker's side of "Export model": write a run's checkpoint as a HuggingFace folder under a model
root (``dapo.learner.export``) and register it in the catalog, so a new run or an evaluation can start
from it.

The folder is ``<export root>/run<id>-step<N>-<export id>``. The export root is the worker's
``DAPO_EXPORT_DIR`` when set (a folder inside a model root), else ``exports/`` under the model root that
lies inside ``DAPO_VAR_DIR`` (``var/models`` by default), else under the last model root: the catalog
only accepts model folders inside a model root.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from catalog.models import BaseModel
from catalog.paths import resolve
from catalog.registry import register_model
from config.celery import app
from django.conf import settings
from runs.models import Checkpoint, ExportStatus, ModelExport

from dapo.runconfig import RunConfig
from worker.sink import DB_ERRORS, with_db_retry

log = logging.getLogger(__name__)


def export_root() -> Path:
    configured = getattr(settings, "DAPO_EXPORT_DIR", None) or os.environ.get("DAPO_EXPORT_DIR")
    if configured:
        return Path(configured)
    roots = [Path(r).resolve() for r in settings.DAPO_MODEL_ROOTS]
    if not roots:
        raise RuntimeError("no model root to export into: set DAPO_MODEL_ROOTS")
    var = Path(settings.DAPO_VAR_DIR).resolve()
    under_var = [r for r in roots if r == var or var in r.parents]
    return (under_var or roots[-1:])[0] / "exports"


@app.task(bind=True, name="worker.tasks.export_model")
def export_model(self, export_id: int) -> str:
    """Export one queued ModelExport; its row ends done (with the catalog entry) or failed (with why)."""
    try:
        export = with_db_retry(
            lambda: ModelExport.objects.select_related("run").filter(pk=export_id).first(),
            f"loading export {export_id}",
        )
        if export is None or not with_db_retry(export.claim, f"claiming export {export_id}"):
            return "nothing to do"
    except DB_ERRORS as e:
        raise self.retry(exc=e, countdown=settings.DAPO_REAPER_INTERVAL_S, max_retries=None) from e
    out = export_root() / f"run{export.run_id}-step{export.step}-{export.pk}"
    try:
        model = _export(export, out)
    except Exception as e:  # the reason goes on the run page; the worker goes on
        log.exception("export %s of run %s failed", export.pk, export.run_id)
        shutil.rmtree(out, ignore_errors=True)  # registration is the last step: nothing refers to it
        export.finish(ExportStatus.FAILED, error=f"{type(e).__name__}: {e}")
        return "failed"
    export.finish(ExportStatus.DONE, path=model.path, base_model=model)
    return "done"


def _export(export: ModelExport, out: Path) -> BaseModel:
    from dapo.learner.export import export as write_folder  # imports torch: only in the worker, only here

    run = export.run
    checkpoint = Checkpoint.objects.filter(run=run, step=export.step).first()
    if checkpoint is None:
        raise FileNotFoundError(f"run {run.pk} has no recorded checkpoint of step {export.step}")
    result = write_folder(
        Path(checkpoint.path).parent.parent,  # <run dir>/checkpoints/step_000010
        out,
        step=export.step,
        model_path=resolve(RunConfig.from_dict(run.config).model.path),
    )
    if BaseModel.objects.filter(name=export.name).exists():
        raise ValueError(f"a model named {export.name!r} was registered meanwhile; export again, named anew")
    description = f"Exported from run #{run.pk} {run.name} at step {result.step}."
    return register_model(export.name, str(result.out_dir), description)
