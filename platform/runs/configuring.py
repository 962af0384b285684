"""From what a user sends (a preset, a config, dotted overrides, catalog picks) to a validated RunConfig.

Every problem is reported as ``{dotted field: message}`` (the keys of dapo.runconfig.ConfigError), so the form
shows each message beside its field and the API returns them as they are. Nothing is saved on error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from catalog.models import BaseModel, Dataset
from catalog.paths import PathError, resolve_path
from core.params import int_or_none

from dapo.runconfig import ConfigError, RunConfig, shown
from dapo.runconfig.presets import PRESETS, get_preset
from runs.names import name_problem
from runs.planning import capacity_errors, model_errors

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
    picks; then ``overrides`` ({"optim.lr": 1e-5}); then the paths are checked. A data path written in
    ``config`` or ``overrides`` that is not the picked dataset version's file is an error on that field
    (a preset's demo files are what a pick replaces)."""
    base, errors = _base(preset, config)
    if base is None:
        return None, errors
    picks: dict[str, Any] = {}
    for entry in (base_model, dataset):
        if entry is not None:
            picks.update(entry.config_overrides())
    if overrides is not None and not isinstance(overrides, Mapping):
        return None, {"overrides": "must be an object of dotted field names to values"}
    if dataset is not None and (disagree := dataset.disagreements(written_data_paths(config, overrides))):
        return None, disagree
    try:
        cfg = base.with_overrides({**picks, **(overrides or {})})
    except ConfigError as e:
        return None, e.errors
    errors = check_paths(cfg) | nul_errors(cfg.flat())
    errors = errors or model_errors(cfg)  # runs.planning: a trainable family; a GPU run fits its memory
    errors = errors or capacity_errors(cfg)  # runs.planning: the cluster last seen can hold what it asks for
    return (None, errors) if errors else (cfg, {})


def posted_dataset(post: Mapping[str, Any]) -> Dataset | None:
    """The version the new-run form's menu picked (it posts an id), or None."""
    return Dataset.objects.filter(pk=int_or_none(post.get("dataset")) or 0).first()


def written_data_paths(config: Any, overrides: Any) -> dict[str, Any]:
    """The train and validation paths a user wrote: in ``config``'s data section, then ``overrides``."""
    data = config.get("data") if isinstance(config, Mapping) else None
    data = data if isinstance(data, Mapping) else {}
    written = {f"data.{k}": data[k] for k in ("train_path", "val_path") if k in data}
    if isinstance(overrides, Mapping):
        written |= {k: overrides[k] for k in ("data.train_path", "data.val_path") if k in overrides}
    return written


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
    """Every path the run reads (``RunConfig.file_paths``) inside its roots and present, by field."""
    errors: Errors = {}
    for name, path in cfg.file_paths():
        if name in errors:  # data.val_paths: the first bad file
            continue
        try:
            resolve_path(name, path)
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
    if problem := name_problem(name):
        return {"name": problem}
    return {}
