"""The new-run form, generated from ``dapo.runconfig.docs.describe_fields()``: one input per knob, grouped by
config section, the field's docstring as help text. Posted values are parsed by the field's type; what
cannot be parsed is an error beside the field, and the rest is validated by dapo.runconfig."""

from __future__ import annotations

import functools
import math
from typing import Any

from dapo.rewards import describe_rewards
from dapo.runconfig.docs import describe_fields
from dapo.runconfig.presets import PRESETS, get_preset, preset_descriptions

SECTION_TITLES = {
    "model": "Model",
    "data": "Data",
    "rollout": "Rollout",
    "algorithm": "Algorithm (DAPO)",
    "optim": "Optimiser",
    "validation": "Validation",
    "checkpoint": "Checkpoints",
    "execution": "Execution",
    "logging": "Logging",
    "run": "Run",
}
INPUTS = {"bool": "checkbox", "choice": "select", "int": "number", "float": "number"}


@functools.cache
def fields() -> list[dict[str, Any]]:
    return describe_fields()


def parse_post(post: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Flat {dotted name: typed value} from a POST, and {dotted name: message} for unparseable values."""
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for f in fields():
        name = f["name"]
        try:
            values[name] = parse_value(f, post.get(name))
        except ValueError as e:
            values[name] = post.get(name, "")
            errors[name] = str(e)
    return values, errors


def parse_value(f: dict[str, Any], raw: str | None) -> Any:
    """One field's typed value from the form's text (ValueError with the message for the form)."""
    if f["type"] == "bool":
        return raw in ("on", "true", "1")
    text = (raw or "").strip()
    if text == "" and f["nullable"]:
        return None
    if f["type"] == "int":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"must be an integer, got {text!r}") from None
    if f["type"] == "float":
        return _float(text)
    if f["type"] == "pair":
        parts = [p for p in text.replace(",", " ").split() if p]
        if len(parts) != 2:
            raise ValueError("must be two numbers, e.g. 0.9, 0.999")
        return [_float(p) for p in parts]
    if f["type"] == "list":
        return [p.strip() for p in text.replace("\n", ",").split(",") if p.strip()]
    return raw or ""


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def unflatten(values: dict[str, Any]) -> dict[str, Any]:
    """{"optim.lr": 1e-5, "seed": 0} → {"optim": {"lr": 1e-5}, "seed": 0}."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        section, _, key = name.partition(".")
        if key:
            out.setdefault(section, {})[key] = value
        else:
            out[section] = value
    return out


def sections(values: dict[str, Any], errors: dict[str, str]) -> list[dict[str, Any]]:
    """The form's fieldsets: [{"name", "title", "fields": [field + value, error, input]}], in config order."""
    out: dict[str, dict[str, Any]] = {}
    for f in fields():
        section = out.setdefault(
            f["section"],
            {"name": f["section"], "title": SECTION_TITLES.get(f["section"], f["section"]), "fields": []},
        )
        value = values.get(f["name"], f["default"])
        section["fields"].append(
            {
                **f,
                "value": display(value),
                "checked": value is True,
                "error": errors.get(f["name"], ""),
                "input": INPUTS.get(f["type"], "text"),
                "id": "f-" + f["name"].replace(".", "-"),
                "options": field_options(f["name"]),
            }
        )
    for section in out.values():
        section["has_error"] = any(f["error"] for f in section["fields"])
    return list(out.values())


def field_options(name: str) -> list[dict[str, str]]:
    """Values a text field suggests, each with its help: the rewards data.reward_fn may name (built-ins
    and the plugins an administrator allowed, read without importing them)."""
    return describe_rewards() if name == "data.reward_fn" else []


def display(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


@functools.cache
def presets_data() -> dict[str, Any]:
    """{preset: {"description", "values": {dotted: display string or bool}}} for the preset menu's script."""
    descriptions = preset_descriptions()
    data = {}
    for name in PRESETS:
        flat = get_preset(name).flat()
        data[name] = {
            "description": descriptions[name],
            "values": {k: v if isinstance(v, bool) else display(v) for k, v in flat.items()},
        }
    return data
