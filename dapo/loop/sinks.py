"""Sinks that ship with dapo/: JSONL files in the run directory, and a console progress bar."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, TextIO

from dapo.loop.distributions import LEVELS
from dapo.loop.report import HardwareSample, RunInfo, Sink, Status, StepReport

KEY_METRICS = ("critic/score/mean", "train/acc/mean", "actor/entropy", "response_length/mean")


def headline_validation(metrics: dict[str, float]) -> dict[str, float]:
    """The validation numbers worth a console line: acc mean@n and pass@n at the largest n, overall and
    per source (the full set, docs/metrics.md, is in metrics.jsonl)."""
    ns = [int(m.group(1)) for k in metrics if (m := re.fullmatch(r"val/acc/mean@(\d+)", k))]
    if not ns:
        return {}
    wanted = re.compile(rf"val/(?:[^/]+/)?acc/(?:mean|pass)@{max(ns)}")
    return {k: v for k, v in metrics.items() if wanted.fullmatch(k)}


class JsonlSink(Sink):
    """Appends to ``metrics.jsonl`` (one line per step), ``samples.jsonl``, ``distributions.jsonl`` (a
    step's quantiles, ``{"step", "levels", "quantiles": {name: [...]}}``), ``hardware.jsonl`` (one sample a
    line) and ``events.jsonl``.

    On a resume, lines of steps at or after the resumed step are dropped first, so the files hold each
    step once, like the curves of an uninterrupted run.
    """

    FILES = ("metrics.jsonl", "samples.jsonl", "distributions.jsonl", "events.jsonl")
    """Files keyed by step (a resume drops the lines of steps it recomputes); hardware.jsonl is by time."""

    def __init__(self, run_dir: str | Path) -> None:
        self.dir = Path(run_dir)

    def on_start(self, info: RunInfo) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        for name in self.FILES:
            _drop_steps_from(self.dir / name, info.start_step)
        (self.dir / "config.json").write_text(json.dumps(info.config, indent=1), encoding="utf-8")
        self._append(
            "events.jsonl", {"event": "start", "step": info.start_step - 1, "total": info.total_steps}
        )

    def on_step(self, report: StepReport) -> None:
        self._append("metrics.jsonl", {"step": report.step, "wall_time": report.wall_time, **report.metrics})
        if report.distributions:
            row = {"step": report.step, "levels": list(LEVELS), "quantiles": report.distributions}
            self._append("distributions.jsonl", row)
        lines = [s.to_dict() for s in report.samples + report.val_samples]
        if lines:
            with open(self.dir / "samples.jsonl", "a", encoding="utf-8") as f:
                f.writelines(json.dumps(x) + "\n" for x in lines)

    def on_hardware(self, samples: list[HardwareSample]) -> None:
        with open(self.dir / "hardware.jsonl", "a", encoding="utf-8") as f:
            f.writelines(json.dumps(s.to_dict()) + "\n" for s in samples)

    def on_checkpoint(self, step: int, path: str) -> None:
        self._append("events.jsonl", {"event": "checkpoint", "step": step, "path": path})

    def on_finish(self, status: Status, error: str | None = None) -> None:
        self._append("events.jsonl", {"event": "finish", "status": status, "error": error})

    def _append(self, name: str, row: dict[str, Any]) -> None:
        with open(self.dir / name, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


def _drop_steps_from(path: Path, step: int) -> None:
    if not path.exists():
        return
    kept = [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if json.loads(line).get("step", 0) < step
    ]
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class ConsoleSink(Sink):
    """A tqdm progress bar over rollout steps with the key metrics; validation results as lines."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.bar: Any = None

    def on_start(self, info: RunInfo) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=info.total_steps,
            initial=info.start_step - 1,
            desc="dapo",
            unit="step",
            file=self.stream,
            dynamic_ncols=True,
        )

    def on_step(self, report: StepReport) -> None:
        val = headline_validation(report.metrics)
        if val and self.bar is not None:
            self.bar.write(
                f"step {report.step}: " + "  ".join(f"{k} {v:.3f}" for k, v in sorted(val.items()))
            )
        if report.step == 0 or self.bar is None:
            return
        shown = {k.split("/", 1)[1]: f"{report.metrics[k]:.3g}" for k in KEY_METRICS if k in report.metrics}
        self.bar.set_postfix(shown, refresh=False)
        self.bar.update(1)

    def on_finish(self, status: Status, error: str | None = None) -> None:
        if self.bar is not None:
            self.bar.close()
        if error:
            print(f"run {status}: {error}", file=self.stream)
