"""Register local models and datasets in the catalog, reading their metadata (and rows) without torch."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from catalog.importer import SplitFile, fingerprint, import_dataset
from catalog.models import BaseModel, Dataset
from catalog.paths import check_data_path, check_model_path, portable

_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1}


def register_model(name: str, path: str, description: str = "") -> BaseModel:
    """Create or update the catalog entry of a model directory (idempotent by name)."""
    resolved = check_model_path(path)
    config = _read_json(resolved / "config.json")
    architecture = ", ".join(config.get("architectures") or []) or str(config.get("model_type", ""))
    model, _ = BaseModel.objects.update_or_create(
        name=name,
        defaults={
            "path": portable(resolved),
            "architecture": architecture,
            "parameter_count": count_parameters(resolved),
            "description": description,
        },
    )
    return model


def register_dataset(name: str, train_path: str, val_path: str = "", description: str = "") -> Dataset:
    """Create or update the catalog entry of a dataset's files and import its rows (idempotent by name).

    Files unchanged since the last import (same paths, sizes and modification times) are not read again,
    so ``bootstrap`` at every start costs nothing. Raises PathError, or ImportFailed naming the bad row.
    """
    train = check_data_path(train_path, required=True)
    assert train is not None
    val = check_data_path(val_path, required=False)
    files = [SplitFile("train", train, portable(train))]
    if val is not None:
        files.append(SplitFile("val", val, portable(val)))
    existing = Dataset.objects.filter(name=name).first()
    if existing is not None and _unchanged(existing, files):
        if existing.description != description:
            existing.description = description
            existing.save(update_fields=["description"])
        return existing
    return import_dataset(name, files, description=description, replace=existing)


def _unchanged(dataset: Dataset, files: list[SplitFile]) -> bool:
    paths = {f.split: portable(f.path) for f in files}
    return (
        (dataset.path, dataset.val_path) == (paths["train"], paths.get("val", ""))
        and dataset.fingerprint == fingerprint(f.path for f in files)
        and dataset.rows.exists()
    )


def count_parameters(model_dir: Path) -> int:
    """Parameters in the directory's safetensors files, from their headers (no weights are loaded)."""
    total = 0
    for file in sorted(model_dir.glob("*.safetensors")):
        with file.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for key, tensor in header.items():
            if key != "__metadata__":
                n = 1
                for dim in tensor["shape"]:
                    n *= dim
                total += n
    return total


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
