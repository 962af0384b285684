"""Grid and random sweeps over chosen config fields, launched as one run group (like the ablation ladder).

A sweep is {"mode": "grid" | "random", "fields": {dotted name: [values] | {"low", "high", "scale"}},
"runs": N (random), "seed": S (random), "cap": C}: the same structure from the API's body and from the
new-run form (``from_form`` turns the form's text into it). ``parse`` checks it; ``expand`` gives the runs'
values; ``plan`` builds every run's config through the single run's own validation (the caller's
``build``), and refuses the whole sweep when one combination is invalid. sweeps.views queues them in
one transaction: nothing is queued unless every run is valid.

- grid: the product of the lists, in the order the fields are given (the last field varies fastest);
  refused when the product exceeds the cap, before anything is built.
- random: ``runs`` draws from ``random.Random(seed)``: a list picks one of its values, a range draws
  uniformly (``linear``) or log-uniformly (``log``), integers for an integer field. Drawn floats are rounded
  to 3 significant digits, so a run's name states its exact value. Draws are distinct: a repeat is drawn
  again, and a sweep asking for more runs than its fields have combinations is refused.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from core.params import BadInteger, to_int
from runs import forms
from runs.names import name_problem

from dapo.runconfig import RunConfig, shown

MODES = ("grid", "random")
SCALES = ("linear", "log")
SWEEPABLE = ("int", "float", "bool", "choice", "str")
"""Field types a sweep may vary (a list field such as data.val_paths, or optim.betas, may not)."""
DEFAULT_CAP = 20
MAX_RUNS = 30
"""The most runs one sweep queues: the group page (the comparison) shows at most this many runs."""
MAX_FIELDS = 8
MAX_VALUES = 100
DRAWN_DIGITS = 3
NAME_LIMIT = 200
SEP = " · "
"""Between the sweep's name and a run's values, as in the ablation ladder's names (runs.ladder)."""

Errors = dict[str, str]


@dataclass(frozen=True)
class Axis:
    """One swept field: a list of typed values, or (random sweeps) a range from low to high."""

    field: str
    values: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0
    scale: str = "linear"
    integer: bool = False

    @property
    def is_range(self) -> bool:
        return not self.values

    def size(self) -> int | None:
        """How many distinct values it can take; None for a continuous range."""
        if not self.is_range:
            return len(self.values)
        return int(self.high) - int(self.low) + 1 if self.integer else None


@dataclass(frozen=True)
class Sweep:
    mode: str
    axes: tuple[Axis, ...]
    runs: int
    """How many runs: the grid's product, or the random sweep's count."""
    seed: int
    cap: int


# ---- checking a sweep --------------------------------------------------------------------------------


def field_types() -> dict[str, dict[str, Any]]:
    """{dotted name: its describe_fields() entry} for every field a sweep may vary."""
    return {f["name"]: f for f in forms.fields() if f["type"] in SWEEPABLE}


def parse(raw: Any) -> tuple[Sweep | None, Errors]:
    """A checked Sweep, or None and {"sweep.<key>": message}."""
    if not isinstance(raw, Mapping):
        return None, {"sweep": f"must be an object with mode and fields, got {shown(raw)}"}
    errors: Errors = {}
    unknown = sorted(str(k)[:60] for k in raw if k not in ("mode", "fields", "runs", "seed", "cap"))
    if unknown:
        errors["sweep"] = f"unknown key {unknown[0]!r}; valid keys: mode, fields, runs, seed, cap"
    mode = raw.get("mode", "grid")
    if mode not in MODES:
        errors["sweep.mode"] = f"must be grid or random, got {shown(mode)}"
        mode = "grid"
    cap = _int(raw.get("cap", DEFAULT_CAP), "sweep.cap", 1, MAX_RUNS, errors)
    seed = _int(raw.get("seed", 0), "sweep.seed", 0, 2**32 - 1, errors)
    if mode == "grid" and "runs" in raw:
        errors["sweep.runs"] = "a grid runs every combination of its lists; runs is for random sweeps"
    if mode == "grid" and "seed" in raw:
        errors["sweep.seed"] = "a grid draws nothing; seed is for random sweeps"
    axes = _axes(raw.get("fields"), mode, errors)
    if mode == "random":
        runs = _int(raw.get("runs"), "sweep.runs", 1, MAX_RUNS, errors)
    else:
        runs = math.prod(len(a.values) for a in axes)
    if errors:
        return None, errors
    if runs > cap:
        return None, {"sweep.cap": _over_cap(mode, axes, runs, cap)}
    if mode == "random" and (distinct := _distinct(axes)) is not None and runs > distinct:
        return None, {
            "sweep.runs": f"asks for {runs} different runs, but its fields have only {distinct} "
            "combinations: ask for fewer, or use a grid"
        }
    return Sweep(mode=mode, axes=tuple(axes), runs=runs, seed=seed, cap=cap), {}


def _over_cap(mode: str, axes: list[Axis], runs: int, cap: int) -> str:
    if mode == "random":
        return f"the sweep asks for {runs} runs, more than its cap of {cap}"
    product = " × ".join(str(len(a.values)) for a in axes)
    more = (
        f"raise the cap (at most {MAX_RUNS})"
        if runs <= MAX_RUNS
        else f"{MAX_RUNS} is the most one sweep queues"
    )
    return f"the grid has {product} = {runs} runs, more than the cap of {cap}: {more}, or give fewer values"


def _distinct(axes: list[Axis]) -> int | None:
    sizes = [a.size() for a in axes]
    return None if any(s is None for s in sizes) else math.prod(s or 0 for s in sizes)


def _int(raw: Any, key: str, low: int, high: int, errors: Errors) -> int:
    try:
        return to_int(raw, key, low=low, high=high)
    except BadInteger as e:
        errors[key] = e.reason
        return low


def shown_key(key: Any, limit: int = 100) -> str:
    """A key the user sent, as an error's key: cut, and a lone surrogate escaped (no JSON answer or page
    could be encoded with it)."""
    return str(key)[:limit].encode("utf-8", "backslashreplace").decode("utf-8")


def _axes(raw: Any, mode: str, errors: Errors) -> list[Axis]:
    if not isinstance(raw, Mapping) or not raw:
        errors["sweep.fields"] = 'name the fields to vary: {"optim.lr": [1e-5, 2e-5], ...}'
        return []
    if len(raw) > MAX_FIELDS:
        errors["sweep.fields"] = f"vary at most {MAX_FIELDS} fields at once (got {len(raw)})"
        return []
    known = field_types()
    axes = []
    for name, spec in raw.items():
        key = f"sweep.fields.{shown_key(name)}"
        f = known.get(name) if isinstance(name, str) else None
        if f is None:
            listed = isinstance(name, str) and any(g["name"] == name for g in forms.fields())
            errors[key] = "a list field cannot be swept" if listed else "unknown field"
            continue
        axis = _axis(f, spec, mode, key, errors)
        if axis is not None:
            axes.append(axis)
    return axes


def _axis(f: dict[str, Any], spec: Any, mode: str, key: str, errors: Errors) -> Axis | None:
    name = f["name"]
    if isinstance(spec, Mapping):
        if mode == "grid":
            errors[key] = "a grid takes a list of values; a range is for random sweeps"
            return None
        return _range(f, spec, key, errors)
    if not isinstance(spec, list | tuple) or not spec:
        errors[key] = f"give a non-empty list of values, got {shown(spec)}"
        return None
    if len(spec) > MAX_VALUES:
        errors[key] = f"at most {MAX_VALUES} values (got {len(spec)})"
        return None
    values: list[Any] = []
    for value in spec:
        problem = value_error(f, value)
        if problem:
            errors[key] = f"{shown(value)} {problem}"
            return None
        if any(_same(value, v) for v in values):
            errors[key] = f"lists {shown(value)} twice"
            return None
        values.append(value)
    return Axis(field=name, values=tuple(values), integer=f["type"] == "int")


def _same(a: Any, b: Any) -> bool:
    """Equal as config values: 1 and 1.0 are, True and 1 are not."""
    return bool(a == b) and isinstance(a, bool) == isinstance(b, bool)


def _range(f: dict[str, Any], spec: Mapping[str, Any], key: str, errors: Errors) -> Axis | None:
    if f["type"] not in ("int", "float"):
        errors[key] = f"a range needs a number field; {f['name']} is {f['type']}: give a list"
        return None
    unknown = [str(k)[:40] for k in spec if k not in ("low", "high", "scale")]
    if unknown:
        errors[key] = f"unknown key {unknown[0]!r} in a range; valid keys: low, high, scale"
        return None
    bounds, scale = (spec.get("low"), spec.get("high")), spec.get("scale", "linear")
    for bound, name in zip(bounds, ("low", "high"), strict=True):
        problem = value_error({**f, "nullable": False}, bound)
        if problem:
            errors[key] = f"{name} {shown(bound)} {problem}"
            return None
    low, high = (float(b) for b in bounds if b is not None)  # numbers: value_error said so
    if scale not in SCALES:
        errors[key] = f"scale must be linear or log, got {shown(scale)}"
        return None
    if not low < high:
        errors[key] = f"low ({bounds[0]}) must be below high ({bounds[1]})"
        return None
    if scale == "log" and low <= 0:
        errors[key] = f"a log scale needs low above 0, got {bounds[0]}"
        return None
    return Axis(field=f["name"], low=low, high=high, scale=scale, integer=f["type"] == "int")


def value_error(f: dict[str, Any], value: Any) -> str:
    """Why ``value`` cannot be this field's value (its type only: ranges are the config's to check)."""
    if value is None:
        return "" if f["nullable"] else "is not allowed: the field has no empty value"
    kind = f["type"]
    if kind == "bool":
        return "" if isinstance(value, bool) else "is not true or false"
    if kind in ("int", "float") and (isinstance(value, bool) or not isinstance(value, int | float)):
        return "is not a number"
    if kind == "int" and not isinstance(value, int):
        return "is not an integer"
    if kind == "float" and not math.isfinite(value):
        return "is not a finite number"
    if kind in ("int", "float") and abs(value) > 1e300:
        return "is too large"
    if kind == "choice" and value not in f["choices"]:
        return f"is not one of {', '.join(map(str, f['choices']))}"
    if kind in ("str", "choice") and not isinstance(value, str):
        return "is not a string"
    return ""


# ---- the runs of a sweep -------------------------------------------------------------------------------


def expand(sweep: Sweep) -> list[dict[str, Any]]:
    """Each run's values, {dotted name: value}: the grid's product in order, or the seeded random draws."""
    if sweep.mode == "grid":
        names = [a.field for a in sweep.axes]
        return [
            dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(a.values for a in sweep.axes))
        ]
    rng = random.Random(sweep.seed)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for _ in range(200 * sweep.runs):  # a repeat is drawn again; parse refused a sweep with too few combos
        combo = {a.field: _draw(a, rng) for a in sweep.axes}
        key = repr(sorted(combo.items()))
        if key not in seen:
            seen.add(key)
            out.append(combo)
            if len(out) == sweep.runs:
                break
    return out


def _draw(axis: Axis, rng: random.Random) -> Any:
    if not axis.is_range:
        return axis.values[rng.randrange(len(axis.values))]
    if axis.scale == "log":
        value = math.exp(rng.uniform(math.log(axis.low), math.log(axis.high)))
    else:
        value = rng.uniform(axis.low, axis.high)
    if axis.integer:
        return min(max(round(value), math.ceil(axis.low)), math.floor(axis.high))
    return float(f"{value:.{DRAWN_DIGITS}g}")


def label(values: Mapping[str, Any]) -> str:
    """What a run's name adds to the sweep's name: "lr=1e-05, n=16" (the last part of each dotted name,
    the whole name where two swept fields share their last part)."""
    last = [name.rsplit(".", 1)[-1] for name in values]
    short = {name: tail if last.count(tail) == 1 else name for name, tail in zip(values, last, strict=True)}
    return ", ".join(f"{short[name]}={text(v)}" for name, v in values.items())


def text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # the shortest text that reads back as this exact number
    if isinstance(value, str) and name_problem(value):
        return repr(value)  # a run's name (and an error naming the run) holds no control or format character
    return str(value)


Planned = list[tuple[str, dict[str, Any], RunConfig]]


def plan(
    sweep: Sweep, name: str, build: Callable[[dict[str, Any]], tuple[RunConfig | None, Errors]]
) -> tuple[Planned, Errors]:
    """Every run as (name, values, config), each config made by ``build(values)``: the single run's own
    validation with the run's values as overrides. One invalid run refuses the sweep: its errors come
    back, marked with its values (plainly when every run fails alike: the base config is the problem)."""
    combos = expand(sweep)
    if len(combos) < sweep.runs:  # narrow ranges: rounded draws repeat
        drawn = f"only {len(combos)} different runs could be drawn"
        return [], {"sweep.runs": f"{drawn}: widen the ranges or ask for fewer"}
    longest = max(len(SEP + label(c)) for c in combos)
    if len(name.strip()) + longest > NAME_LIMIT:
        most = NAME_LIMIT - longest
        if most < 1:
            return [], {"sweep.fields": f"the runs' values make names longer than {NAME_LIMIT} characters"}
        return [], {"name": f"is too long for the sweep's run names ({most} characters at most)"}
    planned: Planned = []
    failures: list[tuple[str, Errors]] = []
    for combo in combos:
        config, errors = build(combo)
        if config is None:
            failures.append((label(combo), errors))
        else:
            planned.append((f"{name.strip()}{SEP}{label(combo)}", combo, config))
    if not failures:
        return planned, {}
    first, errors = failures[0]
    if len(failures) == len(combos) and all(e == errors for _, e in failures):
        return [], errors
    where = f"in the sweep's run {first}" + (f", and {len(failures) - 1} more" if len(failures) > 1 else "")
    return [], {k: f"{m} ({where})" for k, m in errors.items()}


# ---- the new-run form's sweep panel --------------------------------------------------------------------
