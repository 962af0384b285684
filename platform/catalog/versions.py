"""Dataset versions and what a run read.

A dataset is a name with versions 1, 2, ...: each version is a :class:`~catalog.models.Dataset` row with
its own rows and (for an upload) its own files, so an older version stays readable. Each version records,
per split, the SHA-256, size and modification time of the file it imported (``Dataset.files``) and one
``content_hash`` over them.

A run records the data files it read (``Run.data_files``): per config field, the path, the file's SHA-256
and size, and the catalog version whose file has that hash. The web process records what it knows when
the run is queued (a file whose size and modification time match a catalog version's takes that version's
hash, no file is read); the worker records again when an attempt starts, hashing any file it cannot
match that way, so the record is what the trainer actually read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.db.models import Q

from catalog.models import Dataset
from catalog.paths import portable, resolve

CHUNK = 1024 * 1024
DATA_FIELDS = ("data.train_path", "data.val_path")


def file_record(path: Path) -> dict[str, Any]:
    """{"sha256", "bytes", "mtime_ns"} of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    stat = path.stat()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return {"sha256": digest.hexdigest(), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def content_hash(files: Mapping[str, Mapping[str, Any]]) -> str:
    """One SHA-256 over the splits' file hashes: equal for two versions with the same contents."""
    text = ";".join(f"{split}:{files[split]['sha256']}" for split in sorted(files))
    return hashlib.sha256(text.encode()).hexdigest()


def next_version(name: str) -> tuple[str, int]:
    """The spelling a new version of ``name`` takes (an existing dataset's, whatever the case written) and
    its number (1 for a new name)."""
    latest = Dataset.objects.filter(name__iexact=name).order_by("-version").first()
    return (latest.name, latest.version + 1) if latest else (name, 1)


def latest(name: str) -> Dataset | None:
    """The newest version of a dataset name."""
    return Dataset.objects.filter(name=name).order_by("-version").first()


def config_files(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, path) of every data file a run config reads: train, validation and further validation."""
    data = config.get("data", {}) if isinstance(config, Mapping) else {}
    out = [(f, str(data.get(f.split(".")[1]) or "")) for f in DATA_FIELDS]
    out += [("data.val_paths", str(p)) for p in data.get("val_paths") or []]
    return [(field, path) for field, path in out if path]


def data_record(config: Mapping[str, Any], *, read_files: bool) -> list[dict[str, Any]]:
    """What a run reads: [{"field", "path", "sha256", "bytes", "dataset": {"id", "name", "version",
    "split"} | None}], one entry per data file of the config. ``read_files`` hashes a file that matches
    no catalog version by size and modification time (the worker); without it its sha256 is None."""
    record = []
    for field, path in config_files(config):
        entry: dict[str, Any] = {"field": field, "path": path, "sha256": None, "bytes": None, "dataset": None}
        try:
            resolved = resolve(path)
            stat = resolved.stat()
        except (OSError, ValueError):
            record.append({**entry, "missing": True})
            continue
        entry["bytes"] = stat.st_size
        known = _matching_version(resolved, stat.st_size, stat.st_mtime_ns)
        if known is not None:
            entry["sha256"] = known[0].files[known[1]]["sha256"]
        elif read_files:
            try:
                entry["sha256"] = file_record(resolved)["sha256"]
            except OSError:
                record.append({**entry, "missing": True})
                continue
            known = _version_with_hash(entry["sha256"], portable(resolved))
        if known is not None:
            dataset, split = known
            entry["dataset"] = {
                "id": dataset.pk,
                "name": dataset.name,
                "version": dataset.version,
                "split": split,
            }
        record.append(entry)
    return record


def _matching_version(path: Path, size: int, mtime_ns: int) -> tuple[Dataset, str] | None:
    """The newest catalog version that imported this very file, unchanged since (same size and mtime)."""
    where = portable(path)
    for dataset in Dataset.objects.filter(Q(path=where) | Q(val_path=where)).order_by("-version", "-pk"):
        for split in ("train", "val"):
            info = (dataset.files or {}).get(split)
            if (
                _split_path(dataset, split) == where
                and info
                and (info["bytes"], info["mtime_ns"])
                == (
                    size,
                    mtime_ns,
                )
            ):
                return dataset, split
    return None


def _version_with_hash(sha256: str, where: str) -> tuple[Dataset, str] | None:
    """A catalog version whose file has this hash, the one at the same path first, else the newest."""
    found = Dataset.objects.filter(Q(files__train__sha256=sha256) | Q(files__val__sha256=sha256))
    best = None
    for dataset in found.order_by("-version", "-pk"):
        for split in ("train", "val"):
            info = (dataset.files or {}).get(split)
            if info and info["sha256"] == sha256:
                if _split_path(dataset, split) == where:
                    return dataset, split
                best = best or (dataset, split)
    return best


def _split_path(dataset: Dataset, split: str) -> str:
    """The file of a split ("train" or "val"); empty for a missing validation split."""
    return dataset.path if split == "train" else dataset.val_path
