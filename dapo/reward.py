"""The reward names of earlier versions, kept importable: everything lives in :mod:`dapo.rewards`."""

from __future__ import annotations

from dapo.rewards import (
    INVALID,
    REWARD_FUNCTIONS,
    MathDapoReward,
    MathResult,
    RewardFn,
    RewardResult,
    get_reward_fn,
    math_dapo_score,
    normalize_answer,
    overlong_penalty,
)
from dapo.rewards.math_dapo import ANSWER_PATTERN, ANSWER_WINDOW, extract_answer

__all__ = [
    "ANSWER_PATTERN",
    "ANSWER_WINDOW",
    "INVALID",
    "REWARD_FUNCTIONS",
    "MathDapoReward",
    "MathResult",
    "RewardFn",
    "RewardResult",
    "extract_answer",
    "get_reward_fn",
    "math_dapo_score",
    "normalize_answer",
    "overlong_penalty",
]
