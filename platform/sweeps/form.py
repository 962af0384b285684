"""The new-run form's sweep panel: its rows as posted (``form_state``), turned into the structure
``sweeps.plan.parse`` checks (``from_form``), and the menu of fields a sweep may vary (``field_menu``)."""

from __future__ import annotations

import itertools
import math
from typing import Any

from runs import forms

from sweeps.plan import DEFAULT_CAP, MAX_FIELDS, Errors, field_types, shown_key

ROW_KEYS = ("field", "kind", "values", "low", "high", "scale")
FORM_ROWS = 2
"""Rows the panel shows without script (the page's script adds more)."""


def form_state(post: Any = None) -> dict[str, Any]:
    """The panel's values: as posted, or empty rows."""
    if post is None:
        rows: list[dict[str, str]] = []
        scalars = {"mode": "grid", "runs": "8", "seed": "0", "cap": str(DEFAULT_CAP)}
    else:
        columns = [post.getlist(f"sweep_{k}") for k in ROW_KEYS]
        rows = [
            dict(zip(ROW_KEYS, cells, strict=False))
            for cells in itertools.zip_longest(*columns, fillvalue="")
        ]
        rows = [r for r in rows if r["field"].strip()][: MAX_FIELDS + 1]  # one too many is enough to refuse
        scalars = {k: post.get(f"sweep_{k}", "") for k in ("mode", "runs", "seed", "cap")}
    blank = dict.fromkeys(ROW_KEYS, "")
    rows += [dict(blank, kind="list", scale="log") for _ in range(max(FORM_ROWS - len(rows), 1))]
    return {**scalars, "rows": rows}


def from_form(state: dict[str, Any]) -> tuple[dict[str, Any], Errors]:
    """The posted panel as the API's sweep object (text parsed by each field's type), and the text that
    could not be parsed, keyed like ``parse``'s errors."""
    known = {f["name"]: f for f in forms.fields()}
    errors: Errors = {}
    mode = state["mode"]
    fields: dict[str, Any] = {}
    for row in state["rows"]:
        name = row["field"].strip()
        if not name:
            continue
        key = f"sweep.fields.{shown_key(name)}"
        if name in fields:
            errors[key] = "is chosen twice: give each field once, with all its values"
            continue
        f = known.get(name)
        if f is None:
            fields[name] = []  # parse names the problem
        elif mode == "random" and row["kind"] == "range":
            fields[name] = _form_range(row)
            if fields[name]["low"] is None or fields[name]["high"] is None:
                errors[key] = "give the range's low and high as numbers"
        else:
            try:
                fields[name] = [_form_value(f, part) for part in _split(row["values"])]
            except ValueError as e:
                errors[key] = str(e)
    sweep: dict[str, Any] = {"mode": mode, "fields": fields, "cap": state["cap"]}  # parse reads the text
    if mode == "random":
        sweep |= {"runs": state["runs"], "seed": state["seed"]}
    return sweep, errors


def _split(text: str) -> list[str]:
    return [p.strip() for p in text.replace("\n", ",").split(",") if p.strip()]


def _form_value(f: dict[str, Any], text: str) -> Any:
    if f["nullable"] and text.lower() in ("none", "null"):
        return None
    if f["type"] == "bool":
        flag = {"true": True, "on": True, "1": True, "false": False, "off": False, "0": False}.get(
            text.lower()
        )
        if flag is None:
            raise ValueError(f"{text!r} is not true or false")
        return flag
    try:
        return forms.parse_value(f, text)
    except ValueError as e:
        raise ValueError(f"{text[:40]!r}: {e}") from None


def _form_range(row: dict[str, str]) -> dict[str, Any]:
    return {
        "low": _form_number(row["low"]),
        "high": _form_number(row["high"]),
        "scale": row["scale"] or "linear",
    }


def _form_number(text: str) -> float | int | None:
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def field_menu() -> list[dict[str, Any]]:
    """The fields the panel offers, by section: [{"title", "fields": [{"name", "type", "choices"}]}]."""
    out: dict[str, dict[str, Any]] = {}
    for f in field_types().values():
        section = out.setdefault(
            f["section"], {"title": forms.SECTION_TITLES.get(f["section"], f["section"]), "fields": []}
        )
        section["fields"].append(
            {"name": f["name"], "type": f["type"], "choices": f["choices"], "nullable": f["nullable"]}
        )
    return list(out.values())
