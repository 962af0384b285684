"""Imported by the fork server of the reward checker (dapo.rewards.isolated), never by anything else.

Each checker worker is forked from that server, so what is imported and warmed here once is ready in every
worker: the rewards, and Math-Verify with its parser built (its first call costs a few hundred ms more than
the next ones, time a worker would otherwise spend inside its per-call limit).
"""

from __future__ import annotations

from dapo.rewards import isolated as isolated
from dapo.rewards.base import RewardError
from dapo.rewards.verify import MathVerifyReward

try:
    MathVerifyReward.judges("1")
    MathVerifyReward.judges("x^2")
except RewardError:  # math-verify not installed: the check reports it when it is asked for
    pass
