"""Validation and evaluation metrics over n samples per prompt, per data source (docs/metrics.md).

For each prompt, each value (acc as 0/1, score) over its n samples gives:

    mean@n               mean of the n values                                   (paper avg@n)
    std@n                population standard deviation of the n values
    best@k/mean, /std    bootstrap: B resamples of k of the n samples WITH replacement (seeded), the
    worst@k/mean, /std   max (best) or min (worst) of each; mean and std over the B resamples
    maj@k/mean, /std     bootstrap as above; in each resample, a vote on the extracted answer (pred):
                         the value of the first sample (in resample order) holding the most common
                         answer, ties going to the answer met first
    pass@k (acc only)    Chen et al. 2021 unbiased estimator 1 - C(n-c, k) / C(n, k), c correct of n

for k = 1 (pass@k only), 2, 4, 8, ... below n, and n. Each is averaged over the prompts of a data source
(``val/<source>/<var>/<metric>``) and over every prompt (``val/<var>/<metric>``). The bootstrap follows
verl's ``process_validation_metrics``: a NumPy legacy generator seeded with 42 for every (prompt, k),
so the resample indices of a given (n, k) are the same for every prompt and value.

Pure NumPy, torch-free: the platform and the evaluation CLI import it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

N_BOOTSTRAP = 1000
"""Resamples per (prompt, k), as verl."""
BOOTSTRAP_SEED = 42
"""Seed of the resampling generator, reset for every (prompt, k), as verl."""
VOTED_VALUES = ("acc", "score")
"""Values that get the full set of metrics; ``reward`` gets mean@n only (no length penalty in validation,
so it equals score)."""


@dataclass(frozen=True)
class PromptSamples:
    """The n samples of one prompt: where it comes from and what each sample scored."""

    source: str
    """Data source label (``val/<source>/...``)."""
    acc: Sequence[float]
    """1.0 where the sample is correct, else 0.0."""
    score: Sequence[float]
    """Correctness score of each sample (+1 / -1 for math_dapo)."""
    reward: Sequence[float]
    """Sequence reward of each sample (score plus any length penalty)."""
    pred: Sequence[str]
    """The answer the reward function extracted from each sample (the vote key of maj@k)."""
    length: Sequence[int]
    """Response length of each sample, in tokens."""


def ks_for(n: int) -> list[int]:
    """The k of best@k/worst@k/maj@k: 2, 4, 8, ... below n, then n; none for n = 1 (verl's list)."""
    if n <= 1:
        return []
    ks, k = [], 2
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of Chen et al. 2021 (Codex paper, eq. 1): the chance that k samples drawn without
    replacement from n, c of them correct, hold at least one correct: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@lru_cache(maxsize=64)
def bootstrap_indices(
    n: int, k: int, n_bootstrap: int = N_BOOTSTRAP, seed: int = BOOTSTRAP_SEED
) -> np.ndarray:
    """(n_bootstrap, k) sample indices in [0, n): row b is resample b, drawn with replacement by a legacy
    NumPy generator seeded with ``seed``, one ``choice`` call per resample (verl's stream, exactly)."""
    rng = np.random.RandomState(seed)
    rows = [rng.choice(n, size=k, replace=True) for _ in range(n_bootstrap)]
    out = np.stack(rows) if rows else np.zeros((0, k), dtype=np.int64)
    out.setflags(write=False)
    return out


def majority_pick(codes: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """For each resample (row of ``idx``, (B, k)), the index into the n samples whose value the vote
    returns: the first sample, in resample order, holding the most common answer; among equally common
    answers, the one met first (Python's ``Counter.most_common`` / verl's ``calc_maj_val``).

    codes: (n,) integer code of each sample's answer. Returns (B,) sample indices."""
    drawn = codes[idx]  # (B, k) answer codes
    B, k = drawn.shape
    n_codes = int(codes.max()) + 1 if codes.size else 1
    onehot = drawn[:, :, None] == np.arange(n_codes)[None, None, :]  # (B, k, C)
    counts = onehot.sum(axis=1)  # (B, C)
    first = np.where(onehot.any(axis=1), onehot.argmax(axis=1), k)  # (B, C) first position of each answer
    top = counts == counts.max(axis=1, keepdims=True)  # (B, C) the most common answers
    winner = np.where(top, first, k + 1).argmin(axis=1)  # (B,) the most common answer met first
    position = first[np.arange(B), winner]  # (B,)
    return idx[np.arange(B), position]


def prompt_metrics(
    p: PromptSamples, *, n_bootstrap: int = N_BOOTSTRAP, seed: int = BOOTSTRAP_SEED
) -> dict[str, dict[str, float]]:
    """{var: {metric: value}} of one prompt (see the module docstring); var in acc, score, reward,
    response_length."""
    n = len(p.acc)
    values = {"acc": np.asarray(p.acc, dtype=np.float64), "score": np.asarray(p.score, dtype=np.float64)}
    out: dict[str, dict[str, float]] = {var: {f"mean@{n}": float(v.mean())} for var, v in values.items()}
    out["reward"] = {f"mean@{n}": float(np.mean(p.reward))}
    out["response_length"] = {"mean": float(np.mean(p.length))}
    correct = int(values["acc"].sum())
    for k in [1, *ks_for(n)]:
        out["acc"][f"pass@{k}"] = pass_at_k(n, correct, k)
    if n <= 1:
        return out
    _, codes = np.unique(np.asarray(p.pred, dtype=object).astype(str), return_inverse=True)
    for var, v in values.items():
        out[var][f"std@{n}"] = float(v.std())
    for k in ks_for(n):
        idx = bootstrap_indices(n, k, n_bootstrap, seed)
        picked = majority_pick(codes.reshape(-1), idx)
        for var, v in values.items():
            drawn = v[idx]  # (B, k)
            for name, per_resample in (
                (f"best@{k}", drawn.max(axis=1)),
                (f"worst@{k}", drawn.min(axis=1)),
                (f"maj@{k}", v[picked]),
            ):
                out[var][f"{name}/mean"] = float(per_resample.mean())
                out[var][f"{name}/std"] = float(per_resample.std())
    return out


def source_label(name: str) -> str:
    """A data source name made safe for a metric name: letters, digits and ``_.@-``; others become ``_``."""
    label = re.sub(r"[^A-Za-z0-9_.@-]", "_", name.strip()) or "unnamed"
    return label[:64]


def validation_metrics(
    prompts: Iterable[PromptSamples],
    *,
    prefix: str = "val",
    n_bootstrap: int = N_BOOTSTRAP,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, float]:
    """Every metric averaged over the prompts of each source (``<prefix>/<source>/<var>/<metric>``) and
    over all prompts (``<prefix>/<var>/<metric>``)."""
    by_source: dict[str, list[dict[str, dict[str, float]]]] = {}
    every: list[dict[str, dict[str, float]]] = []
    for p in prompts:
        m = prompt_metrics(p, n_bootstrap=n_bootstrap, seed=seed)
        by_source.setdefault(source_label(p.source), []).append(m)
        every.append(m)
    out = _averaged(every, prefix)
    for source, ms in by_source.items():
        out.update(_averaged(ms, f"{prefix}/{source}"))
    return out


def _averaged(per_prompt: list[dict[str, dict[str, float]]], prefix: str) -> dict[str, float]:
    """Mean over prompts of each (var, metric) (prompts with other n contribute to their own names)."""
    sums: dict[str, list[float]] = {}
    for m in per_prompt:
        for var, metrics in m.items():
            for name, value in metrics.items():
                sums.setdefault(f"{prefix}/{var}/{name}", []).append(value)
    return {name: float(np.mean(values)) for name, values in sums.items()}
