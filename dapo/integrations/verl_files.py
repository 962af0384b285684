"""verl's own output files, read as they are: its metric records and its per-step generation dumps.

The formats, from verl's source (verl/utils/tracking.py, verl/utils/logger/aggregate_logger.py,
verl/trainer/ppo/ray_trainer.py):

- **metrics, file backend** (``trainer.logger=[file]``): ``FileLogger.log`` appends one JSON line per
  ``logger.log(data, step)``: ``{"step": 3, "data": {"actor/entropy": 0.61, ...}}`` to
  ``$VERL_FILE_LOGGER_PATH``, or ``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl``;
- **metrics, console backend** (``trainer.logger=[console]``): ``LocalLogger.log`` prints
  ``step:3 - actor/entropy:0.61 - critic/score/mean:0.2`` (numbers only, ``pprint.pformat``), among
  other output;
- **generations** (``trainer.rollout_data_dir``, ``trainer.validation_data_dir``): ``_dump_generations``
  writes ``<dir>/<global_step>.jsonl``, one line per sample: ``{"input", "output", "gts", "score",
  "step"}`` plus every reward extra info of the batch's length. With the DAPO reward manager and a reward
  function that returns a dict (math_dapo: ``{"score", "acc", "pred"}``), ``score`` is the function's own
  score and the overlong penalty is ``overlong_reward`` (when ``overlong_buffer.log``); with one that
  returns a number, ``score`` is the token-level reward (penalty included) and ``acc`` that number.
  Validation before training is step 0. A dump holds no token counts, advantages nor groups: samples with
  the same input in one step are one group; lengths and advantages stay "not recorded by verl".

Standard library only: the platform's importer reads uploads with it, ``dapo.integrations.verl`` follows
files with it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONSOLE_LINE = re.compile(r"^step:(\d+) - (.*)$")
DUMP_NAME = re.compile(r"^(\d+)\.jsonl$")


class VerlFormatError(ValueError):
    """A file that is not in verl's format: which file, which line, and what is wrong."""

    def __init__(self, where: str, line: int | None, message: str) -> None:
        self.where, self.line = where, line
        super().__init__(f"{where}{f', line {line}' if line else ''}: {message}")


def _number(value: Any) -> float | None | str:
    """A metric value: a number, None (NaN, inf, null), or "skip" for what is no number (a string...)."""
    if isinstance(value, bool) or value is None:
        return None if value is None else float(value)
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    return "skip"


def metric_points(where: str, lines: list[str], first_line: int = 1) -> list[dict[str, Any]]:
    """Points ``{"step", "metrics"}`` from complete lines of a file-backend JSONL or a console log (the
    format is told by the first line that is either: a JSON object, or ``step:N - ...``)."""
    points: list[dict[str, Any]] = []
    for number, raw in enumerate(lines, start=first_line):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise VerlFormatError(where, number, f"not JSON ({e.msg})") from None
            step, data = record.get("step"), record.get("data")
            if not isinstance(step, int) or isinstance(step, bool) or step < 0 or not isinstance(data, dict):
                raise VerlFormatError(
                    where, number, 'expected {"step": N, "data": {metric: value}} (verl file logger)'
                )
            metrics = {str(k): v for k, v in ((k, _number(v)) for k, v in data.items()) if v != "skip"}
        elif match := CONSOLE_LINE.match(line):
            step = int(match.group(1))
            metrics = {}
            for part in match.group(2).split(" - "):
                name, sep, value = part.rpartition(":")
                if not sep:
                    continue
                try:
                    value_f = float(value)
                except ValueError:
                    continue  # pformat of something else: verl prints numbers only
                metrics[name] = value_f if math.isfinite(value_f) else None
        else:
            continue  # the console backend's lines sit among other output
        if metrics:
            points.append({"step": step, "metrics": metrics})
    return points


def dump_step(name: str) -> int | None:
    """The step of a generation dump from its file name (``12.jsonl``), or None for another file."""
    match = DUMP_NAME.match(Path(name).name)
    return int(match.group(1)) if match else None


@dataclass
class DumpReader:
    """One dump file's samples, line by line: the line number is the sample's index, and the inputs met so
    far in the file number the groups."""

    where: str
    step: int
    split: str
    groups: dict[str, int] = field(default_factory=dict)
    index: int = 0

    def samples(self, lines: list[str]) -> list[dict[str, Any]]:
        out = []
        for raw in lines:
            self.index += 1
            if not raw.strip():
                continue
            out.append(self.sample(raw, self.index))
        return out

    def sample(self, raw: str, line: int) -> dict[str, Any]:
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as e:
            raise VerlFormatError(self.where, line, f"not JSON ({e.msg})") from None
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("input"), str)
            or not isinstance(row.get("output"), str)
        ):
            raise VerlFormatError(
                self.where, line, 'expected {"input": str, "output": str, "gts", "score", "step", ...}'
            )
        score = _number(row.get("score"))
        if not isinstance(score, float):
            raise VerlFormatError(
                self.where, line, f"score must be a number, got {json.dumps(row.get('score'))[:40]}"
            )
        if isinstance(row.get("step"), int) and row["step"] != self.step:
            raise VerlFormatError(self.where, line, f"step {row['step']} in the dump of step {self.step}")
        penalty = _number(row.get("overlong_reward"))
        penalty = penalty if isinstance(penalty, float) else 0.0
        acc = row.get("acc")
        from_dict = isinstance(acc, bool) or "pred" in row  # the reward function returned a dict
        own = score if from_dict else score - penalty  # its own score, before the overlong penalty
        sample: dict[str, Any] = {
            "step": self.step,
            "split": self.split,
            "index": line - 1,
            "group": self.groups.setdefault(row["input"], len(self.groups)),
            "prompt": row["input"],
            "completion": row["output"],
            "rewards": {"score": own},
            "overlong_penalty": penalty,
            "reward": own + penalty,
            "acc": acc if isinstance(acc, bool) else None,
        }
        if row.get("gts") is not None:
            sample["ground_truth"] = row["gts"] if isinstance(row["gts"], str) else json.dumps(row["gts"])
        if isinstance(row.get("pred"), str):
            sample["pred"] = row["pred"]
        return sample


def read_config(path: Path) -> dict[str, Any]:
    """verl's config: a JSON file, or YAML (Hydra's ``.hydra/config.yaml``) when PyYAML is installed."""
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise VerlFormatError(str(path), None, "reading YAML needs PyYAML; give a JSON config") from None
        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise VerlFormatError(str(path), None, "the config must be a mapping")
    return data
