"""Rewards by name: the built-ins, plugins (``package.module:callable``) and a remote service (``http``).

``data.reward_fn`` names one reward or several separated by commas; several are summed with
``data.reward_weights`` (TRL's ``reward_funcs`` + ``reward_weights``), and each one's own score is kept per
sample and logged as ``reward/<name>/mean``. The first one named is the primary reward: its correctness
and extracted answer are the sample's ``acc`` and ``pred``.

This package imports no torch, no math-verify and no plugin at import time: the web process validates
reward names with :func:`reward_errors`, which reads metadata and files but imports no user code.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from dapo.rewards import plugins, remote
from dapo.rewards.base import INVALID, RewardError, RewardResult, as_result
from dapo.rewards.math_dapo import (
    ANSWER_PATTERN,
    ANSWER_WINDOW,
    MathDapoReward,
    MathResult,
    extract_answer,
    math_dapo_score,
    normalize_answer,
    overlong_penalty,
)
from dapo.rewards.rules import BoxedExact, JsonMatch, MultipleChoice, RegexMatch
from dapo.rewards.verify import MathVerifyReward

__all__ = [
    "ANSWER_PATTERN",
    "ANSWER_WINDOW",
    "INVALID",
    "REWARD_FUNCTIONS",
    "CombinedReward",
    "MathDapoReward",
    "MathResult",
    "RewardError",
    "RewardFn",
    "RewardResult",
    "as_result",
    "build_reward",
    "describe_rewards",
    "extract_answer",
    "get_reward_fn",
    "math_dapo_score",
    "normalize_answer",
    "overlong_penalty",
    "parse_names",
    "parse_weights",
    "reward_errors",
]

RewardFn = Callable[[str, str], Any]
"""A reward: ``(response, ground_truth) -> RewardResult`` (or a number, bool or mapping: see base)."""

REWARD_FUNCTIONS: dict[str, type] = {
    "math_dapo": MathDapoReward,
    "math_verify": MathVerifyReward,
    "boxed_exact": BoxedExact,
    "multiple_choice": MultipleChoice,
    "regex": RegexMatch,
    "json_match": JsonMatch,
    "http": remote.HttpReward,
}
"""Built-in reward classes by name. A class with ``from_config(data)`` takes its settings from the data
section (regex: reward_pattern; http: reward_url and friends); the others take no arguments."""

MAX_REWARDS = 16


def parse_names(text: str) -> list[str]:
    """``"math_verify, regex"`` -> ``["math_verify", "regex"]``."""
    return [n.strip() for n in text.split(",")]


def parse_weights(text: str, count: int) -> list[float]:
    """The weights of ``count`` rewards: ``""`` is 1 each; else one number per reward. ValueError."""
    if not text.strip():
        return [1.0] * count
    weights = [float(w) for w in re.split(r"[\s,]+", text.strip())]
    if len(weights) != count:
        raise ValueError(f"give one weight per reward ({count}), got {len(weights)}")
    if not all(math.isfinite(w) and abs(w) <= 1e6 for w in weights):
        raise ValueError("weights must be finite numbers in [-1e6, 1e6]")
    return weights


def reward_errors(data: Any) -> dict[str, str]:
    """Field errors of the reward settings of a DataConfig (``{field: message}``). Imports no plugin."""
    errors: dict[str, str] = {}
    names = parse_names(data.reward_fn)
    problems = [p for p in (_name_error(n) for n in names) if p]
    if problems:
        errors["reward_fn"] = problems[0]
    elif len(set(names)) != len(names):
        errors["reward_fn"] = "names a reward twice"
    elif len(names) > MAX_REWARDS:
        errors["reward_fn"] = f"at most {MAX_REWARDS} rewards"
    try:
        parse_weights(data.reward_weights, len(names))
    except ValueError as e:
        errors["reward_weights"] = str(e)[:200]
    if "regex" in names:
        try:
            re.compile(data.reward_pattern)
            if not data.reward_pattern:
                errors["reward_pattern"] = "reward 'regex' needs a pattern"
        except (re.error, RecursionError, OverflowError) as e:
            errors["reward_pattern"] = f"is not a valid regular expression: {str(e)[:100]}"
    if "http" in names and (problem := remote.check_url(data.reward_url)):
        errors["reward_url"] = problem
    return errors


def _name_error(name: str) -> str | None:
    if not name:
        return "empty reward name (names are separated by commas)"
    if name in REWARD_FUNCTIONS:
        return None
    problem = plugins.check(name)
    if problem is None:
        return None
    if plugins.is_plugin_name(name):
        return problem
    return f"unknown reward function {name!r:.80}; valid: {', '.join(REWARD_FUNCTIONS)}, or a plugin"


def get_reward_fn(name: str, data: Any = None) -> Any:
    """A fresh instance of the named reward (a built-in or an allowlisted plugin); ``data`` (a
    DataConfig) supplies the settings of regex and http. Raises ValueError listing the valid names."""
    if name in REWARD_FUNCTIONS:
        cls = REWARD_FUNCTIONS[name]
        if hasattr(cls, "from_config"):
            if data is None:
                raise ValueError(f"reward {name!r} takes its settings from a DataConfig: pass data=")
            return cls.from_config(data)
        return cls()
    if plugins.check(name) is None:
        return plugins.load_plugin(name)
    raise ValueError(f"unknown reward function {name!r:.80}; valid names: {', '.join(REWARD_FUNCTIONS)}")


class CombinedReward:
    """The rewards of a config, weighted and summed; each sample keeps each reward's own score."""

    def __init__(self, names: list[str], weights: list[float], rewards: list[Any]) -> None:
        self.names, self.weights, self.rewards = names, weights, rewards

    def score_batch(self, prompts: list[str], responses: list[str], truths: list[str]) -> list[RewardResult]:
        pairs = zip(self.names, self.rewards, strict=True)
        columns = [self._column(n, r, prompts, responses, truths) for n, r in pairs]
        out = []
        for row in zip(*columns, strict=True):
            first = row[0]
            total = sum(w * r.score for w, r in zip(self.weights, row, strict=True))
            scores = {n: r.score for n, r in zip(self.names, row, strict=True)}
            out.append(RewardResult(total, first.acc, first.pred, scores))
        return out

    @staticmethod
    def _column(name: str, reward: Any, prompts: list[str], responses: list[str], truths: list[str]) -> list:
        where = f"reward {name}"
        if hasattr(reward, "score_batch"):
            results = reward.score_batch(prompts, responses, truths)
            if len(results) != len(responses):
                raise RewardError(f"{where}: {len(results)} results for {len(responses)} responses")
        else:
            results = [reward(r, t) for r, t in zip(responses, truths, strict=True)]
        return [as_result(r, where) for r in results]


def build_reward(data: Any) -> CombinedReward:
    """The rewards a DataConfig names, ready to score (plugins are imported here, never in validation)."""
    names = parse_names(data.reward_fn)
    weights = parse_weights(data.reward_weights, len(names))
    return CombinedReward(names, weights, [get_reward_fn(n, data) for n in names])


def describe_rewards() -> list[dict[str, str]]:
    """[{"name", "help"}] of every reward a config may name now (built-ins, then allowed plugins), for
    the new-run form; the help of a built-in is its class docstring. Imports no plugin."""
    out = [{"name": n, "help": " ".join((cls.__doc__ or "").split())} for n, cls in REWARD_FUNCTIONS.items()]
    return out + [{"name": n, "help": plugins.describe(n)} for n in plugins.available()]
