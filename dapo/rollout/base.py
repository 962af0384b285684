"""The rollout-engine interface: generate G samples per prompt with per-token log-probs, load new weights.

Every engine (the torch/transformers engine in `hf.py`, vLLM in `vllm.py`) implements `RolloutEngine`; the
trainer codes only against this module. The group invariant (docs/dapo.md §3) holds at the source: the
`n` samples of prompt i are the contiguous slice `[i * n, (i + 1) * n)` of what `generate` returns.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch

Weights = Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]
"""New policy weights: a state dict, or `(name, tensor)` pairs streamed one layer at a time (an FSDP
learner gathers a layer, hands it over and frees it, so no rank ever holds the whole model)."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one `generate` call (vLLM `SamplingParams` / HF `GenerationConfig` names)."""

    n: int = 1
    """Samples per prompt: the group size G of DAPO (verl rollout.n; TRL num_generations)."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy decoding (log-probs are then those of temperature 1)."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of most likely tokens whose mass reaches top_p; 1 = off."""
    top_k: int = -1
    """Keep only the k most likely tokens; -1 (or 0) = off, 1 = greedy."""
    max_new_tokens: int = 64
    """Hard cap on generated tokens per sample (L_max of the overlong shaping; vLLM max_tokens)."""
    seed: int | None = None
    """Per-call seed: same seed, weights and prompts -> same samples on one device; None = engine RNG."""

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            raise ValueError(f"top_k must be -1 (off) or >= 0, got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")

    @property
    def greedy(self) -> bool:
        """True when sampling degenerates to argmax (temperature 0 or top_k 1)."""
        return self.temperature == 0 or self.top_k == 1


@dataclass
class Completion:
    """One sampled continuation of one prompt."""

    token_ids: list[int]
    """Generated ids, INCLUDING the EOS token when finish_reason == "eos"."""
    logprobs: list[float]
    """log π(token) under softmax(logits / temperature), before top-k/top-p truncation; one per token."""
    finish_reason: str
    """"eos" (an EOS id was sampled) or "length" (max_new_tokens reached without EOS)."""


class RolloutEngine(abc.ABC):
    """Generates samples from the current policy and receives new weights from the learner."""

    name: str = "base"

    @abc.abstractmethod
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        """Sample `params.n` completions of each prompt.

        Args:
            prompts: P prompts as token-id lists (no padding), each non-empty.
            params: sampling parameters shared by all prompts.
        Returns:
            P * n completions; the n samples of prompt i are contiguous at [i * n, (i + 1) * n).
        """

    @abc.abstractmethod
    def update_weights(self, weights: Weights) -> None:
        """Load new policy weights (HF parameter names) into the engine.

        Args:
            weights: a state dict or an iterable of `(name, tensor)` pairs, consumed once, in order; the
                engine copies (or sends) each tensor before taking the next, so the caller may free it.
        """

    def sleep(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Free accelerator memory between rollouts (no-op on CPU)."""

    def wake_up(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Undo `sleep` before the next `generate` or `update_weights`."""

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release everything the engine holds; the engine is unusable afterwards."""

    def __enter__(self) -> RolloutEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def named_tensors(weights: Weights) -> Iterator[tuple[str, torch.Tensor]]:
    """The `(name, tensor)` pairs of `weights`, whichever form it takes."""
    return iter(weights.items()) if isinstance(weights, Mapping) else iter(weights)


def check_prompts(prompts: Sequence[Sequence[int]]) -> None:
    """Raise ValueError for an empty prompt (nothing to condition the first token on)."""
    for i, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"prompt {i} is empty; every prompt needs at least one token")
