"""Validation: k samples per held-out problem, accuracy averaged over samples (mean@k) and pass@k."""

from __future__ import annotations

from typing import Any

from dapo.batching import make_rollouts
from dapo.config import RunConfig
from dapo.data import Problem
from dapo.report import SampleRecord
from dapo.rollout.base import SamplingParams


def validate(
    backend: Any,
    tokenizer: Any,
    problems: list[Problem],
    prompts: list[list[int]],
    config: RunConfig,
    *,
    step: int,
) -> tuple[dict[str, float], list[SampleRecord]]:
    """Sample ``validation.n_samples`` responses per problem and score them (no length penalty).

    Metrics: val/acc/mean@k (mean accuracy over all samples, the paper's avg@k), val/acc/pass@k (share of
    problems with at least one correct sample), val/reward/mean@k, val/response_length/mean.
    """
    v = config.validation
    k = v.n_samples
    params = SamplingParams(
        n=k,
        temperature=v.temperature,
        top_p=v.top_p,
        max_new_tokens=config.rollout.max_response_length,
        seed=(config.seed * 7_919 + step) % (2**31),
    )
    completions = backend.generate(prompts, params)
    rollouts = make_rollouts(
        backend, tokenizer, problems, prompts, completions, config, step=step, first_group=0, split="val"
    )
    for r in rollouts:
        r.kept = True
    n = max(len(rollouts), 1)
    solved = [any(r.acc for r in rollouts[g * k : (g + 1) * k]) for g in range(len(problems))]
    metrics = {
        f"val/acc/mean@{k}": sum(r.acc for r in rollouts) / n,
        f"val/acc/pass@{k}": sum(solved) / max(len(problems), 1),
        f"val/reward/mean@{k}": sum(r.score for r in rollouts) / n,
        "val/response_length/mean": sum(len(r.response_ids) for r in rollouts) / n,
    }
    return metrics, [r.record(tokenizer) for r in rollouts]
