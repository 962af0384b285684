"""Reward checks in a killable worker process: verdicts in order, a call past its limit stopped and its row
named, the rows after it judged by a fresh worker, a budget for the whole check."""

from __future__ import annotations

import os
import time

import pytest

from dapo.rewards.base import RewardError
from dapo.rewards.isolated import CHUNK, judge_all


def judge_digits(truth: str) -> bool:
    """A fast check; "hang" never returns, "crash" kills its process, "broken" raises."""
    if truth == "hang":
        while True:
            time.sleep(1)
    if truth == "crash":
        os._exit(3)
    if truth == "broken":
        raise ZeroDivisionError("the verifier chokes")
    return truth.isdigit()


def judge_without_library(truth: str) -> bool:
    raise RewardError("reward 'x' needs the x package")


def test_verdicts_come_back_in_order_over_several_chunks():
    truths = [str(i) if i % 3 else f"x{i}" for i in range(2 * CHUNK + 7)]
    got = judge_all(judge_digits, iter(truths), call_seconds=5, budget_seconds=60)
    assert got.verdicts == [t.isdigit() for t in truths] and got.stopped == [] and not got.error


@pytest.fixture
def warm_server() -> None:
    """The forkserver this process's checks fork from, started and its imports done: the budget counts
    from the first worker's start, not the server's imports (seconds on a busy machine), and the timed
    tests below time the check, not those imports."""
    assert judge_all(judge_digits, ["1"], call_seconds=60, budget_seconds=60).verdicts == [True]


def test_a_call_past_its_limit_is_stopped_named_and_the_rest_judged(warm_server):
    start = time.monotonic()
    got = judge_all(judge_digits, ["1", "hang", "2", "hang", "x", "3"], call_seconds=0.5, budget_seconds=30)
    assert time.monotonic() - start < 5
    assert got.stopped == [1, 3] and got.verdicts == [True, False, True, False, False, True]


def test_the_budget_stops_the_check_and_says_how_far_it_got(warm_server):
    start = time.monotonic()
    got = judge_all(judge_digits, ["1"] + ["hang"] * 20, call_seconds=0.4, budget_seconds=1.5)
    assert time.monotonic() - start < 4
    assert 2 <= got.reached < 21 and got.stopped == list(range(1, got.reached))


def test_a_crash_or_an_exception_in_the_verifier_is_a_row_it_cannot_judge():
    got = judge_all(judge_digits, ["1", "crash", "broken", "2"], call_seconds=5, budget_seconds=30)
    assert got.verdicts == [True, False, False, True] and got.stopped == [1] and not got.error


def test_a_reward_error_stops_the_check_with_its_message():
    got = judge_all(judge_without_library, ["1", "2"], call_seconds=5, budget_seconds=30)
    assert got.error == "reward 'x' needs the x package" and got.verdicts == []
