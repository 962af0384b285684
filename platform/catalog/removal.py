"""Deleting a dataset version: refused while a queued or running run reads it, allowed to its creator and
to administrators. Its rows go, and an uploaded version's folder under ``DAPO_VAR_DIR/datasets/`` goes
with it; a registered version's files were never ours and stay where they are. Runs that used it keep
their curves, samples and their record of what they read (``Run.data_files``: name, version, hash).
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Any

from django.db import transaction
from runs.models import Run, Status

from catalog.importer import uploads_dir
from catalog.models import Dataset
from catalog.paths import resolve
from catalog.versions import config_files

log = logging.getLogger(__name__)


class DeleteRefused(Exception):
    """The dataset was not deleted; the message says why and what to do."""

    def __init__(self, message: str, *, status: int = 409) -> None:
        super().__init__(message)
        self.status = status


def active_runs_using(dataset: Dataset) -> list[Run]:
    """Queued and running runs (anyone's) that read one of this version's files or picked it."""
    files = {resolve(p) for p in (dataset.path, dataset.val_path) if p}
    active = Run.objects.filter(status__in=[Status.QUEUED, Status.RUNNING]).select_related("owner")
    using = []
    for run in active.order_by("id"):
        if run.dataset_id == dataset.pk or any(
            entry.get("dataset") and entry["dataset"].get("id") == dataset.pk
            for entry in run.data_files or []
        ):
            using.append(run)
            continue
        try:
            if any(resolve(path) in files for _, path in config_files(run.config or {})):
                using.append(run)
        except (OSError, ValueError):  # a path this machine cannot resolve is not this dataset's
            continue
    return using


def may_delete(dataset: Dataset, user: Any) -> bool:
    return bool(user.is_superuser or (dataset.created_by_id and dataset.created_by_id == user.pk))


def not_allowed(dataset: Dataset) -> str:
    """Why a user who is neither the creator nor an administrator may not delete the version."""
    owner = dataset.created_by.get_username() if dataset.created_by else "the command line"
    return f"{dataset.label} was added by {owner}: only they or an administrator may delete it"


def delete_dataset(dataset: Dataset, user: Any) -> str:
    """Delete one version (rows, and an upload's files); the message to show. Raises DeleteRefused."""
    if not may_delete(dataset, user):
        raise DeleteRefused(not_allowed(dataset), status=403)
    folder = _upload_folder(dataset)
    parked = folder.with_name(f".deleting-{folder.name}-{int(time.time())}") if folder else None
    if folder and parked and folder.is_dir():
        folder.rename(parked)  # out of reach first; put back if the database refuses
    try:
        with transaction.atomic():
            locked = Dataset.objects.select_for_update().filter(pk=dataset.pk).first()
            if locked is None:
                raise DeleteRefused(f"{dataset.label} was already deleted", status=404)
            _refuse_if_used(locked, user)
            locked.delete()
    except BaseException:
        if folder and parked and parked.is_dir():
            parked.rename(folder)
        raise
    if parked is not None and parked.exists():
        shutil.rmtree(parked, ignore_errors=True)
        if parked.exists():
            log.warning("dataset %s: could not remove %s", dataset.pk, parked)
    kept = "" if folder else " Its files were registered from the server and stay where they are."
    return f"Deleted {dataset.label} and its {dataset.row_count:,} problems.{kept}"


def _refuse_if_used(dataset: Dataset, user: Any) -> None:
    runs = active_runs_using(dataset)
    if not runs:
        return
    visible = [r for r in runs if user.is_superuser or r.owner_id == user.pk]
    named = [f"#{r.pk} {r.name!r} ({r.status})" for r in visible[:5]]
    others = len(runs) - len(visible)
    if others:
        named.append(f"{others} run{'s' if others > 1 else ''} of other users")
    raise DeleteRefused(
        f"{dataset.label} is in use by {len(runs)} queued or running run{'s' if len(runs) > 1 else ''}: "
        f"{', '.join(named)}. Cancel them or wait until they finish; nothing was deleted."
    )


def _upload_folder(dataset: Dataset) -> Path | None:
    """An uploaded version's own folder (DAPO_VAR_DIR/datasets/<id>-<name>/), None for a registered one."""
    if not dataset.uploaded or not dataset.path:
        return None
    folder = resolve(dataset.path).parent
    root = uploads_dir().resolve()
    if folder.parent != root or not folder.name.startswith(f"{dataset.pk}-"):
        return None  # not the layout the importer writes: never remove anything else
    return folder
