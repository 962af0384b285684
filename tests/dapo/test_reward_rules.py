"""Truth tables of the built-in rewards beyond math_dapo, written by hand, and what each can judge."""

import pickle

import pytest

from dapo.rewards import INVALID, RewardResult, get_reward_fn
from dapo.rewards.rules import BoxedExact, JsonMatch, MultipleChoice, RegexMatch, last_boxed
from dapo.runconfig import DataConfig

# (response, ground truth, correct)
BOXED = [
    ("so the answer is \\boxed{42}.", "42", True),
    ("\\boxed{ 42 }", "42", True),  # whitespace is ignored
    ("$\\boxed{\\frac{1}{2}}$", "\\frac{1}{2}", True),  # nested braces are kept whole
    ("\\boxed{\\frac{1}{2}}", "\\frac12", False),  # exact: no LaTeX normalisation
    ("\\boxed{3} no wait \\boxed{4}", "4", True),  # the last box wins
    ("\\boxed{3} no wait \\boxed{4}", "3", False),
    ("\\fbox{7}", "7", True),
    ("The answer is 42", "42", False),  # no box
    ("\\boxed{}", "", False),
    ("\\boxed{42", "42", False),  # unclosed
    ("\\boxed{x^2}", "\\boxed{x^2}", True),  # a boxed ground truth is unwrapped
    ("\\boxed{0.5}", "1/2", False),
]


@pytest.mark.parametrize(("response", "truth", "correct"), BOXED)
def test_boxed_exact_truth_table(response, truth, correct):
    result = BoxedExact()(response, truth)
    assert (result.acc, result.score) == (correct, 1.0 if correct else -1.0)


def test_boxed_exact_reports_the_box_it_read():
    assert BoxedExact()("\\boxed{1} then \\boxed{ 2 + x }", "3").pred == "2+x"
    assert BoxedExact()("nothing", "3").pred == INVALID
    assert last_boxed("a \\boxed{{a}{b}} b") == "{a}{b}"


CHOICE = [
    ("Answer: B", "B", True),
    ("answer: C", "C", True),
    ("The answer is (D).", "D", True),
    ("The correct answer is: E", "E", True),
    ("**Answer:** A", "A", True),
    ("I pick option C", "C", True),
    ("Looking at (A) and (B), it must be (B)", "B", True),  # the last parenthesised letter
    ("\\boxed{C}", "C", True),
    ("\\boxed{\\text{(E)}}", "E", True),
    ("Reasoning...\nB", "B", True),  # a line with only the letter
    ("Reasoning...\nB.", "B", True),
    ("Answer: B\nthough (C) is tempting", "B", True),  # an explicit answer beats a stray (C)
    ("Answer: B", "C", False),
    ("The answer is a function of x", "A", False),  # a lowercase "a" is an article, not option A
    ("Answer: F", "F", False),  # only A-E
    ("no letter here", "A", False),
    ("Answer: B", "(b)", True),  # ground truths "(b)", "Option B" and "b" are B
    ("Answer: B", "Option B", True),
    ("Answer: Bob", "B", False),  # the letter must stand alone
]


@pytest.mark.parametrize(("response", "truth", "correct"), CHOICE)
def test_multiple_choice_truth_table(response, truth, correct):
    result = MultipleChoice()(response, truth)
    assert (result.acc, result.score) == (correct, 1.0 if correct else -1.0)


def test_multiple_choice_reads_the_letter_and_judges_only_letter_truths():
    assert MultipleChoice()("The answer is (D).", "D").pred == "D"
    assert MultipleChoice()("hmm", "D").pred == INVALID
    assert [MultipleChoice.judges(t) for t in ["A", "(c)", "Option E", "F", "42", "AB"]] == [
        True,
        True,
        True,
        False,
        False,
        False,
    ]


REGEX = [
    ("Final answer: 12", "12", True),
    ("Final answer: 12 ", "12", True),
    ("Final answer: 11\nFinal answer: 12", "12", True),  # the last match
    ("Final answer: 11\nFinal answer: 12", "11", False),
    ("final answer: 12", "12", False),  # the pattern is case-sensitive as written
    ("12", "12", False),  # no match
    ("Final answer: 12", " 12 ", True),  # the ground truth is stripped too
]


@pytest.mark.parametrize(("response", "truth", "correct"), REGEX)
def test_regex_truth_table(response, truth, correct):
    result = RegexMatch(r"Final answer: (\S+)")(response, truth)
    assert (result.acc, result.score) == (correct, 1.0 if correct else -1.0)


def test_regex_without_a_group_compares_the_whole_match_and_pickles():
    reward = get_reward_fn("regex", DataConfig(reward_fn="regex", reward_pattern=r"\d+"))
    assert reward("it is 7 or 8", "8") == RewardResult(1.0, True, "8")
    clone = pickle.loads(pickle.dumps(reward))
    assert clone("none", "8") == RewardResult(-1.0, False, INVALID)


JSON = [
    # (response, ground truth, score, correct)
    ('{"city": "Paris", "year": 1889}', '{"city": "Paris", "year": 1889}', 1.0, True),
    ('Here: ```json\n{"year": 1889, "city": " Paris "}\n```', '{"city": "Paris", "year": 1889}', 1.0, True),
    ('{"city": "Paris", "year": 1890}', '{"city": "Paris", "year": 1889}', 0.0, False),  # half the fields
    ('{"city": "Rome"}', '{"city": "Paris", "year": 1889}', -1.0, False),
    ('{"city": "Paris", "year": 1889.0, "x": 1}', '{"city": "Paris", "year": 1889}', 1.0, True),
    ('{"ok": 1}', '{"ok": true}', -1.0, False),  # true is not 1
    ('{"a": 1} then {"a": 2}', '{"a": 2}', 1.0, True),  # the last object
    ('{"a": {"b": 1}}', '{"a": {"b": 1}}', 1.0, True),  # nested: the outer object, compared whole
    ('{"a": 1, "b": 2, "c": 3, "d": 0}', '{"a": 1, "b": 2, "c": 3, "d": 4}', 0.5, False),
    ("no json at all", '{"a": 1}', -1.0, False),
    ('{"a": 1', '{"a": 1}', -1.0, False),  # not closed
    ("[1, 2]", '{"a": 1}', -1.0, False),  # not an object
]


@pytest.mark.parametrize(("response", "truth", "score", "correct"), JSON)
def test_json_match_truth_table(response, truth, score, correct):
    result = JsonMatch()(response, truth)
    assert (result.score, result.acc) == (pytest.approx(score), correct)


def test_json_match_judges_only_object_truths_and_shows_what_it_read():
    assert [JsonMatch.judges(t) for t in ['{"a": 1}', "{}", "[1]", "42", "{bad"]] == [
        True,
        False,
        False,
        False,
        False,
    ]
    assert JsonMatch()('x {"b": 2, "a": 1}', '{"a": 1}').pred == '{"a": 1, "b": 2}'


MATH_VERIFY = [
    ("The answer is $\\boxed{\\frac{1}{2}}$", "0.5", True),
    ("so \\boxed{0.5}", "\\frac{1}{2}", True),
    ("$\\frac{\\sqrt 2}{2}$", "\\sqrt{2}/2", True),
    ("\\boxed{(x+1)^2}", "x^2+2x+1", True),  # equivalent expressions
    ("The answer is \\boxed{3}", "2", False),
    ("Answer: 5", "5", True),
    ("no answer here", "5", False),
    ("\\boxed{[1,2]}", "[1,2]", True),  # intervals
    ("\\boxed{(1,2)}", "[1,2]", False),
]


@pytest.mark.parametrize(("response", "truth", "correct"), MATH_VERIFY)
def test_math_verify_truth_table(response, truth, correct):
    pytest.importorskip("math_verify")
    result = get_reward_fn("math_verify")(response, truth)
    assert (result.acc, result.score) == (correct, 1.0 if correct else -1.0)


def test_math_verify_judges_truths_it_can_parse():
    pytest.importorskip("math_verify")
    from dapo.rewards.verify import MathVerifyReward

    assert MathVerifyReward.judges("\\frac{1}{2}") and MathVerifyReward.judges("42")
    assert not MathVerifyReward.judges("}{")
    assert get_reward_fn("math_verify")("nothing", "1").pred == INVALID
