"""The rollout inspector's one filter: query parameters -> a queryset of a run's samples, and its order.

Every list of samples comes from ``SampleFilter`` (the inspector page, its JSON and the exports alike). A
bad parameter raises ``BadQuery`` naming it (a 400); a well-formed step without samples is ``NoSuchStep``
(a 404).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from core.params import INT32_MAX, BadInteger, int_param
from django.db.models import FloatField, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.http import QueryDict
from runs.models import Run, Sample
from runs.step_values import REASON_FILTERS, filter_by_reason

MAX_K = 500
MAX_QUERY_CHARS = 200
SORTS: dict[str, tuple[str, bool]] = {
    "index": ("sample_index", False),
    "reward_desc": ("reward", True),
    "reward_asc": ("reward", False),
    "length_desc": ("length", True),
    "length_asc": ("length", False),
    "advantage_desc": ("advantage", True),
    "advantage_asc": ("advantage", False),
}
"""Sort name -> (field, descending); ties go by sample index."""
PART_FIELDS = ("score", "overlong_penalty", "reward")
"""Reward parts stored as columns; ``reward/<name>`` is one reward's own score (Sample.reward_scores)."""
PART_OPS = {"lt": "lt", "le": "lte", "eq": "", "ne": "", "ge": "gte", "gt": "gt"}
"""The comparison of the reward-part filter -> its Django lookup (eq and ne compare within PART_EQ_TOL)."""
PART_EQ_TOL = 1e-9


class BadQuery(ValueError):
    """A query parameter with a value the inspector cannot use; shown as a 400 naming the parameter."""


class NoSuchStep(LookupError):
    """A well-formed step without samples in the split; shown as a 404."""


# ---- the one filter: query parameters -> a queryset --------------------------------------------------


@dataclass(frozen=True)
class SampleFilter:
    split: str = "train"
    step: int | None = None
    """None: every step (exports only)."""
    acc: bool | None = None
    kept: bool | None = None
    truncated: bool | None = None
    tokens: bool | None = None
    """Has per-token data."""
    reward_min: float | None = None
    reward_max: float | None = None
    length_min: int | None = None
    length_max: int | None = None
    problem: int | None = None
    q: str = ""
    reason: str = ""
    """Why the step did not train on it (runs.step_values.REASON_FILTERS): "" any."""
    part: str = ""
    """A reward part to compare (PART_FIELDS or reward/<name>), with ``part_op`` and ``part_value``."""
    part_op: str = ""
    part_value: float | None = None
    sort: str = "index"
    rank: str = ""
    """"top" or "bottom": the k best or worst samples by ``rank_by`` (a flat list)."""
    rank_by: str = "reward"
    k: int = 10
    view: str = "groups"
    page: int = 1

    @classmethod
    def from_query(
        cls, params: QueryDict, *, default_step: int | None, all_steps: bool = False
    ) -> SampleFilter:
        """Parse query parameters; raises BadQuery naming the first bad one. ``step=all`` is accepted only
        with ``all_steps`` (exports); an absent step is ``default_step``."""
        raw_step = params.get("step", "")
        if raw_step == "all" and all_steps:
            step = None
        else:
            step = default_step if raw_step == "" else _int(params, "step", 0, INT32_MAX)
        q = params.get("q", "").strip()
        if "\x00" in q:
            raise BadQuery("q: the search text must not contain NUL characters")
        if len(q) > MAX_QUERY_CHARS:
            raise BadQuery(f"q: the search text is limited to {MAX_QUERY_CHARS} characters")
        part, part_op, part_value = _part(params)
        return cls(
            reason=choice(params, "reason", REASON_FILTERS),
            part=part,
            part_op=part_op,
            part_value=part_value,
            split=choice(params, "split", ("train", "val")),
            step=step,
            acc=_bool(params, "acc"),
            kept=_bool(params, "kept"),
            truncated=_bool(params, "truncated"),
            tokens=_bool(params, "tokens"),
            reward_min=_float(params, "reward_min"),
            reward_max=_float(params, "reward_max"),
            length_min=_int(params, "length_min", 0, INT32_MAX),
            length_max=_int(params, "length_max", 0, INT32_MAX),
            problem=_int(params, "problem", 0, INT32_MAX),
            q=q,
            sort=choice(params, "sort", tuple(SORTS)),
            rank=choice(params, "rank", ("", "top", "bottom")),
            rank_by=choice(params, "rank_by", ("reward", "length")),
            k=_int(params, "k", 1, MAX_K) or 10,
            view=choice(params, "view", ("groups", "list")),
            page=_int(params, "page", 1, 10**6) or 1,
        )

    def queryset(self, run: Run) -> QuerySet[Sample]:
        """The matching samples of the run, unordered (one step: a range of the unique index)."""
        qs = Sample.objects.filter(run=run, split=self.split)
        if self.step is not None:
            qs = qs.filter(step=self.step)
        conditions = {
            "acc": self.acc,
            "kept": self.kept,
            "truncated": self.truncated,
            "problem_index": self.problem,
            "reward__gte": self.reward_min,
            "reward__lte": self.reward_max,
            "length__gte": self.length_min,
            "length__lte": self.length_max,
        }
        qs = qs.filter(**{name: value for name, value in conditions.items() if value is not None})
        if self.tokens is not None:
            qs = qs.filter(tokens__isnull=not self.tokens)
        if self.q:
            qs = qs.filter(Q(prompt__icontains=self.q) | Q(response__icontains=self.q))
        qs = filter_by_reason(qs, self.reason)
        if self.part and self.part_value is not None:
            qs = self._part_filter(qs)
        return qs

    def _part_filter(self, qs: QuerySet[Sample]) -> QuerySet[Sample]:
        """Samples whose reward part compares with ``part_value``; a sample without that part never
        matches (not even "≠")."""
        column = self.part
        if self.part.startswith("reward/"):
            name = self.part.removeprefix("reward/")
            qs = qs.annotate(part_score=Cast(KeyTextTransform(name, "reward_scores"), FloatField()))
            column = "part_score"
        value = float(self.part_value or 0.0)
        if self.part_op == "eq":
            return qs.filter(**{f"{column}__range": (value - PART_EQ_TOL, value + PART_EQ_TOL)})
        if self.part_op == "ne":
            return qs.filter(
                Q(**{f"{column}__lt": value - PART_EQ_TOL}) | Q(**{f"{column}__gt": value + PART_EQ_TOL})
            )
        return qs.filter(**{f"{column}__{PART_OPS[self.part_op]}": value})

    def ordered(self, qs: QuerySet[Sample]) -> QuerySet[Sample]:
        """Ranked (top/bottom-k, cut to k) or sorted; ties by step and sample index."""
        if self.rank:
            field = ("-" if self.rank == "top" else "") + self.rank_by
            return qs.order_by(field, "step", "sample_index")[: self.k]
        field, desc = SORTS[self.sort]
        first = [] if self.sort == "index" else [("-" if desc else "") + field]
        return qs.order_by(*first, "step", "sample_index")

    @property
    def narrows(self) -> bool:
        """True when the filter leaves out samples of the step (anything beyond split, step and layout)."""
        layout = {"split", "step", "sort", "view", "page", "rank_by", "k"}
        return any(getattr(self, f.name) != f.default for f in fields(self) if f.name not in layout)

    def params(self) -> dict[str, Any]:
        """The non-default values as query parameters (what links and exports carry)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value != f.default and value is not None:
                out[f.name] = str(value).lower() if isinstance(value, bool) else value
        if self.step is None:
            out["step"] = "all"
        return out


def _int(params: QueryDict, name: str, lo: int, hi: int) -> int | None:
    try:
        return int_param(params, name, low=lo, high=hi)
    except BadInteger as e:
        raise BadQuery(str(e)) from None


def _float(params: QueryDict, name: str) -> float | None:
    raw = params.get(name, "").strip()
    if raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise BadQuery(f"{name}: must be a number, got {raw[:40]!r}") from None
    if not math.isfinite(value) or abs(value) > 1e12:
        raise BadQuery(f"{name}: must be a finite number, got {raw[:40]}")
    return value


def _bool(params: QueryDict, name: str) -> bool | None:
    raw = params.get(name, "").strip().lower()
    if raw in ("", "any"):
        return None
    if raw in ("true", "1", "yes"):
        return True
    if raw in ("false", "0", "no"):
        return False
    raise BadQuery(f"{name}: must be true, false or any, got {raw[:40]!r}")


def _part(params: QueryDict) -> tuple[str, str, float | None]:
    """The reward-part filter: ``part`` (score, overlong_penalty, reward or reward/<name>), ``part_op``
    (lt, le, eq, ne, ge, gt; default eq) and ``part_value`` (a number), all or none."""
    part = params.get("part", "").strip()
    value = _float(params, "part_value")
    if not part:
        if value is not None:
            raise BadQuery("part: name the reward part that part_value compares")
        return "", "", None
    if "\x00" in part or len(part) > MAX_QUERY_CHARS:
        raise BadQuery(f"part: at most {MAX_QUERY_CHARS} characters, no NUL")
    if part not in PART_FIELDS and not (part.startswith("reward/") and len(part) > len("reward/")):
        raise BadQuery(f"part: must be one of {', '.join(PART_FIELDS)} or reward/<name>, got {part[:40]!r}")
    op = choice(params, "part_op", tuple(PART_OPS)) if params.get("part_op") else "eq"
    if value is None:
        raise BadQuery("part_value: give the number to compare the part with")
    return part, op, value


def choice(params: QueryDict, name: str, choices: tuple[str, ...]) -> str:
    raw = params.get(name, "") or choices[0]
    if raw not in choices:
        raise BadQuery(
            f"{name}: must be one of {', '.join(c or '(empty)' for c in choices)}, got {raw[:40]!r}"
        )
    return raw
