"""Run configuration: frozen dataclasses, validated on construction, JSON round trip.

This module imports no torch (the web process validates configs with it). Each field has one attribute
docstring: it is the single source for the CLI's ``--help``, the web form's help text and the docs
(``dapo.runconfig.docs.field_docs`` reads it). Names that differ from the paper, verl or TRL say so.

Errors are :class:`ConfigError` (a ``ValueError``) carrying ``errors``: a mapping from the dotted field
name (``"algorithm.clip_high"``) to a message, so a form can show each error beside its field.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dapo.runconfig.base import (
    MAX_INT,
    Checks,
    ConfigError,
    build_section,
    coerce,
    error_key,
    flatten,
    is_unicode,
    shown,
)
from dapo.runconfig.sections import (
    SECTIONS,
    AlgorithmConfig,
    CheckpointConfig,
    DataConfig,
    ExecutionConfig,
    LoggingConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    ValidationConfig,
)

__all__ = [  # the public names, re-exported by dapo.runconfig
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
]


@dataclass(frozen=True)
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    seed: int = 0
    """Seed of data order, sampling and initialisation; the same seed reproduces a run."""

    def __post_init__(self) -> None:
        c = Checks()
        c.require(0 <= self.seed < 2**32, "seed", "must be in [0, 2**32)")
        d, o = self.data, self.optim
        c.require(
            d.train_batch_size % o.mini_batch_size == 0,
            "optim.mini_batch_size",
            f"must divide data.train_batch_size ({d.train_batch_size}), got {o.mini_batch_size}",
        )
        longest = d.max_prompt_length + self.rollout.max_response_length
        c.require(
            o.micro_batch_max_tokens == 0 or o.micro_batch_max_tokens >= longest,
            "optim.micro_batch_max_tokens",
            f"must be 0 (off) or at least data.max_prompt_length + rollout.max_response_length ({longest}),"
            f" got {o.micro_batch_max_tokens}",
        )
        c.require(
            not self.algorithm.dynamic_sampling or self.rollout.n >= 2,
            "rollout.n",
            "dynamic sampling needs at least 2 samples per prompt",
        )
        c.require(
            not self.algorithm.overlong_buffer
            or self.algorithm.overlong_buffer_len < self.rollout.max_response_length,
            "algorithm.overlong_buffer_len",
            f"must be below rollout.max_response_length ({self.rollout.max_response_length})",
        )
        e = self.execution
        c.require(
            not self.rollout.one_step_off_policy or e.backend != "ray" or not e.colocate,
            "rollout.one_step_off_policy",
            "needs rollout workers apart from the learners on the ray backend: set execution.colocate off",
        )
        c.require(
            not self.rollout.one_step_off_policy or e.backend == "ray" or self.rollout.engine != "vllm",
            "rollout.one_step_off_policy",
            "on the local backend it needs the hf engine; with vllm use backend 'ray' and colocate off",
        )
        c.done()

    # ---- (de)serialisation -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["optim"]["betas"] = list(self.optim.betas)
        out["data"]["val_paths"] = list(self.data.val_paths)
        return out

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: Any) -> RunConfig:
        """Validate and build: Unknown keys and wrong types are errors; missing keys take defaults."""
        if not isinstance(data, Mapping):
            raise ConfigError({"config": f"must be a JSON object, got {type(data).__name__}"})
        errors: dict[str, str] = {}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key == "seed":
                try:
                    kwargs["seed"] = coerce(value, int, "seed")
                except ConfigError as e:
                    errors.update(e.errors)
            elif key in SECTIONS:
                try:
                    kwargs[key] = build_section(SECTIONS[key], value, key)
                except ConfigError as e:
                    errors.update(e.errors)
            else:
                errors[error_key(key)] = f"unknown key; valid keys: {', '.join([*SECTIONS, 'seed'])}"
        if errors:
            raise ConfigError(errors)
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError({"config": f"not valid JSON: {e}"}) from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def flat(self) -> dict[str, Any]:
        """Dotted-name view: {"algorithm.clip_high": 0.28, ..., "seed": 0}."""
        return flatten(self.to_dict())

    def with_overrides(self, overrides: Mapping[str, Any]) -> RunConfig:
        """A copy with dotted-name overrides applied ({"optim.lr": 1e-5}); validated like from_dict."""
        data = self.to_dict()
        for name, value in overrides.items():
            section, _, key = name.partition(".")
            if not key:
                data[section] = value
            elif isinstance(data.get(section), dict):
                data[section][key] = value
            else:
                raise ConfigError({error_key(name): "unknown field"})
        return RunConfig.from_dict(data)

    def file_paths(self) -> list[tuple[str, str]]:
        """(field, path) of everything on disk the run reads: the model folder, the training file, the
        validation file when one is named, and each further validation file. Whoever checks or resolves
        paths (the web form and the API, the worker before it trains, the dataset record, the Ray actors)
        walks this list, so a new path field is added here once."""
        d = self.data
        return [
            ("model.path", self.model.path),
            ("data.train_path", d.train_path),
            *([("data.val_path", d.val_path)] if d.val_path.strip() else []),
            *(("data.val_paths", p) for p in d.val_paths),
        ]

    def with_file_paths(self, resolve: Callable[[str, str], str]) -> RunConfig:
        """A copy with every path of ``file_paths`` replaced by ``resolve(field, path)``."""
        resolved = [(field, resolve(field, path)) for field, path in self.file_paths()]
        single = {field: path for field, path in resolved if field != "data.val_paths"}
        extra = [path for field, path in resolved if field == "data.val_paths"]
        return self.with_overrides({**single, **({"data.val_paths": extra} if extra else {})})


def config_diff(configs: list[RunConfig]) -> dict[str, list[Any]]:
    """Dotted names whose values differ between configs, with each config's value in order."""
    flats = [c.flat() for c in configs]
    names = sorted(set().union(*flats)) if flats else []
    return {n: [f.get(n) for f in flats] for n in names if len({json.dumps(f.get(n)) for f in flats}) > 1}
