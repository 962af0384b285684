"""Register local models and datasets in the catalog, reading their metadata (and rows) without torch."""

from __future__ import annotations

from typing import Any

from catalog.importer import SplitFile, fingerprint, import_dataset
from catalog.model_info import check_model, inspect_model
from catalog.models import BaseModel, Dataset
from catalog.paths import check_data_path, check_model_path, portable
from catalog.versions import content_hash, file_record, latest


def register_model(
    name: str, path: str, description: str = "", *, strict: bool = False, created_by: Any = None
) -> BaseModel:
    """Create or update the catalog entry of a model directory (idempotent by name), with the details
    ``catalog.model_info`` reads from it. ``strict`` (the browser and the API) refuses a folder a run could
    not load (ModelCheckError naming each problem); otherwise its problems are recorded in the details."""
    resolved = check_model_path(path)
    details = check_model(resolved) if strict else inspect_model(resolved)
    architecture = ", ".join(details["architectures"]) or details["model_type"]
    defaults: dict[str, Any] = {
        "path": portable(resolved),
        "architecture": architecture[:200],
        "parameter_count": details["parameters"],
        "description": description,
        "details": details,
    }
    if created_by is not None:
        defaults["created_by"] = created_by
    model, _ = BaseModel.objects.update_or_create(name=name, defaults=defaults)
    return model


def register_dataset(name: str, train_path: str, val_path: str = "", description: str = "") -> Dataset:
    """Register a dataset's files under ``name`` (the server's names: no owner) and import their rows
    (idempotent; the name is compared case-folded, as everywhere).

    Files unchanged since the newest version's import (same paths, sizes and modification times) are not
    read again, so ``bootstrap`` at every start costs nothing; files with the same contents (a touched
    file) only refresh that version's record. Changed files become the next version; the older versions
    keep their rows. Raises PathError, or ImportFailed naming the bad row.
    """
    train = check_data_path(train_path, required=True)
    assert train is not None
    val = check_data_path(val_path, required=False)
    files = [SplitFile("train", train, portable(train))]
    if val is not None:
        files.append(SplitFile("val", val, portable(val)))
    existing = latest(name, None)
    if existing is not None and _same_paths(existing, files) and existing.rows.exists():
        if existing.fingerprint != fingerprint(f.path for f in files) or not existing.files:
            records = {f.split: file_record(f.path) for f in files}
            if content_hash(records) != existing.content_hash:
                return import_dataset(name, files, description=description)
            existing.files, existing.fingerprint = records, fingerprint(f.path for f in files)
        existing.description = description
        existing.save(update_fields=["files", "fingerprint", "description"])
        return existing
    if existing is not None and not existing.rows.exists():  # registered before rows were imported
        return import_dataset(name, files, description=description, replace=existing)
    return import_dataset(name, files, description=description)


def _same_paths(dataset: Dataset, files: list[SplitFile]) -> bool:
    paths = {f.split: portable(f.path) for f in files}
    return (dataset.path, dataset.val_path) == (paths["train"], paths.get("val", ""))
