"""Import a dataset's problems as DatasetRow rows, all or nothing.

Uploads, web registrations, ``manage.py register_dataset`` and ``bootstrap`` all end here. Rows are read
and validated by ``dapo.data.problems.iter_problem_rows``, the trainer's own loader, so a row's ``index`` is
the ``problem_index`` of a run's samples. The import is one transaction: the Dataset row, its rows and (for an
upload) the move of its files from their temporary names to their place under
``DAPO_VAR_DIR/datasets/``. On any error the transaction rolls back and the uploaded files are deleted.

Every file is read under the limits of ``read_limits()`` (rows, characters in one value, decompressed
bytes: ``DAPO_DATASET_MAX_ROWS``, ``DAPO_DATASET_MAX_FIELD_CHARS``, ``DAPO_DATASET_MAX_MB``), checked while
it is read, so a small compressed file cannot fill the database; the refusal names the setting.

A name the owner (``created_by``; None: the server) already has gets a new version of their dataset
(``catalog.versions``): the older versions keep their rows and files. Another owner's dataset of the same
name is never touched. Each version records its files' SHA-256 hashes; files identical to an existing
version of the owner's name are refused.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils.text import slugify

from catalog.models import Dataset, DatasetRow
from catalog.paths import DATASET_SUFFIXES, portable
from catalog.versions import content_hash, file_record, next_version
from dapo.data.limits import MB, LimitExceeded, ReadLimits
from dapo.data.problems import DataError, Problem, iter_problem_rows

BATCH = 1000
LIMIT_SETTINGS = {
    "rows": "DAPO_DATASET_MAX_ROWS",
    "field_chars": "DAPO_DATASET_MAX_FIELD_CHARS",
    "bytes": "DAPO_DATASET_MAX_MB",
}


class ImportFailed(ValueError):
    """A dataset that was not imported; the message names the file, the row and the column."""


@dataclass(frozen=True)
class SplitFile:
    """One split's file: where it is now (a temporary name for an upload) and its name for messages."""

    split: str
    path: Path
    label: str


def uploads_dir() -> Path:
    return Path(settings.DAPO_VAR_DIR) / "datasets"


def read_limits() -> ReadLimits:
    """What one imported file may hold (the settings are read at each import, so tests can change them)."""
    return ReadLimits(
        max_rows=int(settings.DAPO_DATASET_MAX_ROWS),
        max_field_chars=int(settings.DAPO_DATASET_MAX_FIELD_CHARS),
        max_bytes=int(settings.DAPO_DATASET_MAX_MB) * MB,
    )


def import_dataset(
    name: str,
    files: list[SplitFile],
    *,
    description: str = "",
    created_by: Any = None,
    keep_files: bool = False,
    replace: Dataset | None = None,
) -> Dataset:
    """Create (or, with ``replace``, refill) a dataset from its split files in one transaction.

    With ``keep_files`` (an upload) the files are moved under ``DAPO_VAR_DIR/datasets/<id>-<name>/`` at the
    end of the transaction, and deleted if anything fails. Raises ImportFailed.
    """
    moved: list[Path] = []
    try:
        records = _file_records(files)
        with transaction.atomic():
            dataset = _dataset_row(name, description, created_by, replace, content_hash(records))
            counts: dict[str, int] = {}
            schema: dict[str, Any] = {}
            for f in files:
                counts[f.split], columns = _import_split(dataset, f)
                schema = schema or columns
            paths = {f.split: f.path for f in files}
            if keep_files:
                paths = _move_into_place(dataset, files, moved)
            _finish(dataset, paths, counts, schema, keep_files=keep_files, records=records)
    except BaseException:
        for path in [*moved, *(f.path for f in files if keep_files)]:
            path.unlink(missing_ok=True)
        if moved:
            shutil.rmtree(moved[0].parent, ignore_errors=True)
        raise
    return dataset


def check_files(files: list[SplitFile]) -> None:
    """Validate every row of the files as an import would, writing nothing; raises ImportFailed."""
    for f in files:
        for _ in _rows(Dataset(), f):
            pass


def fingerprint(paths: Iterable[Path]) -> str:
    """Size and modification time of each file: a re-registration of unchanged files skips the import."""
    parts = []
    for path in paths:
        stat = path.stat()
        parts.append(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return ";".join(parts)[:200]


# ---- steps -------------------------------------------------------------------------------------------


def _file_records(files: list[SplitFile]) -> dict[str, dict[str, Any]]:
    try:
        return {f.split: file_record(f.path) for f in files}
    except OSError as e:
        raise ImportFailed(f"{files[0].label}: could not be read ({e.strerror or e})") from None


def _dataset_row(
    name: str, description: str, created_by: Any, replace: Dataset | None, digest: str
) -> Dataset:
    """The Dataset row to fill: ``replace`` emptied, or the next version of ``created_by``'s ``name`` (1
    when new to them). A new version identical to one of theirs (same content hash) is refused: it would
    add nothing."""
    if replace is not None:
        replace.rows.all().delete()
        replace.description = description
        return replace
    name, version = next_version(name, created_by)
    same = (
        Dataset.objects.lines(name, created_by.pk if created_by else None)
        .filter(content_hash=digest)
        .order_by("-version")
        .first()
    )
    if same is not None:
        raise ImportFailed(
            f"these files are identical to {same.label} (sha256 {digest[:12]}): nothing was imported; "
            "that version is the one to use"
        )
    try:
        with transaction.atomic():  # a savepoint: the version number may race with another upload
            return Dataset.objects.create(
                name=name,
                version=version,
                description=description,
                created_by=created_by,
                path="",
                format="parquet",
            )
    except IntegrityError:
        raise ImportFailed(
            f"another version of {name!r} was imported at the same moment: send this one again"
        ) from None


def _import_split(dataset: Dataset, f: SplitFile) -> tuple[int, dict[str, str]]:
    """Stream one file's problems into rows; (row count, {column: type} of the first row)."""
    batch: list[DatasetRow] = []
    count, schema = 0, {}
    for row, raw in _rows(dataset, f):
        if not count:
            schema = _schema(f.path, raw)
        batch.append(row)
        count += 1
        if len(batch) >= BATCH:
            DatasetRow.objects.bulk_create(batch)
            batch.clear()
    DatasetRow.objects.bulk_create(batch)
    return count, schema


def _rows(dataset: Dataset, f: SplitFile) -> Iterator[tuple[DatasetRow, dict[str, Any]]]:
    """(unsaved row, the row as stored) of each problem in the file; ImportFailed names the bad row."""
    if f.path.suffix.lower() not in DATASET_SUFFIXES:
        raise ImportFailed(f"{f.label}: expected a {', '.join(DATASET_SUFFIXES)} file")
    try:
        for problem, raw in iter_problem_rows(f.path, limits=read_limits()):
            yield _row(dataset, f, problem, raw), raw
    except LimitExceeded as e:
        message = str(e).replace(str(f.path), f.label)
        raise ImportFailed(f"{message} ({LIMIT_SETTINGS[e.limit]})") from None
    except DataError as e:
        raise ImportFailed(str(e).replace(str(f.path), f.label)) from None
    except OSError as e:
        raise ImportFailed(f"{f.label}: could not be read ({e.strerror or e})") from None


def _row(dataset: Dataset, f: SplitFile, problem: Problem, row: dict[str, Any]) -> DatasetRow:
    text = "\n\n".join(m["content"] for m in problem.messages)
    prompt = json_safe(row["prompt"])
    extra = {str(k): json_safe(v) for k, v in row.items() if k not in ("prompt", "data_source")}
    if _has_nul([prompt, problem.ground_truth, problem.data_source, extra]):
        # PostgreSQL stores no NUL character in text or jsonb; refused everywhere so both databases agree
        raise ImportFailed(
            f"{f.label}: problem {problem.index} (prompt {text[:60]!r}) holds a NUL character (\\u0000), "
            "which the database cannot store"
        )
    return DatasetRow(
        dataset=dataset,
        split=f.split,
        index=problem.index,
        prompt=prompt,
        prompt_text=text,
        prompt_chars=len(text),
        ground_truth=problem.ground_truth,
        data_source=problem.data_source[:200],
        extra=extra,
    )


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def _schema(path: Path, first_row: dict[str, Any]) -> dict[str, str]:
    """Column types: parquet's own (from its metadata), else the JSON types of the first row."""
    if path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq  # lazy: only imports read parquet

        return {f.name: str(f.type) for f in pq.read_schema(path)}
    return {str(k): type(v).__name__ for k, v in first_row.items()}


def _move_into_place(dataset: Dataset, files: list[SplitFile], moved: list[Path]) -> dict[str, Path]:
    """Rename the uploaded files from their temporary names to <id>-<name>/<split><suffix>."""
    folder = uploads_dir() / f"{dataset.pk}-{slugify(dataset.name)[:60] or 'dataset'}"
    folder.mkdir(parents=True, exist_ok=False)
    paths = {}
    for f in files:
        target = folder / f"{f.split}{f.path.suffix.lower()}"
        os.rename(f.path, target)
        moved.append(target)
        paths[f.split] = target
    return paths


def _finish(
    dataset: Dataset,
    paths: dict[str, Path],
    counts: dict[str, int],
    schema: dict[str, str],
    *,
    keep_files: bool,
    records: dict[str, dict[str, Any]],
) -> None:
    dataset.files = records  # a rename keeps size and modification time
    dataset.content_hash = content_hash(records)
    dataset.path = portable(paths["train"])
    dataset.val_path = portable(paths["val"]) if "val" in paths else ""
    dataset.format = paths["train"].suffix.lower().lstrip(".")
    dataset.splits = counts
    dataset.row_count = sum(counts.values())
    dataset.schema = schema
    dataset.uploaded = keep_files
    dataset.fingerprint = fingerprint(paths.values())
    dataset.save()


def json_safe(value: Any) -> Any:
    """A value JSON (and PostgreSQL's jsonb) accepts: non-finite floats become null, dates and decimals
    strings, bytes are decoded."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, datetime | date | Decimal):
        return str(value)
    return str(value)
