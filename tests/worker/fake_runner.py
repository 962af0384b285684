"""A stand-in trainer for the worker tests (``DAPO_RUNNER=tests.worker.fake_runner:run``): fast, with
the real trainer's contract (sinks, checkpoints under out_dir/checkpoints/step_N, should_stop at step
boundaries, resume from a given checkpoint or the newest). Each call appends a line to
out_dir/invocations.jsonl; each sample's response names the process that computed it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from dapo.loop.report import RunInfo, RunResult, SampleRecord, Sink, StepReport
from dapo.runconfig import RunConfig

STEP_SECONDS = float(os.environ.get("FAKE_STEP_SECONDS", "0.05"))


def run(
    config: RunConfig,
    *,
    out_dir: str | Path,
    sinks: list[Sink],
    resume: bool = False,
    resume_from: str | Path | None = None,
) -> RunResult:
    out = Path(out_dir)
    step = _step_of(Path(resume_from)) if resume_from else _latest(out) if resume else 0
    with (out / "invocations.jsonl").open("a") as f:
        f.write(json.dumps({"pid": os.getpid(), "resume": resume, "start_step": step + 1}) + "\n")
    total, every = config.optim.total_steps, config.checkpoint.every_n_steps
    for s in sinks:
        s.on_start(RunInfo(run_dir=str(out), total_steps=total, start_step=step + 1, config=config.to_dict()))
    status = "succeeded"
    while step < total:
        if any(s.should_stop() for s in sinks):
            status = "cancelled"
            _save(out, step, sinks)
            break
        step += 1
        time.sleep(STEP_SECONDS)
        metrics = {
            "critic/score/mean": step / total,
            "train/acc/mean": step / (2 * total),
            "actor/entropy": 1.0,
        }
        samples = [_sample(step, i) for i in range(4)]
        report = StepReport(step=step, metrics=metrics, samples=samples, wall_time=time.time())
        for s in sinks:
            s.on_step(report)
        if every and step % every == 0:
            _save(out, step, sinks)
    for s in sinks:
        s.on_finish(status, None)
    return RunResult(status=status, last_step=step)


def _latest(out: Path) -> int:
    return max((_step_of(p) for p in (out / "checkpoints").glob("step_*")), default=0)


def _step_of(checkpoint: Path) -> int:
    return int(json.loads((checkpoint / "trainer.json").read_text())["step"])


def _save(out: Path, step: int, sinks: list[Sink]) -> None:
    if not all(s.may_save_checkpoint() for s in sinks):  # as the trainer: a controller that lost the run
        return
    path = out / "checkpoints" / f"step_{step:06d}"
    path.mkdir(parents=True, exist_ok=True)
    (path / "trainer.json").write_text(json.dumps({"step": step}))
    for s in sinks:
        s.on_checkpoint(step, str(path))


def _sample(step: int, index: int) -> SampleRecord:
    return SampleRecord(
        step=step,
        split="train",
        group=index // 2,
        sample_index=index,
        problem_index=index,
        prompt="Compute 1+1.",
        response=f"step {step} by pid {os.getpid()}\nAnswer: 2",
        ground_truth="2",
        pred="2",
        score=1.0,
        acc=True,
        overlong_penalty=0.0,
        reward=1.0,
        advantage=0.0,
        length=5,
        truncated=False,
        kept=True,
    )
