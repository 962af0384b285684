"""The runs list's filter, sort and columns: a small expression language over a run's fields, its config
and its latest metrics, evaluated on the runs a user may see.

    optim.lr < 1e-4 and val/acc/mean@4 > 0.8 and tags has baseline and status = running

A filter is terms joined by ``and`` and ``or``; ``and`` binds tighter (``a and b or c`` is "a and b, or c"),
and there are no parentheses. A term is ``FIELD OP VALUE``:

- FIELD: a run field (``id name status kind preset group owner tags step total_steps created archived``),
  a metric of the latest step (any name with a ``/``: ``val/acc/mean@4``, ``critic/score/mean``), or a
  dotted config key (``optim.lr``, ``rollout.n``; ``config.optim.lr`` says the same);
- OP: ``= != < <= > >=``, ``~`` (contains, any case) or ``has`` (a tag, or an item of a list);
- VALUE: a number, ``true``/``false``/``null``, a word, or a quoted string (``"two words"``).

Numbers compare as numbers; other values as text (``=`` ignores case). A run without the field matches only
``!=``. Sorting takes one FIELD (``-`` first: descending); runs without it come last. Errors name the
position and what was expected, so the page can show them next to the box.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from dapo.runconfig import RunConfig, flatten

MAX_FILTER_CHARS = 2000
MAX_TERMS = 20
MAX_COLUMNS = 12
RUN_FIELDS = (
    "id",
    "name",
    "status",
    "kind",
    "preset",
    "group",
    "owner",
    "tags",
    "step",
    "total_steps",
    "created",
    "archived",
)
OPS = ("<=", ">=", "!=", "==", "=", "<", ">", "~", "has")
DEFAULT_SORT = "-created"

_TOKEN = re.compile(
    r"\s*(?:(?P<op><=|>=|!=|==|=|<|>|~)|(?P<quoted>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')"
    r"|(?P<word>[^\s<>=!~\"']+))"
)
_FIELD = re.compile(r"[A-Za-z_][\w./@:+-]*")


class FilterError(ValueError):
    """A filter, sort or column that cannot be read: ``message`` says where and why."""


@dataclass(frozen=True)
class Term:
    field: str
    op: str
    value: Any


@cache
def config_keys() -> frozenset[str]:
    """Every dotted key of a RunConfig (a key of an older or newer config still filters: it is missing)."""
    return frozenset(flatten(RunConfig().to_dict()))


def check_field(name: str, where: str = "") -> str:
    """The canonical name of a field (``config.`` dropped), or a FilterError that says what fields exist."""
    field = name.removeprefix("config.") if name.startswith("config.") and "/" not in name else name
    if field in RUN_FIELDS or "/" in field or field in config_keys():
        return field
    near = sorted(k for k in config_keys() if k.split(".")[-1] == field.split(".")[-1])[:3]
    hint = f" (did you mean {', '.join(near)}?)" if near else ""
    raise FilterError(
        f"{where}unknown field {name!r}{hint}: use a run field ({', '.join(RUN_FIELDS)}), a metric name with "
        "a '/' (val/acc/mean@4) or a config key (optim.lr)"
    )


def _tokens(text: str) -> list[tuple[int, str, str]]:
    """(position, kind, text) for each token; kind is op, quoted or word."""
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            start = len(text) - len(text[pos:].lstrip())
            raise FilterError(f"at character {start + 1}: cannot read {text[start : start + 12]!r}")
        kind = m.lastgroup or "word"
        out.append((m.start(kind) + 1, kind, m.group(kind)))
        pos = m.end()
    return out


Filter = list[list[Term]]
"""A parsed filter: alternatives joined by ``or``, each a list of terms joined by ``and`` ([]: no filter)."""


def parse(text: str | None) -> Filter:
    """The alternatives of a filter ('' or None: none), each a list of terms. Raises FilterError."""
    text = (text or "").strip()
    if not text:
        return []
    if len(text) > MAX_FILTER_CHARS:
        raise FilterError(f"the filter is longer than {MAX_FILTER_CHARS} characters")
    if "\x00" in text:
        raise FilterError("the filter contains a NUL character")
    tokens = _tokens(text)
    alternatives: Filter = [[]]
    count, joiner = 0, ""
    i = 0
    while True:
        if i >= len(tokens):
            raise FilterError(
                f"the filter ends after {joiner!r}: a term (field, operator, value) must follow"
            )
        pos, kind, field = tokens[i]
        if kind != "word" or not _FIELD.fullmatch(field) or field.lower() in ("and", "or"):
            raise FilterError(f"at character {pos}: expected a field name, got {field!r}")
        field = check_field(field, f"at character {pos}: ")
        if i + 1 >= len(tokens):
            raise FilterError(f"after {field!r}: expected an operator ({' '.join(OPS)})")
        pos, kind, op = tokens[i + 1]
        if not (kind == "op" or (kind == "word" and op.lower() == "has")):
            raise FilterError(f"at character {pos}: expected an operator ({' '.join(OPS)}), got {op!r}")
        op = "=" if op == "==" else op.lower()
        if i + 2 >= len(tokens) or tokens[i + 2][1] == "op":
            raise FilterError(f"after {field} {op}: expected a value (a number, a word or a quoted string)")
        pos, kind, raw = tokens[i + 2]
        alternatives[-1].append(Term(field, op, _value(kind, raw)))
        count += 1
        if count > MAX_TERMS:
            raise FilterError(f"at most {MAX_TERMS} terms")
        i += 3
        if i == len(tokens):
            return alternatives
        pos, kind, word = tokens[i]
        joiner = word.lower()
        if kind != "word" or joiner not in ("and", "or"):
            raise FilterError(f"at character {pos}: expected 'and' or 'or' between terms, got {word!r}")
        if joiner == "or":
            alternatives.append([])
        i += 1


def _value(kind: str, raw: str) -> Any:
    if kind == "quoted":
        return re.sub(r"\\(.)", r"\1", raw[1:-1])
    low = raw.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none"):
        return None
    try:
        number = float(raw)
    except ValueError:
        return raw
    return number if math.isfinite(number) else raw


# ---- evaluating --------------------------------------------------------------------------------------


class RunFields:
    """The fields of one run, read lazily (its config is flattened on first use)."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self._flat: dict[str, Any] | None = None

    def get(self, field: str) -> Any:
        run = self.run
        if field in RUN_FIELDS:
            if field == "owner":
                return run.owner.get_username()
            if field == "created":
                return run.created_at.isoformat() if run.created_at else None
            if field == "id":
                return run.pk
            return getattr(run, field)
        if "/" in field:
            return (run.latest_metrics or {}).get(field)
        if self._flat is None:
            self._flat = flatten(run.config) if isinstance(run.config, dict) else {}
        return self._flat.get(field)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def matches(term: Term, value: Any) -> bool:
    if term.op == "has":
        items = value if isinstance(value, list) else []
        return any(_equal(item, term.value) for item in items)
    if value is None:
        return term.op == "!=" and term.value is not None
    if term.op == "=":
        return _equal(value, term.value)
    if term.op == "!=":
        return not _equal(value, term.value)
    if term.op == "~":
        return str(term.value).lower() in _text(value).lower()
    a, b = _number(value), _number(term.value)
    if a is None or b is None:
        if isinstance(value, str) and isinstance(term.value, str):
            a_s, b_s = value, term.value  # text orders as text (created > 2026-12-01)
            return {"<": a_s < b_s, "<=": a_s <= b_s, ">": a_s > b_s, ">=": a_s >= b_s}[term.op]
        return False
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[term.op]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def _equal(value: Any, wanted: Any) -> bool:
    if wanted is None:
        return value is None
    if isinstance(wanted, bool) or isinstance(value, bool):
        return value is wanted or _text(value).lower() == _text(wanted).lower()
    a, b = _number(value), _number(wanted)
    if a is not None and b is not None:
        return a == b
    return _text(value).lower() == _text(wanted).lower()


def apply(runs: Iterable[Any], terms: Filter, sort: str | None) -> list[Any]:
    """The runs matching every term of one alternative at least (all runs: no alternative), in ``sort``
    order (see ``parse_sort``)."""
    rows = [RunFields(run) for run in runs]
    if terms:
        rows = [r for r in rows if any(all(matches(t, r.get(t.field)) for t in alt) for alt in terms)]
    field, descending = parse_sort(sort)
    present = [r for r in rows if r.get(field) is not None]
    missing = [r for r in rows if r.get(field) is None]
    present.sort(key=lambda r: _sort_key(r.get(field)), reverse=descending)
    return [r.run for r in present + missing]


def _sort_key(value: Any) -> tuple[int, Any]:
    number = _number(value)
    if number is not None:
        return (0, number)
    if isinstance(value, list):
        return (1, ",".join(map(_text, value)).lower())
    return (1, _text(value).lower())


def parse_sort(raw: str | None) -> tuple[str, bool]:
    """(field, descending) of ``-field`` or ``field``; '' or None: newest first."""
    raw = (raw or "").strip() or DEFAULT_SORT
    descending = raw.startswith("-")
    name = raw.removeprefix("-").strip()
    if not name or len(name) > 200 or "\x00" in name:
        raise FilterError("sort: give a field name, '-' first for descending (-val/acc/mean@4)")
    return check_field(name, "sort: "), descending


def parse_columns(raw: str | list[str] | None) -> list[str]:
    """Extra columns of the list: fields (comma-separated, or a list), at most MAX_COLUMNS."""
    parts = raw if isinstance(raw, list) else (raw or "").split(",")
    names = [str(p).strip() for p in parts if str(p).strip()]
    if len(names) > MAX_COLUMNS:
        raise FilterError(f"columns: at most {MAX_COLUMNS} (got {len(names)})")
    if any("\x00" in n or len(n) > 200 for n in names):
        raise FilterError("columns: a name is too long or contains a NUL character")
    return list(dict.fromkeys(check_field(n, "columns: ") for n in names))


def column_values(run: Any, columns: list[str]) -> dict[str, Any]:
    fields = RunFields(run)
    return {c: _jsonable(fields.get(c)) for c in columns}


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, dict)):
        return value
    return str(value)
