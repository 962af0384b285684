"""Paths of models and data files: resolved against the repository root and confined to their roots
(settings.DAPO_MODEL_ROOTS, settings.DAPO_DATASET_ROOTS): every file a run reads, and every file the web
registers, lies inside one of them."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings


class PathError(ValueError):
    """A path that may not be used; the message says why and what is allowed."""


def resolve(path: str) -> Path:
    """An absolute path; relative paths are taken from the repository root (where the presets point)."""
    return _absolute(path).resolve()


def same_file(a: str, b: str) -> bool:
    """Whether two paths as written name the same file (relative ones from the repository root, links
    followed); an empty path is the same only as another empty one."""
    if not a or not b:
        return a == b
    try:
        return a == b or resolve(a) == resolve(b)
    except (OSError, RuntimeError, ValueError):  # a NUL, a name too long, a link loop
        return False


def portable(path: Path) -> str:
    """The path relative to the repository root when it lies inside it, else absolute."""
    try:
        return str(path.relative_to(Path(settings.BASE_DIR).resolve()))
    except ValueError:
        return str(path)


DATASET_SUFFIXES = (".parquet", ".jsonl", ".json")


def _confined(path: str, roots: list[Path], what: str, setting: str) -> Path:
    """The resolved path (symlinks and ``..`` followed) if it lies inside one of ``roots``; else PathError.

    The path is first checked as written (``..`` folded, no file-system access), then again with its links
    followed, and both refusals say the same thing: the answer never tells whether anything exists outside
    the roots (a probe of ``/root/.bash_history`` learns nothing)."""
    if "\x00" in path:
        raise PathError("contains a NUL character")
    allowed = ", ".join(str(r) for r in roots)
    refusal = PathError(f"must be inside one of the {what} roots ({allowed}); set {setting} to add one")
    roots = [Path(r).resolve() for r in roots]
    try:
        written = Path(os.path.normpath(_absolute(path)))
    except (OSError, RuntimeError, ValueError):  # "~nobody/", a name too long for the platform
        raise refusal from None
    if not _inside(written, roots):
        raise refusal
    try:
        resolved = written.resolve()
    except (OSError, RuntimeError):  # a link loop inside a root
        raise refusal from None
    if not _inside(resolved, roots):
        raise refusal
    return resolved


def _absolute(path: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else Path(settings.BASE_DIR) / p


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def check_model_path(path: str) -> Path:
    """The resolved model directory, if it lies inside a model root and exists; else PathError."""
    resolved = _confined(path, settings.DAPO_MODEL_ROOTS, "model", "DAPO_MODEL_ROOTS")
    if not resolved.is_dir():
        raise PathError(f"no model directory at {resolved}")
    return resolved


def resolve_path(field: str, path: str) -> Path:
    """The file or folder of one of a run config's paths (``RunConfig.file_paths``), resolved and checked
    to lie inside its roots: the one rule for every path a run reads (the form and the API when a run is
    configured, the worker before it trains); PathError otherwise."""
    if field == "model.path":
        return check_model_path(path)
    resolved = check_data_path(path, required=True)
    assert resolved is not None  # required: a path or PathError
    return resolved


def dataset_roots() -> list[Path]:
    """settings.DAPO_DATASET_ROOTS, and always the folder uploads are kept in (DAPO_VAR_DIR/datasets)."""
    uploads = Path(settings.DAPO_VAR_DIR) / "datasets"
    roots = [Path(r) for r in settings.DAPO_DATASET_ROOTS]
    return roots if uploads in roots else [*roots, uploads]


def check_data_path(path: str, *, required: bool) -> Path | None:
    """The resolved data file a run reads, if it lies inside a dataset root (settings.DAPO_DATASET_ROOTS)
    and exists (an empty optional path gives None); else PathError. The worker checks again before it
    opens the file."""
    if not path.strip():
        if required:
            raise PathError("must name a dataset file")
        return None
    resolved = _confined(path.strip(), dataset_roots(), "dataset", "DAPO_DATASET_ROOTS")
    if not resolved.is_file():
        raise PathError(f"no file at {resolved}")
    return resolved


def check_dataset_path(path: str, *, required: bool) -> Path | None:
    """A data file inside one of the dataset roots, as the web may register it (an empty optional path
    gives None); else PathError."""
    resolved = check_data_path(path, required=required)
    if resolved is not None and resolved.suffix.lower() not in DATASET_SUFFIXES:
        raise PathError(f"must be a {', '.join(DATASET_SUFFIXES)} file, got {resolved.name!r}")
    return resolved
