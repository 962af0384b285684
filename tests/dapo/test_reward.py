"""Tests of the rule-based math reward and the soft overlong punishment (docs/dapo.md §5, §6)."""

import pickle

import pytest

from dapo.rewards import (
    REWARD_FUNCTIONS,
    MathDapoReward,
    MathResult,
    get_reward_fn,
    math_dapo_score,
    normalize_answer,
    overlong_penalty,
)

PAD = "Let me think step by step about this problem. " * 12  # 552 characters of reasoning

# (response, ground truth, expected correctness)
TRUTH_TABLE = [
    # the consequences §6 pins
    ("Answer: 5", "5", True),
    ("Answer: 5.", "5", False),  # the trailing period is kept
    ("The sum is \\boxed{42}.", "42", False),  # no "Answer:" line at all
    ("\\boxed{42}", "42", False),
    ("Answer: 3\nWait, let me recheck.\nAnswer: 5", "5", True),  # the last answer wins
    ("Answer: 3\nWait, let me recheck.\nAnswer: 5", "3", False),
    ("Answer: 1,000", "1000", True),
    ("Answer: 1000", "1,000", True),  # the ground truth is normalised the same way
    ("Answer: 1,000,000", "1000000", True),
    # case and spacing of the marker
    ("answer: 7", "7", True),
    ("ANSWER: 7", "7", True),
    ("Answer:7", "7", True),
    ("Answer : 7", "7", True),
    ("So the final Answer: 7", "7", True),
    ("Answer: 7   ", "7", True),
    ("**Answer:** 7", "7", False),  # markdown after the colon stays in the prediction
    # units and decorations
    ("Answer: 10 cm", "10", True),
    ("Answer: 10 meters", "10", True),
    ("Answer: 4 square units", "4", True),
    ("Answer: 12 dollars", "12", True),
    ("Answer: \\$12", "12", True),
    ("Answer: 5 \\text{ km}", "5", True),
    ("Answer: 90^\\circ", "90", True),
    ("Answer: 90^{\\circ}", "90", True),
    ("Answer: 3 m", "3", False),  # "m" alone is not a removed unit
    # LaTeX wrappers and shorthand
    ("Answer: \\frac12", "\\frac{1}{2}", True),
    ("Answer: \\frac{1}{2}", "\\frac12", True),
    ("Answer: \\sqrt2", "\\sqrt{2}", True),
    ("Answer: $\\frac{1}{2}$", "\\frac{1}{2}", True),
    ("Answer: The answer is $7$ apples", "7", True),  # only the first $...$ span is kept
    ("Answer: $3$ or $4$", "4", False),
    ("Answer: \\text{5}", "5", True),
    ("Answer: \\textbf{5}", "5", True),
    ("Answer: \\boxed{42}", "42", True),
    ("Answer: \\boxed{\\frac{1}{2}}", "\\frac{1}{2}", True),
    ("Answer: \\overline{3}", "3", True),
    ("Answer: $5.$", "5", True),  # the reference's ".$" -> "$" substitution
    # equations and values
    ("Answer: x = 5", "5", True),
    ("Answer: 6", "5", False),
    ("Answer: 0.5", "\\frac{1}{2}", False),  # string comparison, no symbolic equivalence
    ("Answer: -5", "-5", True),
    ("", "5", False),
    # the 300-character window
    ("Answer: 5\n" + PAD, "5", False),  # the answer lies outside the last 300 characters
    (PAD + "Answer: 5", "5", True),
    ("Answer: 9\n" + PAD + "Answer: 5", "5", True),
]


@pytest.mark.parametrize(("response", "ground_truth", "expected"), TRUTH_TABLE)
def test_it_grades_the_truth_table(response, ground_truth, expected):
    result = math_dapo_score(response, ground_truth)
    assert result.acc is expected
    assert result.score == (1.0 if expected else -1.0)


def test_it_reports_the_normalised_prediction():
    assert math_dapo_score("Answer: 5.", "5") == MathResult(score=-1.0, acc=False, pred="5.")
    assert math_dapo_score("Answer: 1,000 dollars", "1000").pred == "1000"


def test_it_reports_invalid_when_there_is_no_answer_line():
    result = math_dapo_score("The sum is \\boxed{42}.", "42")
    assert result.pred == "[INVALID]"
    assert result.score == -1.0


def test_it_normalises_in_the_reference_order():
    # spaces go first, so a spaced unit inside \text{} is removed, then the emptied \text{} too
    assert normalize_answer("5 \\text{ inches}") == "5"
    # "an " and "a " are removed before the spaces, so "a 5" is 5 but "a5" is not
    assert normalize_answer("a 5") == "5"
    assert normalize_answer("an 8") == "8"
    assert normalize_answer("a5") == "a5"
    # commas survive when the rest is not a plain integer
    assert normalize_answer("(1, 2)") == "(1,2)"
    assert normalize_answer("1, 2") == "12"


def test_it_results_are_frozen():
    result = math_dapo_score("Answer: 5", "5")
    with pytest.raises(AttributeError):
        result.score = 0.0


@pytest.mark.parametrize(
    ("length", "expected"),
    [
        (16384, 0.0),  # L = L_max − C: no penalty yet
        (16385, -1 / 4096),  # first token into the buffer
        (17408, -0.25),
        (18432, -0.5),
        (20480, -1.0),  # at the hard cap
        (100, 0.0),
    ],
)
def test_it_applies_the_overlong_penalty_of_the_paper_example(length, expected):
    assert overlong_penalty(length, max_len=20480, buffer_len=4096, factor=1.0) == pytest.approx(expected)


def test_it_scales_the_overlong_penalty_by_the_factor():
    assert overlong_penalty(18432, 20480, 4096, 0.5) == pytest.approx(-0.25)
    assert overlong_penalty(10, 10, 4, 2.0) == pytest.approx(-2.0)
    assert overlong_penalty(7, 10, 4, 2.0) == pytest.approx(-0.5)
    assert overlong_penalty(6, 10, 4, 2.0) == 0.0


def test_it_caps_the_overlong_penalty_beyond_max_len():
    assert overlong_penalty(20481, 20480, 4096, 1.0) == pytest.approx(-1.0)


def test_it_rejects_a_non_positive_overlong_buffer():
    with pytest.raises(ValueError, match="buffer_len"):
        overlong_penalty(10, 10, 0, 1.0)


def test_it_looks_up_rewards_by_name_and_pickles_them():
    reward = get_reward_fn("math_dapo")
    assert isinstance(reward, MathDapoReward)
    assert set(REWARD_FUNCTIONS) == {
        "math_dapo",
        "math_verify",
        "boxed_exact",
        "multiple_choice",
        "regex",
        "json_match",
        "http",
    }
    clone = pickle.loads(pickle.dumps(reward))
    assert clone("Answer: 1,000", "1000") == MathResult(score=1.0, acc=True, pred="1000")


def test_it_rejects_an_unknown_reward_listing_the_valid_names():
    with pytest.raises(ValueError, match="math_dapo"):
        get_reward_fn("gsm8k")
