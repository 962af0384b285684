"""Where the heavy work of a step runs: in this process, or on Ray actors (dapo.ray_backend).

A backend offers the operations the trainer's loop needs; the loop is the same for both:

    generate(prompts, params) -> completions          rollout engines
    score(prompts, responses, ground_truths, data)    reward functions (data: the DataConfig)
    compute_logprobs(prompts, responses)              old-policy log-probs and entropies
    update(batch) -> (metrics, ratios, entropies); after_update()    learners, then engines
    set_lr, state_dict / load_state_dict, save_pretrained, memory_stats, close
    hardware_samples() -> samples the workers took since the last call (dapo.hardware; none in-process)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from dapo.actor import PolicyActor, UpdateBatch, UpdateResult
from dapo.batching import score_locally
from dapo.config import DataConfig, RunConfig
from dapo.report import HardwareSample
from dapo.rollout.base import Completion, SamplingParams


class Backend(Protocol):
    tokenizer: Any

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]: ...
    def score(
        self, prompts: list[str], responses: list[str], ground_truths: list[str], data: DataConfig
    ) -> list[Any]: ...
    def compute_logprobs(
        self, prompts: list[list[int]], responses: list[list[int]]
    ) -> tuple[list[list[float]], list[list[float]]]: ...
    def update(self, batch: UpdateBatch) -> UpdateResult: ...
    def after_update(self) -> None: ...
    def set_lr(self, lr: float) -> None: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def save_pretrained(self, path: str | Path) -> None: ...
    def memory_stats(self) -> dict[str, float]: ...
    def hardware_samples(self) -> list[HardwareSample]: ...
    def close(self) -> None: ...


class LocalBackend:
    """Everything in this process: one PolicyActor whose rollout engine shares the learner's weights."""

    def __init__(self, config: RunConfig) -> None:
        self.actor = PolicyActor(config)
        self.tokenizer = self.actor.tokenizer

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        return self.actor.generate(prompts, params)

    def score(
        self, prompts: list[str], responses: list[str], ground_truths: list[str], data: DataConfig
    ) -> list[Any]:
        return score_locally(prompts, responses, ground_truths, data)

    def compute_logprobs(self, prompts, responses):
        return self.actor.compute_logprobs(prompts, responses)

    def update(self, batch: UpdateBatch):
        return self.actor.update(batch)

    def after_update(self) -> None:
        self.actor.after_update()

    def set_lr(self, lr: float) -> None:
        self.actor.set_lr(lr)

    def state_dict(self) -> dict[str, Any]:
        return self.actor.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state)

    def save_pretrained(self, path: str | Path) -> None:
        self.actor.save_pretrained(path)

    def memory_stats(self) -> dict[str, float]:
        return self.actor.memory_stats()

    def hardware_samples(self) -> list[HardwareSample]:
        return []  # one process: the trainer's own monitor samples it

    def close(self) -> None:
        self.actor.engine.close()


def make_backend(config: RunConfig) -> Backend:
    if config.execution.backend == "ray":
        from dapo.ray_backend import RayBackend  # imports ray: only when chosen

        return RayBackend(config)
    return LocalBackend(config)
