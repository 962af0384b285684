"""From what a user sends (a preset, a config, dotted overrides, catalog picks) to a validated RunConfig.

Every problem is reported as ``{dotted field: message}`` (the keys of dapo.config.ConfigError), so the form
shows each message beside its field and the API returns them as they are. Nothing is saved on error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from catalog.models import BaseModel, Dataset
from catalog.paths import PathError, check_data_path, check_model_path

from dapo.config import ConfigError, RunConfig, is_unicode, shown
from dapo.presets import PRESETS, get_preset
from runs.planning import memory_errors

Errors = dict[str, str]


def build_config(
    *,
    preset: str | None = None,
    config: Any = None,
    overrides: Any = None,
    base_model: BaseModel | None = None,
    dataset: Dataset | None = None,
) -> tuple[RunConfig | None, Errors]:
    """A validated config, or None and the errors. ``config`` wins over ``preset``; then the catalog
    picks; then ``overrides`` ({"optim.lr": 1e-5}); then the paths are checked."""
    base, errors = _base(preset, config)
    if base is None:
        return None, errors
    picks: dict[str, Any] = {}
    for entry in (base_model, dataset):
        if entry is not None:
            picks.update(entry.config_overrides())
    if overrides is not None and not isinstance(overrides, Mapping):
        return None, {"overrides": "must be an object of dotted field names to values"}
    try:
        cfg = base.with_overrides({**picks, **(overrides or {})})
    except ConfigError as e:
        return None, e.errors
    errors = check_paths(cfg) | nul_errors(cfg.flat())
    errors = errors or memory_errors(cfg)  # runs.planning: a GPU run must fit its declared GPU memory
    return (None, errors) if errors else (cfg, {})


def nul_errors(flat: Mapping[str, Any]) -> Errors:
    """NUL characters: PostgreSQL cannot store them in text or JSON, so they are refused up front."""
    return {
        name: "must not contain NUL characters"
        for name, v in flat.items()
        if any(isinstance(x, str) and "\x00" in x for x in (v if isinstance(v, list | tuple) else [v]))
    }


def _base(preset: str | None, config: Any) -> tuple[RunConfig | None, Errors]:
    if config is not None:
        try:
            return RunConfig.from_dict(config), {}
        except ConfigError as e:
            return None, e.errors
    if not preset:
        return None, {"preset": f"give a preset or a config; presets: {', '.join(PRESETS)}"}
    if not isinstance(preset, str) or preset not in PRESETS:
        return None, {"preset": f"unknown preset {shown(preset)}; valid presets: {', '.join(PRESETS)}"}
    return get_preset(preset), {}


def check_paths(cfg: RunConfig) -> Errors:
    """Model directory inside the model roots; data files present."""
    errors: Errors = {}
    checks = [
        ("model.path", lambda: check_model_path(cfg.model.path)),
        ("data.train_path", lambda: check_data_path(cfg.data.train_path, required=True)),
        ("data.val_path", lambda: check_data_path(cfg.data.val_path, required=False)),
        *(("data.val_paths", lambda p=p: check_data_path(p, required=True)) for p in cfg.data.val_paths),
    ]
    for name, check in checks:
        if name in errors:  # data.val_paths: the first bad file
            continue
        try:
            check()
        except PathError as e:
            errors[name] = str(e)
        except (OSError, RuntimeError, ValueError) as e:  # too long a name, "~nobody/", a surrogate
            errors[name] = f"is not a usable path ({type(e).__name__}: {str(e)[:80]})"
    return errors


def validate_name(name: Any) -> Errors:
    if not isinstance(name, str) or not name.strip():
        return {"name": "give the run a name"}
    if len(name) > 200:
        return {"name": "is too long (200 characters at most)"}
    if any(ord(c) < 32 for c in name):
        return {"name": "must not contain control characters"}
    if not is_unicode(name):
        return {"name": "must be valid Unicode text"}
    return {}
