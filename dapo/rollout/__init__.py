"""Rollout engines behind one interface, chosen by name.

    engine = create_engine("hf", model=policy, eos_token_ids=[2], pad_token_id=0)
    completions = engine.generate(prompt_ids, SamplingParams(n=8, max_new_tokens=48, seed=step))

Names: "hf" (alias "cpu") is our torch/transformers engine, on CPU or CUDA; "vllm" is the GPU production
engine. vLLM (and its Ray) is imported only when "vllm" is chosen: importing this package never imports it.
To add an engine: subclass `RolloutEngine` in a module here and register a factory in `ENGINES`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from dapo.rollout.base import Completion, RolloutEngine, SamplingParams, Weights
from dapo.rollout.hf import HFEngine

__all__ = ["ENGINES", "Completion", "RolloutEngine", "SamplingParams", "Weights", "create_engine"]


def _hf(**kwargs: Any) -> RolloutEngine:
    return HFEngine(**kwargs)


def _vllm(**kwargs: Any) -> RolloutEngine:
    from dapo.rollout.vllm import VLLMEngine  # imports vllm: only when this engine is chosen

    return VLLMEngine(**kwargs)


ENGINES: dict[str, Callable[..., RolloutEngine]] = {"hf": _hf, "cpu": _hf, "vllm": _vllm}
"""Engine name -> factory taking the keyword arguments of `create_engine`."""


def create_engine(
    name: str,
    *,
    model_path: str | None = None,
    model: nn.Module | None = None,
    eos_token_ids: Sequence[int],
    pad_token_id: int,
    device: str = "cpu",
    dtype: str = "float32",
    seed: int = 0,
    **options: Any,
) -> RolloutEngine:
    """Build the rollout engine registered as `name`.

    Args:
        name: a key of ENGINES.
        model_path: local HF model directory (required by "vllm"; used by "hf" when `model` is None).
        model: an nn.Module the "hf" engine shares with the learner (colocated); "vllm" rejects it.
        eos_token_ids: ids ending a sample; pad_token_id: id for padding.
        device, dtype, seed: placement, weight dtype and engine RNG seed.
        options: engine-specific settings (hf: max_batch_size, compact_threshold, fast_decode and the
            other HFEngine arguments; vllm: tensor_parallel_size, gpu_memory_utilization, enforce_eager,
            enable_sleep_mode and further vllm.LLM arguments).
    Raises:
        ValueError: unknown name (the message lists the valid names).
    """
    if name not in ENGINES:
        raise ValueError(f"unknown rollout engine {name!r}; valid names: {', '.join(sorted(ENGINES))}")
    return ENGINES[name](
        model_path=model_path,
        model=model,
        eos_token_ids=eos_token_ids,
        pad_token_id=pad_token_id,
        device=device,
        dtype=dtype,
        seed=seed,
        **options,
    )
