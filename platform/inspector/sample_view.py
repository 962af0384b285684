"""One sample in full: its token view (per-token log-prob, entropy and importance ratio, with the marks of
how the loss clipped each token under the run's ε_low, ε_high and dual-clip c) and its answer marked in
the response.
"""

from __future__ import annotations

import math
from typing import Any

from runs.models import Run, Sample

from dapo.runconfig import AlgorithmConfig


def clip_params(run: Run) -> dict[str, float | None]:
    """ε_low, ε_high and the dual-clip c of the run's stored config (the algorithm's defaults if absent)."""
    algo = run.config.get("algorithm") if isinstance(run.config, dict) else None
    algo = algo if isinstance(algo, dict) else {}
    defaults = AlgorithmConfig()
    clip_c = algo.get("clip_c", defaults.clip_c)
    return {
        "clip_low": float(algo.get("clip_low", defaults.clip_low)),
        "clip_high": float(algo.get("clip_high", defaults.clip_high)),
        "clip_c": None if clip_c is None else float(clip_c),
    }


def clip_flag(
    ratio: float | None, advantage: float, clip_low: float, clip_high: float, clip_c: float | None
) -> str:
    """How dapo.algo.loss.policy_loss treated a token (docs/dapo.md §2), from its ratio and advantage:
    "high" where A > 0 and the surrogate is clipped at 1 + ε_high (pg2 > pg1), "low" where A < 0 and it
    is clipped at 1 − ε_low (pg2 > pg1), "dual" where A < 0 and the dual clip −A·c binds; "" otherwise."""
    if ratio is None:
        return ""
    pg1 = -advantage * ratio
    pg2 = -advantage * min(max(ratio, 1.0 - clip_low), 1.0 + clip_high)
    if pg2 > pg1:
        return "high" if advantage > 0 else "low"
    if clip_c is not None and advantage < 0 and max(pg1, pg2) > -advantage * clip_c:
        return "dual"
    return ""


def token_view(sample: Sample, clip: dict[str, float | None]) -> dict[str, Any] | None:
    """Per-token arrays aligned with the tokens (None where a value is missing), with clip marks."""
    if not sample.tokens:
        return None
    n = len(sample.tokens)

    def aligned(values: Any) -> list[float | None] | None:
        if not isinstance(values, list) or not values:
            return None
        out = [float(v) if isinstance(v, int | float) and math.isfinite(v) else None for v in values[:n]]
        return out + [None] * (n - len(out))

    ratio = aligned(sample.token_ratio)
    low, high, c = clip["clip_low"] or 0.0, clip["clip_high"] or 0.0, clip["clip_c"]
    advantage = sample.advantage or 0.0  # null only on external runs' samples, which hold no tokens
    flags = [clip_flag(r, advantage, low, high, c) for r in ratio] if ratio else None
    counts = {k: (flags or []).count(k) for k in ("high", "low", "dual")}
    return {
        "tokens": [str(t) for t in sample.tokens],
        "logprob": aligned(sample.token_logprobs),
        "entropy": aligned(sample.token_entropy),
        "ratio": ratio,
        "clip": flags,
        "counts": counts,
        "advantage": sample.advantage,
        "ratio_low": 1.0 - low,
        "ratio_high": 1.0 + high,
        **clip,
    }


def mark_answer(response: str, pred: str) -> tuple[str, str, str]:
    """The response split around the last occurrence of the extracted answer (before, answer, after)."""
    at = response.rfind(pred) if pred and pred != "[INVALID]" else -1
    if at < 0:
        return response, "", ""
    return response[:at], pred, response[at + len(pred) :]
