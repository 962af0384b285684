"""The generic half of the run configuration: field errors, and checking JSON values against dataclass
field types (``build_section``, ``coerce``). Torch-free; ``dapo.runconfig.run`` builds the run config on
it."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

MAX_INT = 10**9  # bounds every integer knob: a typo like 1e30 steps is an error, not an overflow later


class ConfigError(ValueError):
    """Invalid configuration. ``errors`` maps dotted field names to messages."""

    def __init__(self, errors: Mapping[str, str]):
        self.errors = dict(errors)
        super().__init__("; ".join(f"{name}: {msg}" for name, msg in self.errors.items()))

    def prefixed(self, prefix: str) -> ConfigError:
        return ConfigError({f"{prefix}.{name}": msg for name, msg in self.errors.items()})


class Checks:
    """Collects field errors during ``__post_init__`` and raises them together."""

    def __init__(self) -> None:
        self.errors: dict[str, str] = {}

    def require(self, ok: bool, name: str, msg: str) -> None:
        if not ok and name not in self.errors:
            self.errors[name] = msg

    def done(self) -> None:
        if self.errors:
            raise ConfigError(self.errors)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def build_section(cls: type, value: Any, prefix: str) -> Any:
    if not isinstance(value, Mapping):
        raise ConfigError({prefix: f"must be an object, got {type(value).__name__}"})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    errors: dict[str, str] = {}
    kwargs: dict[str, Any] = {}
    for key, raw in value.items():
        if key not in names:
            errors[error_key(f"{prefix}.{key}")] = f"unknown field; valid fields: {', '.join(sorted(names))}"
            continue
        try:
            kwargs[key] = coerce(raw, hints[key], f"{prefix}.{key}")
        except ConfigError as e:
            errors.update(e.errors)
    if errors:  # the section's own checks still run on the fields that were valid, so all come at once
        try:
            cls(**kwargs)
        except ConfigError as e:
            given = {f"{prefix}.{key}" for key in kwargs}
            errors.update({k: m for k, m in e.prefixed(prefix).errors.items() if k in given})
        raise ConfigError(errors)
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise e.prefixed(prefix) from None


def coerce(value: Any, tp: Any, name: str) -> Any:
    """Check a JSON value against a field type; ints are accepted for floats, nothing else is converted."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return coerce(value, inner, name)
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices or not isinstance(value, str):
            raise ConfigError({name: f"must be one of {', '.join(map(str, choices))}; got {shown(value)}"})
        return value
    if origin is tuple and typing.get_args(tp)[-1] is Ellipsis:
        if not isinstance(value, list | tuple) or len(value) > 1024:
            raise ConfigError({name: "must be a list (1024 items at most)"})
        return tuple(coerce(v, typing.get_args(tp)[0], name) for v in value)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list | tuple) or len(value) != len(args):
            raise ConfigError({name: f"must be a list of {len(args)} numbers"})
        return tuple(coerce(v, a, name) for v, a in zip(value, args, strict=True))
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError({name: f"must be true or false, got {shown(value)}"})
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError({name: f"must be an integer, got {shown(value)}"})
        if abs(value) > 2**63:
            raise ConfigError({name: "is too large"})
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError({name: f"must be a number, got {shown(value)}"})
        if abs(value) > 1e300 or not math.isfinite(float(value)):
            raise ConfigError({name: "must be a finite number"})
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError({name: f"must be a string, got {shown(value)}"})
        if len(value) > 4096:
            raise ConfigError({name: "is too long (4096 characters at most)"})
        if not is_unicode(value):
            raise ConfigError({name: "must be valid Unicode text (it contains a lone surrogate)"})
        return value
    raise ConfigError({name: f"unsupported type {tp}"})


def is_unicode(text: str) -> bool:
    """False for a string with lone surrogates (JSON's "\\ud800"): no database or file system takes it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(value: Any, limit: int = 60) -> str:
    """A value for an error message, cut: a message must not echo a megabyte the user sent."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_key(key: Any) -> str:
    """A user's unknown key as an error's field name: as sent, unless too long or not valid Unicode."""
    text = str(key).encode("utf-8", "backslashreplace").decode("utf-8")  # a surrogate becomes "\\ud800"
    return text if len(text) <= 100 else text[:99] + "…"
