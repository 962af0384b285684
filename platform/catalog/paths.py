"""Paths of models and data files: resolved against the repository root; models, and datasets registered
from the web, confined to their roots (settings.DAPO_MODEL_ROOTS, settings.DAPO_DATASET_ROOTS)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings


class PathError(ValueError):
    """A path that may not be used; the message says why and what is allowed."""


def resolve(path: str) -> Path:
    """An absolute path; relative paths are taken from the repository root (where the presets point)."""
    p = Path(path).expanduser()
    return (p if p.is_absolute() else Path(settings.BASE_DIR) / p).resolve()


def portable(path: Path) -> str:
    """The path relative to the repository root when it lies inside it, else absolute."""
    try:
        return str(path.relative_to(Path(settings.BASE_DIR).resolve()))
    except ValueError:
        return str(path)


DATASET_SUFFIXES = (".parquet", ".jsonl", ".json")


def _confined(path: str, roots: list[Path], what: str, setting: str) -> Path:
    """The resolved path (symlinks and ``..`` followed) if it lies inside one of ``roots``; else PathError."""
    if "\x00" in path:
        raise PathError("contains a NUL character")
    resolved = resolve(path)
    roots = [Path(r).resolve() for r in roots]
    if not any(resolved == r or r in resolved.parents for r in roots):
        allowed = ", ".join(str(r) for r in roots)
        raise PathError(f"must be inside one of the {what} roots ({allowed}); set {setting} to add one")
    return resolved


def check_model_path(path: str) -> Path:
    """The resolved model directory, if it lies inside a model root and exists; else PathError."""
    resolved = _confined(path, settings.DAPO_MODEL_ROOTS, "model", "DAPO_MODEL_ROOTS")
    if not resolved.is_dir():
        raise PathError(f"no model directory at {resolved}")
    return resolved


def check_data_path(path: str, *, required: bool) -> Path | None:
    """The resolved data file, if it exists (an empty optional path gives None); else PathError."""
    if not path.strip():
        if required:
            raise PathError("must name a dataset file")
        return None
    if "\x00" in path:
        raise PathError("contains a NUL character")
    resolved = resolve(path)
    if not resolved.is_file():
        raise PathError(f"no file at {resolved}")
    return resolved


def check_dataset_path(path: str, *, required: bool) -> Path | None:
    """A data file inside one of the dataset roots, as the web may register it (an empty optional path
    gives None); else PathError."""
    if not path.strip():
        if required:
            raise PathError("must name a dataset file")
        return None
    resolved = _confined(path.strip(), settings.DAPO_DATASET_ROOTS, "dataset", "DAPO_DATASET_ROOTS")
    if resolved.suffix.lower() not in DATASET_SUFFIXES:
        raise PathError(f"must be a {', '.join(DATASET_SUFFIXES)} file, got {resolved.name!r}")
    if not resolved.is_file():
        raise PathError(f"no file at {resolved}")
    return resolved
