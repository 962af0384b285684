"""Dataset uploads streamed to disk under a size limit.

The handler writes each uploaded file straight to a temporary name under ``DAPO_VAR_DIR/datasets/incoming``
in chunks, counting bytes: once a file passes ``DAPO_MAX_UPLOAD_MB`` its partial copy is deleted and the
rest of it is skipped, so an upload never sits in memory and an oversized one never fills the disk. The
importer renames the files into place at the end of its transaction; whatever it did not take is deleted
by ``cleanup()``.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any, BinaryIO

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, SkipFile, StopFutureHandlers

from catalog.paths import DATASET_SUFFIXES

CHUNK = 1024 * 1024
STALE_SECONDS = 24 * 3600
"""Temporary files older than this were left by a process that died mid-upload (removed by the next)."""


def max_upload_bytes() -> int:
    return int(settings.DAPO_MAX_UPLOAD_MB) * 1024 * 1024


def incoming_dir() -> Path:
    return Path(settings.DAPO_VAR_DIR) / "datasets" / "incoming"


class StagedUpload(UploadedFile):
    """An uploaded file already on disk at its temporary name."""

    def __init__(self, path: Path, name: str, size: int, content_type: str | None) -> None:
        super().__init__(file=None, name=name, content_type=content_type, size=size)
        self.path = path

    def temporary_file_path(self) -> str:
        return str(self.path)


class DatasetUploadHandler(FileUploadHandler):
    chunk_size = CHUNK

    def __init__(self, request: Any = None, *, limit: int | None = None, folder: Path | None = None) -> None:
        super().__init__(request)
        self.limit = limit if limit is not None else max_upload_bytes()
        self.folder = folder or incoming_dir()
        self.created: list[Path] = []
        self.too_large: dict[str, str] = {}
        """Form field → name of a file that passed the limit (and was dropped)."""
        self._file: BinaryIO | None = None
        self._path: Path | None = None
        self._size = 0

    def new_file(self, field_name: str, file_name: str, *args: Any, **kwargs: Any) -> None:
        super().new_file(field_name, file_name, *args, **kwargs)
        suffix = Path(file_name).suffix.lower()
        self.folder.mkdir(parents=True, exist_ok=True)
        self._path = (
            self.folder / f".upload-{uuid.uuid4().hex}{suffix if suffix in DATASET_SUFFIXES else '.bin'}"
        )
        self._file = self._path.open("xb")
        self.created.append(self._path)
        self._size = 0
        raise StopFutureHandlers()  # this handler keeps the file; no other handler sees it

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        assert self._file is not None
        self._size += len(raw_data)
        if self._size > self.limit:
            self._drop()
            self.too_large[self.field_name] = self.file_name or ""
            raise SkipFile()  # the parser reads past the rest of this file without keeping it
        self._file.write(raw_data)

    def file_complete(self, file_size: int) -> StagedUpload | None:
        if self._file is None or self._path is None:
            return None
        self._file.close()
        staged = StagedUpload(self._path, self.file_name or "", file_size, self.content_type)
        self._file, self._path = None, None  # complete: from now on only cleanup() deletes it
        return staged

    def upload_interrupted(self) -> None:
        self._drop()

    def cleanup(self) -> None:
        """Delete every temporary file this upload created that is still at its temporary name."""
        self._drop()
        for path in self.created:
            path.unlink(missing_ok=True)
        remove_stale(self.folder)

    def _drop(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._path is not None:
            self._path.unlink(missing_ok=True)
            self._path = None


def remove_stale(folder: Path) -> None:
    """Remove temporary uploads left by a process that died (older than a day)."""
    if not folder.is_dir():
        return
    cutoff = time.time() - STALE_SECONDS
    for path in folder.glob(".upload-*"):
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
        except OSError:
            continue
