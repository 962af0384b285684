"""Rule-based rewards for answer formats beyond math_dapo's "Answer:" line.

Each scores +1 when the response's answer matches the ground truth and -1 otherwise (json_match: the
share of matching fields scaled to [-1, 1]), and says in its docstring what it reads from the dataset
row. Each has a ``judges(ground_truth)`` check: whether the reward can judge a row with that ground
truth at all (the dataset page counts them). Pure Python, no torch.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dapo.rewards.base import INVALID, RewardResult

BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
JSON_WINDOW = 8000
"""Only the last this many characters of a response are searched for a JSON object."""


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced; None if none."""
    starts = [m.end() for m in BOXED.finditer(text)]
    for start in reversed(starts):
        depth = 1
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text[start:i]
    return None


def _squash(text: str) -> str:
    """Whitespace and enclosing $ removed: "$ \\frac{1}{2} $" and "\\frac{1}{2}" are the same answer."""
    return "".join(text.split()).strip("$")


def _verdict(pred: str | None, correct: bool) -> RewardResult:
    return RewardResult(1.0 if correct else -1.0, correct, INVALID if pred is None else pred)


class BoxedExact:
    """boxed_exact: +1 if the last \\boxed{...} of the response equals the ground truth, ignoring
    whitespace and enclosing $ (a ground truth written as \\boxed{...} is unwrapped), else -1. Reads
    the ground truth."""

    @staticmethod
    def truth(ground_truth: str) -> str:
        text = str(ground_truth)
        inner = last_boxed(text)
        return _squash(inner if inner is not None else text)

    @classmethod
    def judges(cls, ground_truth: str) -> bool:
        return bool(cls.truth(ground_truth))

    def __call__(self, response: str, ground_truth: str) -> RewardResult:
        boxed = last_boxed(response)
        pred = None if boxed is None else _squash(boxed)
        return _verdict(pred, pred is not None and pred != "" and pred == self.truth(ground_truth))


_LETTER = r"\(?([A-E])\)?(?![A-Za-z0-9])"
CHOICE_PATTERNS = (
    re.compile(r"\\boxed\s*\{\s*(?:\\text(?:bf)?\s*\{)?\s*\(?([A-E])\)?\s*\}?\s*\}"),
    re.compile(r"(?i:answer)(?:\s+(?i:is))?\s*:?\s*(?:(?i:option|choice)\s*)?[*_]*\s*" + _LETTER),
    re.compile(r"(?i:option|choice)\s+" + _LETTER),
    re.compile(r"\(([A-E])\)"),
    re.compile(r"(?m)^[\s*_]*([A-E])[).:]?[\s*_]*$"),
)
"""Answer phrasings, strongest first: \\boxed{B}; "Answer: B", "the answer is (B)", "**Answer:** B";
"option B"; "(B)"; a line holding only the letter ("B", "B.", "B)"). The first phrasing found wins,
and its last occurrence. Letters are capitals: a lone "a" is an article, not an option."""
_TRUTH_LETTER = re.compile(r"^\s*(?:(?:option|choice)\s*)?\(?([A-Ea-e])\)?\s*[.:]?\s*$", re.IGNORECASE)


class MultipleChoice:
    """multiple_choice: +1 if the option letter (A-E) the response gives equals the ground truth's, else
    -1. Understands "Answer: B", "The answer is (B)", "\\boxed{B}", "option B", "(B)" and a line with only
    the letter. Reads the ground truth: a letter A-E, optionally as "(B)", "b" or "Option B"."""

    @staticmethod
    def truth(ground_truth: str) -> str | None:
        m = _TRUTH_LETTER.match(str(ground_truth))
        return m.group(1).upper() if m else None

    @classmethod
    def judges(cls, ground_truth: str) -> bool:
        return cls.truth(ground_truth) is not None

    @staticmethod
    def extract(response: str) -> str | None:
        for pattern in CHOICE_PATTERNS:
            found = pattern.findall(response)
            if found:
                return found[-1]
        return None

    def __call__(self, response: str, ground_truth: str) -> RewardResult:
        pred = self.extract(response)
        truth = self.truth(ground_truth)
        return _verdict(pred, pred is not None and pred == truth)


class RegexMatch:
    """regex: +1 if the last match of data.reward_pattern in the response (its first group, or the whole
    match when the pattern has no group) equals the ground truth, both stripped of surrounding
    whitespace, else -1. Reads the ground truth."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.regex = re.compile(pattern)

    @classmethod
    def from_config(cls, data: Any) -> RegexMatch:
        return cls(data.reward_pattern)

    @staticmethod
    def judges(ground_truth: str) -> bool:
        return bool(str(ground_truth).strip())

    def __call__(self, response: str, ground_truth: str) -> RewardResult:
        matches = list(self.regex.finditer(response))
        if not matches:
            return _verdict(None, False)
        last = matches[-1]
        pred = (last.group(1) if self.regex.groups else last.group(0)) or ""
        pred = pred.strip()
        return _verdict(pred, pred == str(ground_truth).strip())


def last_json_object(text: str) -> dict | None:
    """The last top-level JSON object in the text (a ```json block's or a bare one), or None."""
    text = text[-JSON_WINDOW:]
    decoder = json.JSONDecoder()
    found = None
    i = text.find("{")
    while i >= 0:
        try:
            value, end = decoder.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        if isinstance(value, dict):
            found = value
        i = text.find("{", end)
    return found


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.strip() == b.strip()
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


class JsonMatch:
    """json_match: compares field by field the last JSON object in the response with the ground truth's;
    the score is 2 x (share of the ground truth's fields with an equal value) - 1, so +1 when all match
    and -1 when none does or there is no object; correct when all match. Strings are compared stripped,
    1 equals 1.0, true is not 1; extra fields in the response are ignored. Reads the ground truth: a
    JSON object such as {"city": "Paris", "year": 1889}."""

    @staticmethod
    def truth(ground_truth: str) -> dict | None:
        try:
            value = json.loads(str(ground_truth))
        except ValueError:
            return None
        return value if isinstance(value, dict) and value else None

    @classmethod
    def judges(cls, ground_truth: str) -> bool:
        return cls.truth(ground_truth) is not None

    def __call__(self, response: str, ground_truth: str) -> RewardResult:
        truth = self.truth(ground_truth)
        got = last_json_object(response)
        if got is None or truth is None:
            return _verdict(None, False)
        matched = sum(key in got and _same(got[key], value) for key, value in truth.items())
        share = matched / len(truth)
        pred = json.dumps(got, sort_keys=True, ensure_ascii=False)[:1000]
        return RewardResult(2.0 * share - 1.0, matched == len(truth), pred)
