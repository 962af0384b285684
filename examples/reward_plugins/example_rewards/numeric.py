"""A reward plugin: numeric answers judged with a tolerance.

Allow it by naming the folder that holds ``example_rewards/`` in DAPO_REWARD_PLUGINS (where runs are
validated and where rewards are computed), then set ``data.reward_fn`` to
``example_rewards.numeric:CloseNumber``. A plugin is a class called as ``reward(response, ground_truth)``
(it must pickle: no lambdas or open files in its state) that returns a number, a bool, a mapping with
``score`` (and optionally ``acc`` and ``pred``) or a ``dapo.rewards.RewardResult``.
"""

from __future__ import annotations

import math
import re

__all__ = ["CloseNumber"]

NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?")
RELATIVE_TOLERANCE = 1e-3


def last_number(text: str) -> float | None:
    """The last number written in the text ("1,250.5" reads as 1250.5), or None."""
    found = NUMBER.findall(text)
    return float(found[-1].replace(",", "")) if found else None


class CloseNumber:
    """+1 if the last number in the response is within 0.1% of the ground truth (a number), else -1.
    Reads the ground truth."""

    def __call__(self, response: str, ground_truth: str) -> dict:
        truth = last_number(ground_truth)
        got = last_number(response)
        if truth is None or got is None:
            return {"score": -1.0, "acc": False, "pred": "[INVALID]"}
        ok = math.isclose(got, truth, rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-9)
        return {"score": 1.0 if ok else -1.0, "acc": ok, "pred": f"{got:g}"}
