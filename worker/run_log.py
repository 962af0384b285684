"""Capture what a run writes into its log file (``runs.run_log.log_path``), and still into the worker's.

While a run trains, file descriptors 1 and 2 of the worker process point at pipes; a thread per pipe copies
every byte into the run's log and on to the original stdout or stderr (the worker's own log). So the log
holds Python logging, ``print``, warnings, the traceback of a failure, and the output of C libraries and of
subprocesses (Ray forwards its workers' output to the driver's stdout), in order. A worker with several
slots (``--concurrency N``) still runs one run per process: Celery's prefork pool runs each task in a child
process, which runs one task at a time, and the descriptors redirected here are that child's own. So a
process's output during a run is that run's (tests/worker/test_concurrency.py checks it with two runs).

A log stops growing at ``DAPO_RUN_LOG_MAX_MB`` (a line says so); the worker's own log still gets everything.

The platform's sink (worker.sink) adds the run's own story, one timestamped line each (``say``): the start
or resume, every step (``step_line``: reward, accuracy, groups trained on / generated, seconds), every
validation (``validation_line``), each checkpoint, and the end with its reason.
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


def say(text: str) -> None:
    """One line of the run's log (and of the worker's): the time, then ``text``. Never raises."""
    line = f"[{time.strftime('%H:%M:%S')}] {text}\n"
    try:
        sys.stdout.write(line)
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def step_line(step: int, total: int, metrics: dict[str, float]) -> str:
    """``step 12/60  reward 0.412  acc 0.625  kept 16/18 (+2 surplus)  12.3 s``: groups trained on / generated
    (the surplus, not trained on, apart), the step's seconds (timing_s/step)."""
    m = metrics
    parts = [f"step {step}/{total}" if total else f"step {step}"]
    parts.append(f"reward {_num(m.get('critic/score/mean'))}")
    parts.append(f"acc {_num(m.get('train/acc/mean'))}")
    if "train/num_prompts_kept" in m:
        kept = f"kept {m['train/num_prompts_kept']:.0f}/{m.get('train/num_prompts_generated', 0):.0f}"
        if m.get("train/num_prompts_surplus"):
            kept += f" (+{m['train/num_prompts_surplus']:.0f} surplus)"
        parts.append(kept)
    if "timing_s/step" in m:
        parts.append(f"{m['timing_s/step']:.1f} s")
    return "  ".join(parts)


def validation_line(step: int, metrics: dict[str, float]) -> str | None:
    """``validation at step 10: acc/mean@4 0.550  reward/mean@4 0.100  (31.2 s)``, or None without one."""
    overall = sorted(k for k in metrics if k.count("/") == 2 and k.startswith(("val/acc/", "val/reward/")))
    if not overall:
        return None
    parts = [f"{k.removeprefix('val/')} {metrics[k]:.3f}" for k in overall if "@" in k and "/mean@" in k]
    seconds = metrics.get("timing_s/testing")
    tail = f"  ({seconds:.1f} s)" if seconds is not None else ""
    return (
        f"validation at step {step}: " + "  ".join(parts or [f"{k} {metrics[k]:.3f}" for k in overall]) + tail
    )


def duration(seconds: float | None) -> str:
    """``1h 26m``, ``51m 3s``, ``42s``."""
    if seconds is None:
        return "–"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 60}m {s % 60}s" if s >= 60 else f"{s}s"


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
