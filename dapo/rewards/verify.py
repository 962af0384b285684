"""math_verify: HuggingFace's Math-Verify library as a reward (LaTeX and boxed answers, equivalent
expressions: 1/2 = 0.5 = \\frac{1}{2}, (x+1)^2 = x^2+2x+1, intervals and sets).

The library (and sympy behind it) is imported on first use, so naming the reward costs nothing in a
process that never scores. Its timeouts use SIGALRM, which works only in a process's main thread; off the
main thread (a threaded worker pool) each parse and comparison runs without its own timeout.
"""

from __future__ import annotations

import threading
from typing import Any

from dapo.rewards.base import INVALID, RewardError, RewardResult

TIMEOUT_S = 5
"""Seconds for one parse or comparison (the library's default), when on the main thread."""


def _library() -> Any:
    try:
        import math_verify  # type: ignore[import-untyped]
    except ImportError as e:  # pragma: no cover - the lock installs it
        raise RewardError(
            "reward 'math_verify' needs the math-verify package (pinned in requirements.lock): "
            f"install the locked requirements ({e})"
        ) from None
    return math_verify


def _timeout() -> int | None:
    return TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def parse_truth(ground_truth: str) -> list[Any]:
    """The ground truth parsed by Math-Verify: a plain answer is read as LaTeX math ("$...$")."""
    text = str(ground_truth).strip()
    if "$" not in text and "\\boxed" not in text:
        text = f"${text}$"
    return list(_library().parse(text, parsing_timeout=_timeout()))


class MathVerifyReward:
    """math_verify: +1 if Math-Verify finds the response's final answer (\\boxed{...}, $...$, "Answer:
    ...", a plain number) equivalent to the ground truth (1/2 = 0.5 = \\frac{1}{2}, (x+1)^2 = x^2+2x+1),
    else -1. Reads the ground truth, as LaTeX or a plain answer."""

    @staticmethod
    def judges(ground_truth: str) -> bool:
        """Whether the ground truth parses as mathematics (not only as text compared verbatim)."""
        return any(not isinstance(x, str) for x in parse_truth(ground_truth))

    def __call__(self, response: str, ground_truth: str) -> RewardResult:
        lib = _library()
        gold = parse_truth(ground_truth)
        pred = list(lib.parse(response, parsing_timeout=_timeout()))
        if not pred:
            return RewardResult(-1.0, False, INVALID)
        correct = bool(gold) and bool(lib.verify(gold, pred, timeout_seconds=_timeout()))
        shown = str(pred[-1] if len(pred) > 1 else pred[0])[:1000]
        return RewardResult(1.0 if correct else -1.0, correct, shown)
