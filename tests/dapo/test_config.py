"""dapo.runconfig: validation with field names, JSON round trip, overrides, docs; presets."""

import json
import subprocess
import sys

import pytest

from dapo.runconfig import (
    AlgorithmConfig,
    ConfigError,
    RunConfig,
    config_diff,
)
from dapo.runconfig.docs import describe_fields, field_docs
from dapo.runconfig.presets import (
    ABLATION_LADDER,
    PRESETS,
    ablation_ladder,
    get_preset,
    paper_qwen32b,
    tiny_cpu,
)


def errors_of(data) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict(data)
    return info.value.errors


def test_it_rejects_eps_high_below_eps_low():
    errors = errors_of({"algorithm": {"clip_low": 0.3, "clip_high": 0.2}})
    assert "algorithm.clip_high" in errors
    assert "0.3" in errors["algorithm.clip_high"]


def test_it_names_every_bad_field_at_once():
    errors = errors_of({"optim": {"lr": "fast", "epochs": 0}, "rollout": {"n": True}, "bogus": 1})
    # epochs=0 breaks a range check of the section, reported beside the type errors of its other fields
    assert set(errors) == {"optim.lr", "optim.epochs", "rollout.n", "bogus"}
    assert "valid keys" in errors["bogus"]


def test_it_rejects_unknown_fields_inside_a_section():
    errors = errors_of({"algorithm": {"clip_hgih": 0.3}})
    assert "algorithm.clip_hgih" in errors
    assert "clip_high" in errors["algorithm.clip_hgih"]  # the message lists the valid names


@pytest.mark.parametrize(
    "data, field",
    [
        ({"optim": {"total_steps": 10**30}}, "optim.total_steps"),
        ({"optim": {"lr": float("nan")}}, "optim.lr"),
        ({"optim": {"lr": -1e-5}}, "optim.lr"),
        ({"rollout": {"top_p": 0}}, "rollout.top_p"),
        ({"rollout": {"engine": "tgi"}}, "rollout.engine"),
        ({"algorithm": {"loss_agg_mode": "mean"}}, "algorithm.loss_agg_mode"),
        ({"algorithm": {"clip_c": 0.5}}, "algorithm.clip_c"),
        ({"data": {"reward_fn": "bleu"}}, "data.reward_fn"),
        ({"data": {"train_batch_size": 16}, "optim": {"mini_batch_size": 5}}, "optim.mini_batch_size"),
        ({"rollout": {"n": 1}}, "rollout.n"),  # dynamic sampling needs >= 2 samples per prompt
        ({"algorithm": {"overlong_buffer_len": 48}}, "algorithm.overlong_buffer_len"),
        ({"optim": {"betas": [0.9]}}, "optim.betas"),
        ({"seed": -1}, "seed"),
        ({"model": "x"}, "model"),
    ],
)
def test_it_rejects_out_of_range_and_wrong_types(data, field):
    assert field in errors_of(data)


def test_it_rejects_a_non_object():
    assert "config" in errors_of([1, 2])
    with pytest.raises(ConfigError) as info:
        RunConfig.from_json("{not json")
    assert "not valid JSON" in str(info.value)


def test_ints_are_accepted_for_floats_and_null_disables_dual_clip():
    config = RunConfig.from_dict({"optim": {"lr": 1}, "algorithm": {"clip_c": None}})
    assert config.optim.lr == 1.0 and isinstance(config.optim.lr, float)
    assert config.algorithm.clip_c is None


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_round_trips_through_json(name):
    config = get_preset(name)
    assert RunConfig.from_json(config.to_json()) == config


def test_overrides_use_dotted_names_and_are_validated():
    config = tiny_cpu().with_overrides({"optim.lr": 1e-5, "algorithm.clip_c": None})
    assert config.optim.lr == 1e-5 and config.algorithm.clip_c is None
    with pytest.raises(ConfigError) as info:
        tiny_cpu().with_overrides({"optim.lr": 0})
    assert "optim.lr" in info.value.errors


def test_every_field_has_a_docstring_for_the_form_and_help():
    fields = describe_fields()
    assert len(fields) > 50
    missing = [f["name"] for f in fields if not f["help"]]
    assert missing == []
    clip_high = next(f for f in fields if f["name"] == "algorithm.clip_high")
    assert "verl clip_ratio_high" in clip_high["help"] and clip_high["default"] == 0.28
    agg = next(f for f in fields if f["name"] == "algorithm.loss_agg_mode")
    assert agg["type"] == "choice" and "seq-mean-token-sum-norm" in agg["choices"]
    assert field_docs(AlgorithmConfig)["clip_low"].startswith("ε_low")


def test_the_paper_preset_follows_the_reference():
    c = paper_qwen32b()
    assert (c.algorithm.clip_low, c.algorithm.clip_high, c.algorithm.clip_c) == (0.2, 0.28, 10.0)
    assert (c.data.train_batch_size, c.data.gen_batch_size, c.rollout.n) == (512, 1536, 16)
    assert c.data.train_batch_size // c.optim.mini_batch_size == 16  # 16 optimiser steps per rollout step
    assert c.rollout.max_response_length == 20480 and c.algorithm.overlong_buffer_len == 4096
    assert c.optim.lr == 1e-6 and c.algorithm.max_num_gen_batches == 10
    assert (c.validation.n_samples, c.validation.top_p) == (32, 0.7)


def test_the_ablation_ladder_adds_one_technique_per_rung():
    rungs = ablation_ladder(tiny_cpu())
    assert [name for name, _ in rungs] == [name for name, _, _ in ABLATION_LADDER]
    first, last = rungs[0][1].algorithm, rungs[-1][1].algorithm
    assert first.clip_high == first.clip_low == 0.2 and not first.dynamic_sampling
    assert first.loss_agg_mode == "seq-mean-token-mean" and not first.overlong_buffer
    assert last.clip_high == 0.28 and last.dynamic_sampling and last.loss_agg_mode == "token-mean"
    for (_, before), (_, after) in zip(rungs, rungs[1:], strict=False):
        assert len(config_diff([before, after])) == 1  # each rung changes exactly one knob


def test_importing_the_config_does_not_import_torch():
    code = "import sys, dapo.runconfig, dapo.runconfig.presets; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_config_json_is_plain_json():
    assert json.loads(tiny_cpu().to_json())["optim"]["betas"] == [0.9, 0.999]
