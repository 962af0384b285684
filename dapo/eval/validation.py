"""Validation: n samples per held-out problem, scored and summarised per data source (dapo.eval.metrics).

Several validation files (``data.val_path`` then ``data.val_paths``) each report their own metrics under
``val/<source>/...``, and every problem together under ``val/...``. The source label of a problem:

- one validation file: its ``data_source`` column (verl's grouping);
- several files: the file's stem, or ``<stem>-<data_source>`` for a file whose rows name several.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dapo.data.problems import Problem, load_problems
from dapo.eval.metrics import PromptSamples, validation_metrics
from dapo.loop.batching import Rollout, make_rollouts
from dapo.loop.report import SampleRecord
from dapo.rollout.base import SamplingParams
from dapo.runconfig import RunConfig


def load_validation_sets(config: RunConfig) -> tuple[list[Problem], list[str]]:
    """Every validation problem (file order, the first ``validation.max_problems`` of each file when set)
    and its source label."""
    return load_labelled(config.data.validation_files, limit=config.validation.max_problems or None)


def load_labelled(paths: list[str], *, limit: int | None = None) -> tuple[list[Problem], list[str]]:
    """Problems of each file (its first ``limit``) and their source labels (module docstring)."""
    problems: list[Problem] = []
    sources: list[str] = []
    for path in paths:
        loaded = load_problems(path, limit=limit)
        problems.extend(loaded)
        several_sources = len({p.data_source for p in loaded}) > 1
        for p in loaded:
            if len(paths) == 1:
                sources.append(p.data_source)
            else:
                stem = Path(path).stem
                sources.append(f"{stem}-{p.data_source}" if several_sources else stem)
    return problems, sources


def summarise(
    rollouts: list[Rollout], sources: list[str], n: int, *, prefix: str = "val"
) -> dict[str, float]:
    """The metrics of ``n`` contiguous samples per problem, per source and overall (dapo.eval.metrics)."""
    prompts = []
    for g, source in enumerate(sources):
        group = rollouts[g * n : (g + 1) * n]
        prompts.append(
            PromptSamples(
                source=source,
                acc=[float(r.acc) for r in group],
                score=[r.score for r in group],
                reward=[r.reward for r in group],
                pred=[r.pred for r in group],
                length=[len(r.response_ids) for r in group],
            )
        )
    return validation_metrics(prompts, prefix=prefix)


def sample(
    backend: Any,
    tokenizer: Any,
    problems: list[Problem],
    prompts: list[list[int]],
    config: RunConfig,
    *,
    step: int,
    seed: int,
) -> list[Rollout]:
    """``validation.n_samples`` scored responses per problem (no length penalty), contiguous per problem."""
    v = config.validation
    params = SamplingParams(
        n=v.n_samples,
        temperature=v.temperature,
        top_p=v.top_p,
        max_new_tokens=config.rollout.max_response_length,
        seed=seed,
    )
    completions = backend.generate(prompts, params)
    rollouts = make_rollouts(
        backend, tokenizer, problems, prompts, completions, config, step=step, first_group=0, split="val"
    )
    for r in rollouts:
        r.kept = True
    return rollouts


def validate(
    backend: Any,
    tokenizer: Any,
    problems: list[Problem],
    prompts: list[list[int]],
    config: RunConfig,
    *,
    step: int,
    sources: list[str] | None = None,
) -> tuple[dict[str, float], list[SampleRecord]]:
    """Sample ``validation.n_samples`` responses per problem, score them and summarise.

    Metrics (docs/metrics.md), n = validation.n_samples: val/acc/mean@n (the paper's avg@n), std@n,
    best@k/worst@k/maj@k (verl's seeded bootstrap), the unbiased pass@k, the same for score,
    val/reward/mean@n and val/response_length/mean; each also per source as val/<source>/...
    """
    seed = (config.seed * 7_919 + step) % (2**31)
    rollouts = sample(backend, tokenizer, problems, prompts, config, step=step, seed=seed)
    labels = sources if sources is not None else [p.data_source for p in problems]
    metrics = summarise(rollouts, labels, config.validation.n_samples)
    return metrics, [r.record(tokenizer) for r in rollouts]
