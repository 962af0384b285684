"""The names users and scripts import keep working whatever moves inside the package: each public module
imports with its documented entry points, and each command answers --help."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PUBLIC = {
    "dapo.loss": ["policy_loss", "aggregate", "POLICY_LOSSES"],
    "dapo.advantage": ["group_advantages", "ADVANTAGE_ESTIMATORS"],
    "dapo.sampling": ["keep_groups", "GroupBatchFiller", "DISCARD_REASONS"],
    "dapo.explain": ["token_terms", "token_weight", "explain_sample", "RULES"],
    "dapo.reward": ["get_reward_fn", "REWARD_FUNCTIONS", "RewardResult"],
    "dapo.modeling": ["response_logprobs"],
    "dapo.presets": ["PRESETS"],
    "dapo.runner": ["run"],
    "dapo.report": ["StepReport"],
    "dapo.config": ["RunConfig", "ConfigError", "DataConfig", "SECTIONS", "flatten", "config_diff"],
}


@pytest.mark.parametrize(("module", "names"), sorted(PUBLIC.items()))
def test_each_public_module_imports_by_name(module, names):
    loaded = importlib.import_module(module)
    for name in names:
        assert hasattr(loaded, name), f"{module}.{name}"


@pytest.mark.parametrize("command", ["dapo.train", "dapo.evaluate", "dapo.export"])
def test_each_command_answers_help(command):
    done = subprocess.run(
        [sys.executable, "-m", command, "--help"], cwd=REPO, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def test_dapo_config_still_answers_the_field_documentation():
    import dapo.config
    import dapo.config_docs

    assert dapo.config.describe_fields is dapo.config_docs.describe_fields
    assert dapo.config.field_docs(dapo.config.DataConfig)["train_path"]
