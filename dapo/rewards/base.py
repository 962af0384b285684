"""What every reward returns, and how other return values become it.

A reward is a picklable callable (a class, not a closure: Ray pickles what it runs) called as
``reward(response, ground_truth)``. It may return a :class:`RewardResult`, a number (the score; correct
when > 0), a bool (+1 / -1) or a mapping with ``score`` and optionally ``acc`` and ``pred``. A reward that
is cheaper in batches (a remote service) also offers ``score_batch(prompts, responses, ground_truths)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

INVALID = "[INVALID]"
"""The prediction reported when a reward finds no answer in the response."""


@dataclass(frozen=True)
class RewardResult:
    """The verdict on one response."""

    score: float
    """The reward before the overlong penalty: +1.0 / -1.0 for the rule-based rewards."""
    acc: bool
    """Correctness before any length penalty (dynamic sampling's default filter metric)."""
    pred: str
    """The answer the reward extracted, normalised; "[INVALID]" when there is none."""
    scores: dict[str, float] | None = None
    """Several rewards combined: each one's own score by name (before its weight)."""


class RewardError(RuntimeError):
    """A reward could not score at all (a reward service that stays down, a plugin that breaks its
    contract): the run fails with this message rather than training on made-up rewards."""


def as_result(value: Any, where: str) -> RewardResult:
    """A reward's return value as a RewardResult; ``where`` names the reward in the error."""
    if isinstance(value, RewardResult):
        return value
    if isinstance(value, bool):
        return RewardResult(1.0 if value else -1.0, value, "")
    if isinstance(value, int | float):
        return RewardResult(_finite(value, where), value > 0, "")
    if isinstance(value, Mapping) and "score" in value:
        score = _finite(value["score"], where)
        acc = value.get("acc", score > 0)
        if not isinstance(acc, bool):
            raise RewardError(f"{where}: 'acc' must be true or false, got {type(acc).__name__}")
        return RewardResult(score, acc, str(value.get("pred", ""))[:1000])
    attrs = ("score", "acc", "pred")
    if all(hasattr(value, a) for a in attrs):  # a result class of the reward's own with these fields
        return RewardResult(_finite(value.score, where), bool(value.acc), str(value.pred))
    raise RewardError(
        f"{where}: a reward must return a number, a bool, a RewardResult or a mapping with 'score'; "
        f"got {type(value).__name__}"
    )


def _finite(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RewardError(f"{where}: the score must be a finite number, got {value!r:.60}")
    return float(value)
