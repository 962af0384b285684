"""Dataset versions and what a run read.

A dataset is an owner's name with versions 1, 2, ...: each version is a :class:`~catalog.models.Dataset`
row with its own rows and (for an upload) its own files, so an older version stays readable. Names are
compared case-folded (``catalog.models.name_key``) and belong to their owner: another user's upload of the
same name is that user's own dataset. :func:`find_dataset` is how a run, an evaluation or the API turns a
name into one version without ever taking another user's dataset by surprise. Each version records,
per split, the SHA-256, size and modification time of the file it imported (``Dataset.files``) and one
``content_hash`` over them.

A run records the data files it read (``Run.data_files``): per config field, the path, the file's SHA-256
and size, and the catalog version whose file has that hash (the version the run picked, when it picked
one and the file is that version's). The web process records what it knows when
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

from catalog.models import Dataset, name_key
from catalog.paths import portable, resolve
from dapo.runconfig import ConfigError, RunConfig

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


def next_version(name: str, owner: Any) -> tuple[str, int]:
    """The spelling a new version of ``owner``'s ``name`` takes (their existing dataset's, whatever the
    case written) and its number (1 for a name new to them). ``owner`` None: the server's names."""
    newest = latest(name, owner)
    return (newest.name, newest.version + 1) if newest else (name, 1)


def latest(name: str, owner: Any) -> Dataset | None:
    """The newest version of ``owner``'s dataset of this name (any case); None: the server's names."""
    return Dataset.objects.lines(name, _owner_id(owner)).order_by("-version").first()


class AmbiguousName(LookupError):
    """A name several other users' datasets have: the message lists them and asks for an id."""


def find_dataset(raw: Any, user: Any) -> Dataset | None:
    """The version a run or an evaluation means by ``raw``: an id (an int) is that version, whoever owns
    it. A name (any case) is the newest version of, in this order, the user's own dataset of
    that name, the server's (registered by the command line), or the one other user's who has it; several
    other users: AmbiguousName. None when nothing matches."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return Dataset.objects.filter(pk=raw).first() if 0 < raw < 2**63 else None
    if not isinstance(raw, str) or not raw.strip() or "\x00" in raw:
        return None
    named = Dataset.objects.filter(name_key=name_key(raw)).select_related("created_by")
    for mine in (named.filter(created_by_id=user.pk), named.filter(created_by__isnull=True)):
        if found := mine.order_by("-version").first():
            return found
    owners = sorted({d.owner_label for d in named})
    if len(owners) > 1:
        listed = ", ".join(owners[:5])
        raise AmbiguousName(
            f"several users have a dataset named {raw.strip()!r} ({listed}): give the id of the version "
            f"you mean (GET /api/datasets/?name=... lists them)"
        )
    return named.order_by("-version").first()


def _owner_id(owner: Any) -> int | None:
    return None if owner is None else int(owner.pk)


def config_files(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, path) of every data file a run config reads (``RunConfig.file_paths``, the model folder
    left out); none for a config that no longer validates (a run of an older version)."""
    try:
        paths = RunConfig.from_dict(dict(config)).file_paths()
    except (ConfigError, TypeError, ValueError):
        return []
    return [(field, path) for field, path in paths if field.startswith("data.") and path]


def data_record(
    config: Mapping[str, Any], *, read_files: bool, picked: Dataset | None = None
) -> list[dict[str, Any]]:
    """What a run reads: [{"field", "path", "sha256", "bytes", "dataset": {"id", "name", "version",
    "split", "owner"} | None}], one entry per data file of the config. A file of the ``picked`` version is
    recorded as that version when its content is the version's; otherwise the catalog version that
    imported the file is looked up. ``read_files`` hashes a file that matches no version by size and
    modification time (the worker); without it its sha256 is None. A picked version's file whose content
    changed since its import is marked ``"changed": True`` (the worker refuses to train on it)."""
    return [_entry(field, path, read_files, picked) for field, path in config_files(config)]


def changed_files(record: list[dict[str, Any]]) -> list[str]:
    """The fields whose file no longer holds the picked version's content."""
    return [entry["field"] for entry in record if entry.get("changed")]


def _entry(field: str, path: str, read_files: bool, picked: Dataset | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"field": field, "path": path, "sha256": None, "bytes": None, "dataset": None}
    try:
        resolved = resolve(path)
        stat = resolved.stat()
    except (OSError, ValueError):
        return {**entry, "missing": True}
    entry["bytes"] = stat.st_size
    split = _picked_split(picked, resolved) if field in DATA_FIELDS else None
    if picked is not None and split is not None:
        info = (picked.files or {}).get(split) or {}
        known: tuple[Dataset, str] | None = None
        if (info.get("bytes"), info.get("mtime_ns")) == (stat.st_size, stat.st_mtime_ns):
            entry["sha256"] = info["sha256"]
            known = (picked, split)
        elif read_files:
            entry["sha256"] = _hash(resolved)
            if entry["sha256"] is None:
                return {**entry, "missing": True}
            known = (picked, split) if entry["sha256"] == info.get("sha256") else None
            entry["changed"] = known is None
        return {**entry, "dataset": _described(known)}
    known = _matching_version(resolved, stat.st_size, stat.st_mtime_ns)
    if known is not None:
        entry["sha256"] = known[0].files[known[1]]["sha256"]
    elif read_files:
        entry["sha256"] = _hash(resolved)
        if entry["sha256"] is None:
            return {**entry, "missing": True}
        known = _version_with_hash(entry["sha256"], portable(resolved))
    return {**entry, "dataset": _described(known)}


def _picked_split(picked: Dataset | None, resolved: Path) -> str | None:
    """Which split of the picked version this file is ("train", "val"), or None."""
    if picked is None:
        return None
    for split in ("train", "val"):
        where = _split_path(picked, split)
        try:
            if where and resolve(where) == resolved:
                return split
        except (OSError, ValueError):
            continue
    return None


def _hash(path: Path) -> str | None:
    try:
        return str(file_record(path)["sha256"])
    except OSError:
        return None


def _described(known: tuple[Dataset, str] | None) -> dict[str, Any] | None:
    if known is None:
        return None
    dataset, split = known
    owner = dataset.created_by.get_username() if dataset.created_by_id and dataset.created_by else None
    return {
        "id": dataset.pk,
        "name": dataset.name,
        "version": dataset.version,
        "split": split,
        "owner": owner,
    }


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
