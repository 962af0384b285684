"""The comparison's config diff: the keys whose values differ between runs, ours and other trainers'."""

from __future__ import annotations

import json
from typing import Any

from runs.models import Run

from dapo.runconfig import ConfigError, RunConfig, config_diff, flatten


def diff_rows(runs: list[Run]) -> list[dict[str, Any]]:
    """The config keys whose values differ between the runs, each with every run's value as text. An
    external run's config is TRL's or verl's own: its keys show as ``trl: key`` beside ours (null where a
    run has no such key)."""
    try:
        if any(run.is_external for run in runs):
            raise ConfigError({"config": "an external run's config is its trainer's own"})
        diff = config_diff([RunConfig.from_dict(run.config) for run in runs])
    except ConfigError:  # a config stored by an older version, or another trainer's: compare as stored
        flats = [
            {f"{r.source}: {k}" if r.source else k: v for k, v in flatten(r.config).items()} for r in runs
        ]
        keys = sorted(set().union(*flats))
        diff = {k: [f.get(k) for f in flats] for k in keys if len({json.dumps(f.get(k)) for f in flats}) > 1}
    return [
        {"key": key, "cells": [{"text": _text(v), "same": _text(v) == _text(values[0])} for v in values]}
        for key, values in diff.items()
    ]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
