"""Register local models and datasets in the catalog, reading their metadata without torch."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

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
    """Create or update the catalog entry of a dataset's files (idempotent by name)."""
    train = check_data_path(train_path, required=True)
    assert train is not None
    val = check_data_path(val_path, required=False)
    train_rows, schema = describe_file(train)
    splits = {"train": train_rows}
    if val is not None:
        splits["val"] = describe_file(val)[0]
    dataset, _ = Dataset.objects.update_or_create(
        name=name,
        defaults={
            "path": portable(train),
            "val_path": portable(val) if val is not None else "",
            "format": train.suffix.lstrip(".").lower() or "parquet",
            "row_count": sum(splits.values()),
            "splits": splits,
            "schema": schema,
            "description": description,
        },
    )
    return dataset


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


def describe_file(path: Path) -> tuple[int, dict[str, str]]:
    """(row count, {column: type}) of a parquet, JSONL or JSON file."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # lazy: only the management command and the catalog pages need it

        meta = pq.read_metadata(path)
        schema = meta.schema.to_arrow_schema()
        return meta.num_rows, {f.name: str(f.type) for f in schema}
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    else:
        rows = json.loads(path.read_text(encoding="utf-8"))
    first: Any = rows[0] if rows else {}
    return len(rows), {k: type(v).__name__ for k, v in first.items()} if isinstance(first, dict) else {}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
