"""A family the engine cannot train fails at launch, with an error naming it, before any model is loaded:
the CLI (exit status 2) and the trainer (a failed run) alike. Every family of the matrix passes."""

from __future__ import annotations

import json

import pytest

from dapo.learner.families import check_family, family_name, sliding_window, untrainable_reason
from dapo.runconfig import ConfigError
from tests.dapo.families.matrix import FAMILIES

UNTRAINABLE = {
    "qwen2 reward model": (
        {"model_type": "qwen2", "architectures": ["Qwen2ForSequenceClassification"]},
        "Qwen2",
    ),
    "t5": ({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"]}, "t5"),
    "llava": ({"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"]}, "llava"),
}


@pytest.mark.parametrize("case", sorted(UNTRAINABLE))
def test_a_model_that_is_not_a_causal_lm_is_refused_naming_its_family(case):
    config_json, name = UNTRAINABLE[case]
    with pytest.raises(ConfigError) as e:
        check_family(config_json)
    message = e.value.errors["model.path"]
    assert name in message and config_json["architectures"][0] in message
    assert "is not a causal language model the engine can train" in message


def test_every_family_of_the_matrix_and_a_gemma3_with_vision_may_launch(family_dirs):
    for family in FAMILIES:
        config_json = json.loads((family_dirs[family.name] / "config.json").read_text())
        assert untrainable_reason(config_json) is None, family.name
    assert (
        untrainable_reason({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"]})
        is None
    )
    assert untrainable_reason({"model_type": "llama"}) is None  # no architectures: the loader will say


def test_the_launch_reading_of_a_config_json_takes_the_loaded_models_decisions(family_dirs):
    """The web process decides from config.json what the learner decides from the loaded config."""
    from transformers import AutoConfig

    for family in FAMILIES:
        folder = family_dirs[family.name]
        config_json = json.loads((folder / "config.json").read_text())
        loaded = AutoConfig.from_pretrained(folder, local_files_only=True)
        assert sliding_window(config_json) == sliding_window(loaded), family.name
        assert family_name(config_json) == family_name(loaded), family.name
    assert sliding_window({"sliding_window": 8, "layer_types": ["full_attention"]}) is None  # Qwen2, off
    assert sliding_window({"sliding_window": 8}) == 8  # Mistral-style: every layer


def test_the_cli_and_the_trainer_refuse_it_before_loading_anything(tmp_path, capsys):
    from dapo.loop.runner import run
    from dapo.loop.sinks import JsonlSink
    from dapo.runconfig.presets import tiny_cpu
    from dapo.train import main

    folder = tmp_path / "reward-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(UNTRAINABLE["qwen2 reward model"][0]))
    assert (
        main(["--preset", "tiny_cpu", "--set", f"model.path={folder}", "--out", str(tmp_path / "run")]) == 2
    )
    err = capsys.readouterr().err
    assert "invalid config:" in err and "model.path: Qwen2/Qwen2.5 (Qwen2ForSequenceClassification)" in err
    config = tiny_cpu().with_overrides({"model.path": str(folder)})
    result = run(config, out_dir=tmp_path / "run2", sinks=[JsonlSink(tmp_path / "run2")])
    assert result.status == "failed" and "Qwen2ForSequenceClassification" in (result.error or "")
