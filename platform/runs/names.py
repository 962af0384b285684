"""The one check of every name and tag people give things here, which other users then read: run names
and tags, sweeps (and the runs they name), saved views and comparisons, datasets, models and model
exports. The forms and the API call it alike.

Besides control characters and lone surrogates, a name may hold no invisible formatting character
(Unicode category Cf: the bidirectional embeddings, overrides and isolates U+202A-202E and U+2066-2069,
the marks U+200E, U+200F and U+061C, zero-width spaces and joiners, the soft hyphen, tag characters) and
no line or paragraph separator. A right-to-left override makes ``report<U+202E>fdp.exe`` read as
"reportexe.pdf"; a zero-width space makes a second "demo-arithmetic" that looks exactly like the first.
The price: emoji joined with U+200D (a family, a flag with a modifier) are refused in names too.
"""

from __future__ import annotations

import unicodedata

INVISIBLE_CATEGORIES = frozenset({"Cf", "Zl", "Zp"})
"""Format characters, and the line and paragraph separators (U+2028, U+2029)."""


def name_problem(text: str) -> str | None:
    """Why ``text`` cannot be a name or a tag, as the end of a field error ("must ..."), or None."""
    for index, char in enumerate(text, start=1):
        category = unicodedata.category(char)
        if category == "Cs":
            return "must be valid Unicode text (it contains a lone surrogate)"
        if category == "Cc":
            return f"must not contain control characters ({_code(char)} at character {index})"
        if category in INVISIBLE_CATEGORIES:
            return (
                f"must not contain invisible formatting characters ({_code(char)} "
                f"{unicodedata.name(char, 'unnamed')} at character {index}): they make a name "
                "read differently from what it is"
            )
    return None


def _code(char: str) -> str:
    return f"U+{ord(char):04X}"
