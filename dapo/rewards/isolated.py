"""Reward checks with a hard time limit per call: in a worker process that is killed when a call overruns.

A verifier can take minutes on a hostile input (Math-Verify on an answer nesting 40 parentheses), its own
timeouts use SIGALRM, which works only on a process's main thread, and a thread cannot be stopped. So a
web request that must call one (the dataset page's reward check) hands the ground truths to
:func:`judge_all`, which runs them in one worker process per request:

1. the worker is forked from a small server process that already imported the rewards and Math-Verify
   (``multiprocessing``'s forkserver), so starting one costs milliseconds, not the imports;
2. the worker writes each verdict into shared memory as soon as it has it, so the parent always knows
   which row is in progress; when that row makes no progress for ``call_seconds`` the worker is killed,
   the row is recorded as stopped, and a fresh worker goes on with the next one (a worker that dies in a
   call, a verifier crashing its process, is treated the same);
3. the whole check stops at ``budget_seconds``; the rows it did not reach are left for the caller to name.

The caller learns which rows were not scored in time, instead of waiting for them.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from multiprocessing.connection import Connection
from typing import Any

CHUNK = 256
"""Ground truths sent to the worker at once."""
POLL_SECONDS = 0.02
"""How often the parent looks at the worker's progress."""
READY_SECONDS = 60.0
"""How long a new worker may take to start (the first one waits for its server's imports)."""
PRELOAD = ["__main__", "dapo.rewards.preload"]
"""Imported once by the server the workers are forked from: the program's main module (as multiprocessing
does by default, else every worker imports it again) and the rewards, Math-Verify imported and warmed."""
UNSET = -1


@dataclass
class Verdicts:
    """What :func:`judge_all` got through: one verdict per position it reached, in order."""

    verdicts: list[bool] = field(default_factory=list)
    """Whether the reward judges each truth, for positions 0 .. reached-1 (stopped ones: False)."""
    stopped: list[int] = field(default_factory=list)
    """Positions whose call was stopped: it passed the per-call limit, or its process died in it."""
    error: str = ""
    """Why the check stopped early (a RewardError such as a missing library, a worker that never started)."""

    @property
    def reached(self) -> int:
        """Positions judged or stopped; those from here on were not reached within the budget."""
        return len(self.verdicts)


def judge_all(
    judges: Callable[[str], Any], truths: Iterable[str], *, call_seconds: float, budget_seconds: float
) -> Verdicts:
    """``judges(truth)`` for each truth in order, in a killable worker process (see the module's doc).
    ``judges`` must be picklable (a module-level function, a reward class's static or class method);
    ``truths`` is read CHUNK at a time."""
    check = _Check(judges, iter(truths), call_seconds, budget_seconds)
    check.run()
    return check.out


class _Worker:
    """One worker process, the parent's end of its pipe, and the verdicts it shares (UNSET until set)."""

    def __init__(self, judges: Callable[[str], Any]) -> None:
        context = _context()
        self.shared = context.RawArray("b", CHUNK)
        self.size = 0
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, judges, self.shared), daemon=True)
        self.process.start()
        child.close()

    def ready(self) -> bool:
        try:
            return bool(self.conn.poll(READY_SECONDS)) and self.conn.recv() == ("ready", None)
        except EOFError:
            return False

    def send(self, chunk: list[str]) -> None:
        self.size = len(chunk)
        self.shared[: self.size] = [UNSET] * self.size
        self.conn.send(chunk)

    def done(self, start: int) -> int:
        """How many verdicts of the chunk are set, counting on from ``start`` (they are set in order)."""
        while start < self.size and self.shared[start] != UNSET:
            start += 1
        return start

    def message(self, seconds: float) -> Any:
        """The worker's next message, None when none came within ``seconds``; EOFError when it died."""
        return self.conn.recv() if self.conn.poll(max(0.0, seconds)) else None

    def stop(self) -> None:
        """Kill the worker (it may be stuck in a call) and reap it."""
        self.conn.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)


class _Check:
    """The state of one :func:`judge_all`: what is read and not judged yet, and the deadline."""

    def __init__(self, judges: Callable[[str], Any], source: Iterator[str], call: float, budget: float):
        self.judges, self.source, self.call, self.budget = judges, source, call, budget
        self.out = Verdicts()
        self.pending: list[str] = []
        """Read from the source, not judged yet (the first is the one in progress)."""
        self.deadline = 0.0

    def run(self) -> None:
        while not self.out.error and self._refill():
            worker = _Worker(self.judges)
            try:
                if not worker.ready():
                    self.out.error = "the reward check's worker process did not start"
                    return
                # the budget starts with the first worker: its server's imports are not the data's
                self.deadline = self.deadline or time.monotonic() + self.budget
                if not self._judge_with(worker):
                    return
            finally:
                worker.stop()

    def _judge_with(self, worker: _Worker) -> bool:
        """Judge chunk by chunk with one worker. True when it must be replaced (a call overran or it
        died) and the check go on; False when the check is over (all judged, the budget spent, an error)."""
        while self._refill():
            chunk = self.pending[:CHUNK]
            worker.send(chunk)
            outcome = self._watch(worker, len(chunk))
            if outcome != "done":
                return outcome == "replace"
        return False

    def _watch(self, worker: _Worker, size: int) -> str:
        """Follow one chunk: "done", "replace" (its row in progress was stopped) or "over"."""
        counted, progress_at = 0, time.monotonic()
        while True:
            try:
                message = worker.message(POLL_SECONDS)
            except EOFError:  # it died in the call of the row in progress
                self._take(worker, counted)
                self._stop_row()
                return "replace"
            now, seen = time.monotonic(), worker.done(counted)
            if seen > counted:
                self._take(worker, counted, seen)
                counted, progress_at = seen, now
            if message is not None:
                kind, payload = message
                if kind == "error":
                    self.out.error = payload
                    return "over"
                self._take(worker, counted, size)
                return "done"
            if now >= self.deadline:
                return "over"
            if now - progress_at >= self.call:
                self._stop_row()
                return "replace"

    def _refill(self) -> bool:
        if not self.pending:
            self.pending = list(islice(self.source, CHUNK))
        return bool(self.pending)

    def _take(self, worker: _Worker, start: int, end: int | None = None) -> None:
        """The chunk's verdicts start..end (as far as set) into the result."""
        end = worker.done(start) if end is None else end
        self.out.verdicts.extend(bool(worker.shared[i]) for i in range(start, end))
        del self.pending[: end - start]

    def _stop_row(self) -> None:
        """The row in progress was stopped: recorded as not judged, and skipped."""
        self.out.stopped.append(self.out.reached)
        self.out.verdicts.append(False)
        del self.pending[:1]


def _context() -> Any:
    """The forkserver context, its server preloaded with the rewards (set once, before it starts)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _serve(conn: Connection, judges: Callable[[str], Any], shared: Any) -> None:
    """The worker: says it is ready, then judges each chunk it is sent, each verdict into ``shared`` as
    it is known, and says ("done", None) at the chunk's end."""
    from dapo.rewards.base import RewardError

    conn.send(("ready", None))
    while True:
        try:
            chunk = conn.recv()
        except EOFError:  # the parent is gone
            return
        for i, truth in enumerate(chunk):
            try:
                shared[i] = 1 if judges(truth) else 0
            except RewardError as e:
                conn.send(("error", str(e)))
                return
            except Exception:  # a truth the verifier chokes on is one it cannot judge
                shared[i] = 0
        conn.send(("done", None))
