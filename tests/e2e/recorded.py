"""Step reports recorded from real tiny runs, replayed through the platform's sink (the one the Celery worker
writes with), so that page tests read what a real run writes without training while they wait.

    python -m tests.e2e.recorded            # train each recording's run once and write recorded/<name>.json

A recording is the RunInfo, every StepReport (metrics, samples with their token data, validation samples,
distributions) and the checkpoint steps of a run of the demo model and data (assets/demo), with the config
in RECORDINGS. ``replay`` claims a queued run as a worker would and hands the reports to ``PlatformSink``:
the rows, the live events on the run's channel group and the run's status are the worker's. One browser
test (tests/e2e/test_live_run.py) still launches and trains a real run end to end.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dapo.loop.report import RunInfo, SampleRecord, Sink, StepReport

HERE = Path(__file__).resolve().parent / "recorded"
DEMO = Path(__file__).resolve().parents[2] / "assets" / "demo"
SMALL = {  # the browser tests' small demo run (tests/e2e/support.py SMALL_RUN), without checkpoints
    "optim.total_steps": 4,
    "data.train_batch_size": 4,
    "data.gen_batch_size": 4,
    "rollout.n": 4,
    "rollout.max_response_length": 12,
    "algorithm.overlong_buffer_len": 4,
    "optim.mini_batch_size": 2,
    "optim.micro_batch_size": 8,
    "validation.every_n_steps": 0,
    "checkpoint.every_n_steps": 0,
    "execution.torch_threads": 1,
    "data.max_prompt_length": 64,
    "algorithm.dynamic_sampling": False,  # 12-token answers: every group would be all-wrong
}
COMPARED = {  # two runs to compare: validation at steps 0, 2 and 3 (two problems, two samples each)
    **SMALL,
    "optim.total_steps": 3,
    "validation.every_n_steps": 2,
    "validation.max_problems": 2,
    "validation.n_samples": 2,
}
RECORDINGS: dict[str, dict[str, Any]] = {
    "inspector": SMALL,
    "compare-seed0": COMPARED,
    "compare-seed1": {**COMPARED, "seed": 1, "optim.lr": 4e-5},
}
"""Each recording's overrides of the tiny_cpu preset (model and data: the demo's)."""


def config_of(name: str, paths: dict[str, str] | None = None) -> Any:
    """The run config of a recording; ``paths`` replaces the demo's model and data paths."""
    from dapo.runconfig.presets import get_preset

    demo_paths = {
        "model.path": str(DEMO / "model"),
        "data.train_path": str(DEMO / "data" / "train.parquet"),
        "data.val_path": str(DEMO / "data" / "test.parquet"),
    }
    return get_preset("tiny_cpu").with_overrides({**demo_paths, **RECORDINGS[name], **(paths or {})})


class Recorder(Sink):
    def __init__(self) -> None:
        self.info: dict[str, Any] = {}
        self.reports: list[dict[str, Any]] = []

    def on_start(self, info: RunInfo) -> None:
        self.info = asdict(info)

    def on_step(self, report: StepReport) -> None:
        self.reports.append(report.to_dict())


def record(name: str) -> Path:
    """Train the recording's run and write recorded/<name>.json."""
    from dapo.loop.runner import run

    recorder = Recorder()
    with tempfile.TemporaryDirectory() as out:
        result = run(config_of(name), out_dir=out, sinks=[recorder])
    if result.status != "succeeded":
        raise SystemExit(f"{name}: the run {result.status}: {result.error}")
    HERE.mkdir(exist_ok=True)
    path = HERE / f"{name}.json"
    path.write_text(json.dumps({"info": recorder.info, "reports": recorder.reports}, separators=(",", ":")))
    return path


def load(name: str) -> tuple[dict[str, Any], list[StepReport]]:
    """A recording's RunInfo fields and its step reports, in step order."""
    data = json.loads((HERE / f"{name}.json").read_text())
    return data["info"], [_report(r) for r in data["reports"]]


def _report(row: dict[str, Any]) -> StepReport:
    samples = [SampleRecord(**s) for s in row.pop("samples")]
    val_samples = [SampleRecord(**s) for s in row.pop("val_samples")]
    return StepReport(**row, samples=samples, val_samples=val_samples)


def replay(
    run: Any,
    name: str,
    *,
    steps: Iterable[int] | None = None,
    finish: bool = True,
    pace_s: float = 0.0,
    between: Callable[[int], None] | None = None,
) -> Any:
    """Write a recording's steps into ``run`` as the worker would: claim it, start it, each step through
    ``PlatformSink.on_step`` (``steps``: only these; ``pace_s`` apart; ``between(step)`` after each), then
    finish it succeeded (``finish``). Returns the sink, to go on with later steps."""
    from worker.sink import PlatformSink

    info, reports = load(name)
    worker_id = f"replay:{name}"
    if run.status == "queued":
        assert run.claim(worker_id), f"run {run.pk} could not be claimed"
    sink = PlatformSink(run, worker_id)
    if run.started_at is None:
        sink.on_start(RunInfo(**{**info, "config": run.config}))
    chosen = None if steps is None else set(steps)
    for report in reports:
        if chosen is None or report.step in chosen:
            sink.on_step(report)
            if between is not None:
                between(report.step)
            time.sleep(pace_s)
    if finish:
        sink.on_finish("succeeded")
    return sink


if __name__ == "__main__":
    for recording in sys.argv[1:] or RECORDINGS:
        print(record(recording))
