"""Where the heavy work of a step runs: in this process, or on Ray actors (dapo.cluster.ray_backend).

A backend offers the operations the trainer's loop needs; the loop is the same for both:

    generate(prompts, params) -> completions          rollout engines
    score(prompts, responses, ground_truths, data)    reward functions (data: the DataConfig)
    compute_logprobs(prompts, responses)              old-policy log-probs and entropies
    update(batch) -> (metrics, ratios, entropies); after_update()    learners, then engines
    set_lr, state_dict / load_state_dict, save_pretrained, memory_stats, close
    hardware_samples() -> samples the workers took since the last call (dapo.loop.hardware; none in-process)
    path_decisions() -> which fast path runs for the policy and why (dapo.learner.paths), for the run's log

One-step off-policy generation (``rollout.one_step_off_policy``) adds a behaviour copy of the policy:

    generate_stale(prompts, params)   sample with the behaviour copy; safe to call from another thread
                                      while ``update`` runs
    sync_behaviour()                  load the learner's current weights into the behaviour copy (the
                                      trainer calls it between steps, when no generate_stale runs)

A Ray run whose node died, and which the cluster cannot hold without it, fails with ``NodeLost``;
``is_node_loss(result.error)`` tells its caller (the platform's worker) to queue it again rather than fail it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Protocol

from dapo.cluster.state import NodeLost as NodeLost  # the run's error when a Ray node died with it
from dapo.learner.actor import PolicyActor, UpdateBatch, UpdateResult, engine_options
from dapo.loop.batching import score_locally
from dapo.loop.report import HardwareSample
from dapo.rollout import create_engine
from dapo.rollout.base import Completion, RolloutEngine, SamplingParams
from dapo.runconfig import DataConfig, RunConfig


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
    def generate_stale(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]: ...
    def sync_behaviour(self) -> None: ...
    def set_lr(self, lr: float) -> None: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def save_pretrained(self, path: str | Path) -> None: ...
    def memory_stats(self) -> dict[str, float]: ...
    def hardware_samples(self) -> list[HardwareSample]: ...
    def path_decisions(self) -> list[str]: ...
    def close(self) -> None: ...


class LocalBackend:
    """Everything in this process: one PolicyActor whose rollout engine shares the learner's weights.
    With one-step off-policy generation a second hf engine holds its own copy of the weights (the
    behaviour policy), which a background thread samples from while the learner updates."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.actor = PolicyActor(config)
        self.tokenizer = self.actor.tokenizer
        self._behaviour: RolloutEngine | None = None

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

    def generate_stale(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        if self._behaviour is None:
            self.sync_behaviour()
        assert self._behaviour is not None
        return self._behaviour.generate(prompts, params)

    def sync_behaviour(self) -> None:
        """The first call copies the model (a frozen, separate copy); later ones copy the weights in."""
        if self._behaviour is None:
            model = copy.deepcopy(self.actor.model).eval().requires_grad_(False)
            for p in model.parameters():
                p.grad = None
            self._behaviour = create_engine(
                "hf",
                model=model,
                eos_token_ids=self.actor.eos_ids,
                pad_token_id=self.actor.pad_id,
                seed=self.config.seed,
                **engine_options(self.config),
            )
            return
        self._behaviour.update_weights(self.actor.full_weights())

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

    def path_decisions(self) -> list[str]:
        return self.actor.path_decisions()

    def close(self) -> None:
        self.actor.engine.close()
        if self._behaviour is not None:
            self._behaviour.close()


def is_node_loss(error: str | None) -> bool:
    """Whether a run's error (``RunResult.error``, "TypeName: message" as the trainer writes it) is a
    NodeLost: the caller may queue the run again instead of failing it."""
    return bool(error) and str(error).startswith(f"{NodeLost.__name__}: ")


def make_backend(config: RunConfig, label: str = "") -> Backend:
    """The backend ``config.execution.backend`` names. ``label`` names a Ray run's placement groups
    (``dapo-run-<label>-<role>``, dapo.cluster.state); the trainer passes its run directory's name."""
    if config.execution.backend == "ray":
        from dapo.cluster.ray_backend import RayBackend  # imports ray: only when chosen

        return RayBackend(config, label=label)
    return LocalBackend(config)
