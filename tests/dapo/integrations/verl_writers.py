"""verl's own writers, copied from its source, to make fixtures in its exact formats: what
``FileLogger.log`` (verl/utils/tracking.py), ``LocalLogger.log`` (verl/utils/logger/aggregate_logger.py)
and ``RayPPOTrainer._dump_generations`` (verl/trainer/ppo/ray_trainer.py) write, and a small DAPO run made
of them (``write_run``): validation at step 0 and 2, two training steps of 2 prompts x 4 samples with
the DAPO reward manager's extras (math_dapo returns score, acc, pred; overlong_buffer.log adds
overlong_reward and overlong)."""

from __future__ import annotations

import json
import numbers
import os
import pprint
from pathlib import Path
from typing import Any, BinaryIO


def file_logger_log(fp: BinaryIO, data: dict[str, Any], step: int) -> None:
    """FileLogger.log: ``orjson.dumps({"step": step, "data": data}) + b"\\n"`` (orjson: compact JSON)."""
    data = {"step": step, "data": data}
    fp.write(json.dumps(data, separators=(",", ":")).encode() + b"\n")
    fp.flush()


def concat_dict_to_str(dict: dict, step: int) -> str:  # noqa: A002 (verl's own signature)
    output = [f"step:{step}"]
    for k, v in dict.items():
        if isinstance(v, numbers.Number):
            output.append(f"{k}:{pprint.pformat(v)}")
    output_str = " - ".join(output)
    return output_str


def dump_generations(global_steps, inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path):  # noqa: ANN001
    """Dump rollout/validation samples as JSONL."""
    os.makedirs(dump_path, exist_ok=True)
    filename = os.path.join(dump_path, f"{global_steps}.jsonl")

    n = len(inputs)
    base_data = {
        "input": inputs,
        "output": outputs,
        "gts": gts,
        "score": scores,
        "step": [global_steps] * n,
    }

    for k, v in reward_extra_infos_dict.items():
        if len(v) == n:
            base_data[k] = v

    lines = []
    for i in range(n):
        entry = {k: v[i] for k, v in base_data.items()}
        lines.append(json.dumps(entry, ensure_ascii=False))

    with open(filename, "w") as f:
        f.write("\n".join(lines) + "\n")


PROMPTS = ["What is 2+3? Put the answer after Answer:", "What is 7×6? Put the answer after Answer:"]
TRUTHS = ["5", "42"]


def step_batch(step: int) -> dict[str, Any]:
    """One step's rollouts: 4 samples per prompt, the last one of each group over length."""
    inputs, outputs, gts, scores, acc, pred, overlong = [], [], [], [], [], [], []
    for p, (prompt, truth) in enumerate(zip(PROMPTS, TRUTHS, strict=True)):
        for j in range(4):
            right = (j + step + p) % 3 == 0
            answer = truth if right else str(int(truth) + j + 1)
            inputs.append(prompt)
            outputs.append(f"Let me think… Answer: {answer}")
            gts.append(truth)
            scores.append(1.0 if right else -1.0)
            acc.append(right)
            pred.append(answer)
            overlong.append(-0.25 if j == 3 else 0.0)
    extras = {"score": scores, "acc": acc, "pred": pred, "overlong_reward": overlong,
              "overlong": [o < 0 for o in overlong]}  # fmt: skip
    return {"inputs": inputs, "outputs": outputs, "gts": gts, "scores": scores, "extras": extras}


def step_metrics(step: int) -> dict[str, Any]:
    return {
        "actor/entropy": 0.9 - 0.1 * step,
        "actor/pg_loss": 0.01 * step,
        "critic/score/mean": -0.5 + 0.25 * step,
        "response_length/mean": 21.0 + step,
        "timing_s/gen": 1.5,
        "training/global_step": step,
        "training/epoch": 0,
    }


def val_metrics(step: int) -> dict[str, Any]:
    return {"val-core/math_dapo/acc/mean@4": 0.25 + 0.25 * step / 2, "val-aux/math_dapo/score/std@4": 0.5}


def write_step(root: Path, step: int, fp: BinaryIO, *, validate: bool) -> None:
    """What verl writes at global step ``step``: the rollout dump, the validation dump, then the step's
    metric record (verl logs after dumping)."""
    metrics: dict[str, Any] = {}
    if step > 0:
        b = step_batch(step)
        dump_generations(
            step, b["inputs"], b["outputs"], b["gts"], b["scores"], b["extras"], root / "rollout"
        )
        metrics |= step_metrics(step)
    if validate:
        b = step_batch(step + 10)
        extras = {k: v for k, v in b["extras"].items() if not k.startswith("overlong")}
        dump_generations(step, b["inputs"], b["outputs"], b["gts"], b["scores"], extras, root / "validation")
        metrics |= val_metrics(step)
    file_logger_log(fp, metrics, step)


def write_run(root: Path, steps: int = 2) -> Path:
    """A finished verl DAPO run of ``steps`` steps in ``root`` (validation before training and at the end)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(CONFIG))
    with open(root / "metrics.jsonl", "wb", buffering=0) as fp:
        for step in range(steps + 1):
            write_step(root, step, fp, validate=step in (0, steps))
    return root


CONFIG = {
    "algorithm": {"adv_estimator": "grpo", "filter_groups": {"enable": True, "metric": "acc"}},
    "actor_rollout_ref": {"actor": {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28}, "rollout": {"n": 4}},
    "trainer": {"total_training_steps": 2, "project_name": "dapo", "experiment_name": "tiny"},
}
