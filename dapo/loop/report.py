"""What the trainer hands out each step: the report dataclasses and the sink interface.

The trainer (on one process or on Ray) calls a list of sinks: ``on_start`` once, ``on_step`` after each
rollout step (and with step 0 for the validation before training), ``on_checkpoint`` after each save,
``on_hardware`` every few seconds (from a thread), ``on_finish`` at the end; it polls ``should_stop`` at
step boundaries (cancellation). The platform's sink writes reports to the database and the browser; dapo/
ships a JSONL sink and a console sink (dapo.loop.sinks).
Reports are plain dataclasses of Python scalars and lists: JSON-serialisable, picklable, torch-free.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["succeeded", "failed", "cancelled"]


@dataclass
class SampleRecord:
    """One sampled response with its reward and how the step used it."""

    step: int
    split: Literal["train", "val"]
    group: int
    """Index of the prompt group within the step (the G samples of a prompt share it)."""
    sample_index: int
    """Index of the sample within the step (groups are contiguous)."""
    problem_index: int
    """The problem's stable index in its dataset (dapo.data.problems.Problem.index)."""
    prompt: str
    response: str
    ground_truth: str
    pred: str
    """The answer the reward function extracted ("[INVALID]" when none)."""
    score: float
    """Correctness score (+1 / -1), before the overlong penalty."""
    acc: bool
    overlong_penalty: float
    reward: float
    """score + overlong_penalty: the sequence reward the advantage is computed from."""
    advantage: float
    length: int
    """Response length in tokens, including the EOS token."""
    truncated: bool
    """Hit max_response_length without an EOS token."""
    kept: bool
    """The group was kept by dynamic sampling and trained on (always True for validation)."""
    tokens: list[str] | None = None
    """Per-token data, for a few samples per step (logging.token_data_samples_per_step)."""
    token_logprobs: list[float] | None = None
    """Log-prob of each token under the sampling policy (rollout engine)."""
    token_entropy: list[float] | None = None
    """Entropy of the policy at each token (old policy, at update time)."""
    token_ratio: list[float] | None = None
    """Importance ratio π_θ/π_old of each token at the first optimiser step that used it."""
    reward_scores: dict[str, float] | None = None
    """Each reward's own score by name, before its weight (data.reward_fn names one or several)."""
    discard_reason: str = ""
    """Why the step did not train on the sample: "" (trained, or validation), a group's reason
    (dapo.algo.sampling.DISCARD_REASONS: all_correct, all_wrong, no_variance, surplus), or "overlong" (in a
    trained group, truncated and masked out of the loss by overlong filtering)."""
    token_old_logprobs: list[float] | None = None
    """log π_old of each token as the loss used it (recomputed by the learner, or π_θ itself when the
    step skipped that forward), for the samples with token data."""
    token_new_logprobs: list[float] | None = None
    """log π_θ of each token at the sample's first optimiser step, for the samples with token data."""
    update_info: dict[str, Any] | None = None
    """For a trained sample: ``minibatch`` (its index), ``minibatch_tokens`` and ``minibatch_seqs`` (that
    mini-batch's valid tokens and sequences, the loss's normalisers) and ``in_loss`` (False: masked)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class StepReport:
    """Everything one rollout step produced."""

    step: int
    """Rollout step just completed, 1-based; 0 for the validation before training."""
    metrics: dict[str, float]
    """Metric name (docs/dapo.md §10: actor/*, critic/*, response_length/*, timing_s/*, perf/*, train/*,
    val/*) to value."""
    samples: list[SampleRecord] = field(default_factory=list)
    """Training samples of the step, kept and filtered groups alike."""
    val_samples: list[SampleRecord] = field(default_factory=list)
    """Validation samples, when validation ran at this step."""
    wall_time: float = 0.0
    """Unix time at the end of the step."""
    elapsed_s: float = 0.0
    """Seconds since the run (or its resumption) started."""
    distributions: dict[str, list[float]] = field(default_factory=dict)
    """Quantity (reward, length, advantage, entropy, ratio) to its quantiles at the levels
    ``dapo.loop.distributions.LEVELS`` (0, 5, ..., 100 percent) over the step's values."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class HardwareSample:
    """One process's resource use at one moment (dapo.loop.hardware lists the ``values``)."""

    time: float
    """Unix time."""
    worker: str
    """Which process: "controller", "learner 0", "rollout 1", ..."""
    values: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class RunInfo:
    """Handed to sinks when the run starts."""

    run_dir: str
    total_steps: int
    start_step: int
    """The first step this process will run (1, or the step after a resumed checkpoint)."""
    config: dict[str, Any]
    num_train_problems: int = 0
    num_val_problems: int = 0


class Sink:
    """Receives reports. Every method has a no-op default; a sink overrides what it needs."""

    def on_start(self, info: RunInfo) -> None:
        pass

    def on_step(self, report: StepReport) -> None:
        pass

    def on_checkpoint(self, step: int, path: str) -> None:
        pass

    def on_finish(self, status: Status, error: str | None = None) -> None:
        pass

    def on_activity(self, what: str) -> None:
        """A sign of life between step reports: a phase begins (``"step 3: generation round 2"``,
        ``"step 10: validation"``, ``"step 10: checkpoint"``). A platform tells a long phase from a stall by
        it. May be called from the off-policy generation thread."""
        pass

    def on_hardware(self, samples: list[HardwareSample]) -> None:
        """Every ``logging.hardware_interval_s``: the run's processes' resource use. Called from the
        hardware monitor's thread, concurrently with the other methods."""
        pass

    def should_stop(self) -> bool:
        """Polled at each step boundary: True asks the trainer to stop (cancel) after saving."""
        return False

    def may_save_checkpoint(self) -> bool:
        """Asked before each checkpoint write: False when this process no longer owns the run's state
        (another controller took the run over), so the trainer must not write into its run directory."""
        return True


@dataclass
class RunResult:
    status: Status
    last_step: int
    error: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    """The last step's metrics."""
