"""The other trainers' metric names mapped onto ours where they mean the same (docs/metrics.md), and kept
as they are where nothing of ours matches: an external run's curves lie on the same charts as ours.

Standard library only: the platform applies it when an external run's metrics arrive (runs.external).
"""

from __future__ import annotations

SOURCES = ("trl", "verl")

TRL_NAMES: dict[str, str] = {
    # TRL's Trainer: the learning rate of the step, the gradient norm before clipping
    "learning_rate": "actor/lr",
    "grad_norm": "actor/grad_norm",
    # GRPOTrainer: completion lengths in tokens, EOS included, over every generated sample (TRL trains on
    # every group, so the generated batch is the kept batch); clipped_ratio is the share that hit
    # max_completion_length without an EOS, as ours
    "completions/mean_length": "response_length/mean",
    "completions/min_length": "response_length/min",
    "completions/max_length": "response_length/max",
    "completions/clipped_ratio": "response_length/clip_ratio",
    # the weighted sum of the reward functions, mean over the batch: our r_i over the (whole) batch
    "reward": "critic/rewards/mean",
    # the current policy's token entropy during the loss, over the completion mask: ours during the update
    "entropy": "actor/entropy_update",
}
"""TRL's GRPOTrainer names (trl/trainer/grpo_trainer.py, ``_metrics`` and Trainer.log) → ours. Each reward
function's ``rewards/<name>/mean`` becomes ``reward/<name>/mean`` (``ours``)."""

VERL_PREFIXES: dict[str, str] = {"val-core/": "val/", "val-aux/": "val/"}
"""verl splits validation metrics into headline (val-core) and the rest (val-aux); we log both under val/
(docs/metrics.md). verl's training names (actor/, critic/, response_length/, timing_s/, perf/) are ours."""

MAX_NAME = 128
"""The longest metric name the platform stores (runs.MetricPoint.name)."""


def ours(source: str, name: str) -> str:
    """The platform's name for metric ``name`` as ``source`` ("trl", "verl") logs it; unmapped: unchanged."""
    if source == "trl":
        if name in TRL_NAMES:
            return TRL_NAMES[name]
        if name.startswith("rewards/") and name.endswith("/mean") and name.count("/") == 2:
            return "reward/" + name[len("rewards/") :]  # each reward function's own mean, before its weight
        return name
    if source == "verl":
        for prefix, to in VERL_PREFIXES.items():
            if name.startswith(prefix):
                return to + name[len(prefix) :]
    return name


def theirs(source: str, name: str) -> str:
    """The inverse of ``ours``: the name ``source`` ("trl", "verl") gives our metric ``name``."""
    if source == "trl":
        back = {v: k for k, v in TRL_NAMES.items()}
        if name in back:
            return back[name]
        if name.startswith("reward/") and name.endswith("/mean") and name.count("/") == 2:
            return "rewards/" + name[len("reward/") :]
    return name


def renamed(source: str, metrics: dict[str, object]) -> dict[str, object]:
    """``metrics`` with each name mapped by ``ours``; on a clash the name already ours wins."""
    out: dict[str, object] = {}
    for name, value in metrics.items():
        mapped = ours(source, name)
        if mapped in out and mapped != name:
            continue
        out[mapped] = value
    return out
