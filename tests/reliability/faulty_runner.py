"""``DAPO_RUNNER`` of the reliability tests: the real trainer (or the fast stand-in of tests/worker), with
each invocation logged and a fault injected where a test asks for one.

A test writes ``$DAPO_VAR_DIR/faults.json``: ``{"<run id>": {"runner": "real" | "fake", ...}}`` with, for
the first attempt only:
  * ``kill_at_checkpoint: N``: SIGKILL the process running the run (the Celery pool process) right after the
    trainer saved checkpoint N and before it reported step N, the moment where recording the checkpoint
    too early would leave a gap in the curves;
  * ``freeze_at_step: N``: SIGSTOP that process when step N is reported, before the platform writes it
    (a process paused mid-step); the test sends SIGCONT once another worker has taken the run over.
Each invocation appends ``{"pid", "resume_from", "t"}`` to ``$DAPO_VAR_DIR/invocations-<run id>.jsonl``
(outside the run folder, which a fresh start may set aside), and ``{"killed"|"frozen": t}`` before a fault.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from dapo.loop.report import RunResult, Sink, StepReport
from dapo.runconfig import RunConfig


def var_dir() -> Path:
    return Path(os.environ["DAPO_VAR_DIR"])


def invocations_log(run_id: int | str) -> Path:
    return var_dir() / f"invocations-{run_id}.jsonl"


def invocations(run_id: int | str) -> list[dict[str, Any]]:
    path = invocations_log(run_id)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _append(run_id: str, record: dict[str, Any]) -> None:
    with invocations_log(run_id).open("a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())  # the process may be SIGKILLed a moment later


class KillAtCheckpoint(Sink):
    def __init__(self, run_id: str, step: int) -> None:
        self.run_id, self.step = run_id, step

    def on_checkpoint(self, step: int, path: str) -> None:
        if step == self.step:
            _append(self.run_id, {"killed": time.time(), "pid": os.getpid(), "at_checkpoint": step})
            os.kill(os.getpid(), signal.SIGKILL)


class FreezeAtStep(Sink):
    def __init__(self, run_id: str, step: int) -> None:
        self.run_id, self.step = run_id, step

    def on_step(self, report: StepReport) -> None:
        if report.step == self.step:
            _append(self.run_id, {"frozen": time.time(), "pid": os.getpid(), "at_step": report.step})
            os.kill(os.getpid(), signal.SIGSTOP)


def run(
    config: RunConfig,
    *,
    out_dir: str | Path,
    sinks: list[Sink],
    resume: bool = False,
    resume_from: str | Path | None = None,
) -> RunResult:
    run_id = Path(out_dir).name
    faults_file = var_dir() / "faults.json"
    spec = json.loads(faults_file.read_text()).get(run_id, {}) if faults_file.exists() else {}
    first = not invocations(run_id)
    _append(run_id, {"pid": os.getpid(), "resume_from": str(resume_from or ""), "t": time.time()})
    before: list[Sink] = []  # sinks called before the platform's, and after it
    after: list[Sink] = []
    if first and spec.get("kill_at_checkpoint"):
        after.append(KillAtCheckpoint(run_id, int(spec["kill_at_checkpoint"])))
    if first and spec.get("freeze_at_step"):
        before.append(FreezeAtStep(run_id, int(spec["freeze_at_step"])))
    if spec.get("runner") == "fake":
        from tests.worker.fake_runner import run as inner
    else:
        from dapo.loop.runner import run as inner
    all_sinks = [*before, *sinks, *after]
    return inner(config, out_dir=out_dir, sinks=all_sinks, resume=resume, resume_from=resume_from)
