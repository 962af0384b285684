"""The DAPO math verifier (``math_dapo``) and the soft overlong punishment.

Pure Python, no torch. See docs/dapo.md §5 (overlong shaping) and §6 (math verifier).
Reads from the dataset row: the ground truth only.
"""

from __future__ import annotations

import re

from dapo.rewards.base import INVALID, RewardResult

MathResult = RewardResult
"""The verdict on one response (the name it had when math_dapo was the only reward)."""

ANSWER_WINDOW = 300
"""Only the last this many characters of a response are searched (the reference's MATH-based bound)."""

ANSWER_PATTERN = re.compile(r"Answer\s*:\s*([^\n]+)", re.IGNORECASE)

# Normalisation tables, applied in this order (the order matters: e.g. spaces go before unit words are
# removed, so "\text{ cm}" becomes "\text{cm}", then "\text{}", then nothing). The reference code also
# carries ".$" -> "$" and "\text{m}" -> "\text{}", which the summary in docs/dapo.md §6 leaves out;
# we keep them so that our verdicts match the reference's.
_SUBSTITUTIONS = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
_REMOVED_EXPRESSIONS = (
    "square",
    "ways",
    "integers",
    "dollars",
    "mph",
    "inches",
    "hours",
    "km",
    "units",
    "\\ldots",
    "sue",
    "points",
    "feet",
    "minutes",
    "digits",
    "cents",
    "degrees",
    "cm",
    "gm",
    "pounds",
    "meters",
    "meals",
    "edges",
    "students",
    "childrentickets",
    "multiples",
    "\\text{s}",
    "\\text{.}",
    "\\text{\ns}",
    "\\text{}^2",
    "\\text{}^3",
    "\\text{\n}",
    "\\text{}",
    "\\mathrm{th}",
    "^\\circ",
    "^{\\circ}",
    "\\;",
    ",\\!",
    "{,}",
    '"',
    "\\dots",
)
_FIRST_DOLLAR_SPAN = re.compile(r"(.*?)(\$)(.*?)(\$)(.*)")
_UNWRAP = (
    re.compile(r"(\\text\{)(.*?)(\})"),
    re.compile(r"(\\textbf\{)(.*?)(\})"),
    re.compile(r"(\\overline\{)(.*?)(\})"),
    re.compile(r"(\\boxed\{)(.*)(\})"),  # greedy: \boxed{\frac{1}{2}} keeps its inner braces
)
_SHORT_FRAC = re.compile(r"(frac)([^{])(.)")  # \frac12 -> \frac{1}{2}
_SHORT_SQRT = re.compile(r"(sqrt)([^{])")  # \sqrt2 -> \sqrt{2}


def normalize_answer(answer: str) -> str:
    """Normalise a final answer the way the reference's minerva-style checker does (§6, step 3).

    1. keep what follows the last "=";
    2. substitutions (articles, escaped dollars and spaces, every space, mbox, "and" lists);
    3. remove unit words and decorations;
    4. keep the first $…$ span; unwrap \\text, \\textbf, \\overline, \\boxed;
    5. expand \\fracab and \\sqrta; drop "$";
    6. drop the commas of a plain integer ("1,000" -> "1000"); strip.
    """
    answer = answer.split("=")[-1]
    for before, after in _SUBSTITUTIONS:
        answer = answer.replace(before, after)
    for expression in _REMOVED_EXPRESSIONS:
        answer = answer.replace(expression, "")
    answer = _FIRST_DOLLAR_SPAN.sub("$\\3$", answer)
    for wrapper in _UNWRAP:
        answer = wrapper.sub("\\2", answer)
    answer = _SHORT_FRAC.sub("frac{\\2}{\\3}", answer)
    answer = _SHORT_SQRT.sub("sqrt{\\2}", answer)
    answer = answer.replace("$", "")
    if answer.replace(",", "").isdigit():
        answer = answer.replace(",", "")
    return answer.strip()


def extract_answer(response: str) -> str:
    """The text after the LAST "Answer:" (case-insensitive) in the last 300 characters, else "[INVALID]"."""
    matches = ANSWER_PATTERN.findall(response[-ANSWER_WINDOW:])
    return matches[-1] if matches else INVALID


def math_dapo_score(response: str, ground_truth: str) -> MathResult:
    """Score a response against the ground truth with DAPO's rule-based math reward (§6)."""
    pred = normalize_answer(extract_answer(response))
    correct = pred == normalize_answer(str(ground_truth))
    return MathResult(score=1.0 if correct else -1.0, acc=correct, pred=pred)


def overlong_penalty(length: int, max_len: int, buffer_len: int, factor: float) -> float:
    """Soft overlong punishment R_len (paper eq. 13, docs/dapo.md §5).

    R_len = 0                                   if L <= L_max − C
          = −f · (L − (L_max − C)) / C          if L_max − C < L <= L_max

    Args:
        length: L, response length in tokens INCLUDING the EOS token.
        max_len: L_max, the hard generation cap (max response length).
        buffer_len: C, the overlong buffer (> 0).
        factor: f, the penalty at L = L_max.

    Returns:
        The penalty (<= 0), added to the ±1 correctness score. A length beyond the cap (which a correct
        rollout engine never produces) gets the cap's penalty −f instead of an extrapolated one.
    """
    if buffer_len <= 0:
        raise ValueError(f"buffer_len must be > 0, got {buffer_len}")
    expected_len = max_len - buffer_len
    exceed = min(length, max_len) - expected_len
    if exceed <= 0:
        return 0.0
    return -factor * exceed / buffer_len


class MathDapoReward:
    """math_dapo: +1 if the text after the last "Answer:" matches the ground truth once both are
    normalised (the DAPO paper's rule), else -1. Reads the ground truth."""

    @staticmethod
    def judges(ground_truth: str) -> bool:
        """Whether a ground truth can be matched at all: something is left after normalising it."""
        return bool(normalize_answer(str(ground_truth)))

    def __call__(self, response: str, ground_truth: str) -> MathResult:
        return math_dapo_score(response, ground_truth)
