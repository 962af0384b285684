"""Each run's log: what its controller and trainer wrote to stdout and stderr (Python logging, warnings,
tracebacks, output of libraries and subprocesses), captured by the worker into one file per run.

The worker appends to ``DAPO_VAR_DIR/run-logs/<run id>.log`` (a header line per attempt); the run page
follows it live through ``/runs/<id>/log/`` (JSON chunks from a byte offset), offers it as a download,
and the API serves the same chunks at ``/api/runs/<id>/log/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings

CHUNK_BYTES = 256 * 1024
"""The most one request returns; a reader asks again from ``next_offset`` for more."""
TAIL_BYTES = 64 * 1024
"""What the run page loads first: the end of the log, where a failure's traceback is."""


def log_path(run_id: int) -> Path:
    return Path(settings.DAPO_VAR_DIR) / "run-logs" / f"{int(run_id)}.log"


def read_chunk(run_id: int, offset: int | None = None, tail: int | None = None) -> dict[str, Any]:
    """Up to CHUNK_BYTES of the log from byte ``offset`` (or the last ``tail`` bytes, from a line start),
    as whole lines: a line still being written comes with the next read. Returns {"text", "offset",
    "next_offset", "size", "exists"}; an offset past the end (the log was started over) reads from 0."""
    path = log_path(run_id)
    try:
        size = path.stat().st_size
    except OSError:
        return {"text": "", "offset": 0, "next_offset": 0, "size": 0, "exists": False}
    if offset is None:
        offset = max(0, size - (tail if tail is not None else size))
        skip_partial = offset > 0
    else:
        skip_partial = False
        if offset > size:
            offset = 0
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read(min(CHUNK_BYTES, size - offset))
    if skip_partial:  # a tail starts at the beginning of a line
        cut = data.find(b"\n")
        data, offset = (data[cut + 1 :], offset + cut + 1) if cut >= 0 else (data, offset)
    end = data.rfind(b"\n")
    if end >= 0:
        data = data[: end + 1]
    elif len(data) < CHUNK_BYTES:  # a single unfinished line: wait for its end
        data = b""
    return {
        "text": data.decode("utf-8", errors="replace"),
        "offset": offset,
        "next_offset": offset + len(data),
        "size": size,
        "exists": True,
    }
