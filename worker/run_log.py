"""Capture what a run writes into its log file (``runs.run_log.log_path``), and still into the worker's.

While a run trains, file descriptors 1 and 2 of the worker process point at pipes; a thread per pipe copies
every byte into the run's log and on to the original stdout or stderr (the worker's own log). So the log
holds Python logging, ``print``, warnings, the traceback of a failure, and the output of C libraries and of
subprocesses (Ray forwards its workers' output to the driver's stdout), in order. The worker runs one run
at a time (``--concurrency 1``), so the process's output during a run is that run's.

A log stops growing at ``DAPO_RUN_LOG_MAX_MB`` (a line says so); the worker's own log still gets everything.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

DEFAULT_MAX_BYTES = 64 * 1024 * 1024


class _Tee:
    """Copies one pipe into the log file (shared, under a lock) and the original descriptor."""

    def __init__(self, read_fd: int, original_fd: int, log: BinaryIO, lock: threading.Lock, cap: list[int]):
        self.read_fd, self.original_fd, self.log, self.lock, self.cap = read_fd, original_fd, log, lock, cap
        self.thread = threading.Thread(target=self._copy, name=f"run-log-{original_fd}", daemon=True)
        self.thread.start()

    def _copy(self) -> None:
        while chunk := os.read(self.read_fd, 65536):
            with self.lock:
                try:
                    self._keep(chunk)
                except (OSError, ValueError):  # the log was closed (a subprocess outlived the run) or failed
                    pass
            try:
                os.write(self.original_fd, chunk)
            except OSError:
                pass
        os.close(self.read_fd)

    def _keep(self, chunk: bytes) -> None:
        if self.cap[0] <= 0:
            return
        kept = chunk[: self.cap[0]]
        self.cap[0] -= len(kept)
        self.log.write(kept)
        if self.cap[0] <= 0:
            self.log.write(b"\n[run log: size limit reached; the rest is in the worker's log]\n")
        self.log.flush()


@contextmanager
def capture(path: Path, header: str, *, fresh: bool = False, max_bytes: int | None = None) -> Iterator[None]:
    """Tee this process's stdout and stderr into ``path`` (appending; ``fresh`` starts it over) while the
    block runs. ``header`` is written first, as a line of its own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    limit = max_bytes if max_bytes is not None else _max_bytes()
    log = path.open("wb" if fresh else "ab")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    log.write(f"===== {stamp} {header} =====\n".encode())
    log.flush()
    lock, cap = threading.Lock(), [limit]
    _flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    streams = sys.stdout, sys.stderr
    tees = []
    try:
        for fd in (1, 2):
            read_fd, write_fd = os.pipe()
            os.dup2(write_fd, fd)
            os.close(write_fd)
            tees.append(_Tee(read_fd, saved[fd], log, lock, cap))
        # print() and warnings write to descriptors 1 and 2 too (Celery, or a test runner, may have
        # replaced sys.stdout with an object that writes elsewhere)
        sys.stdout = open(1, "w", buffering=1, closefd=False, errors="replace")  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False, errors="replace")  # noqa: SIM115
        yield
    finally:
        _flush()
        for stream in (sys.stdout, sys.stderr):
            if stream not in streams:
                stream.close()
        sys.stdout, sys.stderr = streams
        for fd in (1, 2):  # closes the pipes' write ends: each tee reads to the end and stops
            os.dup2(saved[fd], fd)
        for tee in tees:
            tee.thread.join(timeout=5)  # a subprocess that inherited a pipe keeps its tee alive: leave it
        for fd in saved.values():
            if not any(t.thread.is_alive() and t.original_fd == fd for t in tees):
                os.close(fd)
        log.close()


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    for handler in logging.getLogger().handlers:
        handler.flush()


def _max_bytes() -> int:
    raw = os.environ.get("DAPO_RUN_LOG_MAX_MB", "")
    return int(raw) * 1024 * 1024 if raw.isdigit() and int(raw) > 0 else DEFAULT_MAX_BYTES
