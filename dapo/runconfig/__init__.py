"""The run configuration: what a run is, checked before anything heavy starts (no torch, no Ray).

Import it from here: ``from dapo.runconfig import RunConfig, ConfigError``. The parts:

    run.py       RunConfig: the sections together, cross-section checks, JSON round trip, overrides, diffs
    sections.py  one frozen dataclass per section (model, data, rollout, algorithm, optim, ...)
    base.py      field errors and checking JSON values against a dataclass's field types
    docs.py      each field's documentation, read from its attribute docstring (--help, the web form, docs)
    presets.py   named configurations: the demo, the paper's run, the ablation ladder
"""

from __future__ import annotations

from dapo.runconfig.docs import describe_fields, field_docs
from dapo.runconfig.run import (
    MAX_INT,
    SECTIONS,
    AlgorithmConfig,
    CheckpointConfig,
    Checks,
    ConfigError,
    DataConfig,
    ExecutionConfig,
    LoggingConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    RunConfig,
    ValidationConfig,
    build_section,
    coerce,
    config_diff,
    error_key,
    flatten,
    is_unicode,
    shown,
)

__all__ = [
    "RunConfig",
    "SECTIONS",
    "ModelConfig",
    "DataConfig",
    "RolloutConfig",
    "AlgorithmConfig",
    "OptimConfig",
    "ValidationConfig",
    "CheckpointConfig",
    "ExecutionConfig",
    "LoggingConfig",
    "MAX_INT",
    "Checks",
    "ConfigError",
    "build_section",
    "coerce",
    "error_key",
    "flatten",
    "is_unicode",
    "shown",
    "config_diff",
    "describe_fields",
    "field_docs",
]
