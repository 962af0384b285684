"""Export to HuggingFace: a checkpoint of a real two-step run becomes a folder transformers loads, with the
checkpoint's weights, the trained model's logits, sharding on request, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from dapo.learner import export
from dapo.learner.modeling import load_policy
from dapo.loop.runner import run
from dapo.loop.sinks import JsonlSink


@pytest.fixture(scope="module")
def trained(tiny_assets, tmp_path_factory):
    """A real run of the tiny model: two steps, a checkpoint after each (module-scoped: it costs seconds)."""
    from dapo.runconfig.presets import tiny_cpu

    config = tiny_cpu().with_overrides(
        {
            "model.path": str(tiny_assets / "model"),
            "data.train_path": str(tiny_assets / "train.parquet"),
            "data.val_path": "",
            "data.train_batch_size": 2,
            "data.gen_batch_size": 2,
            "rollout.n": 2,
            "rollout.max_response_length": 8,
            "algorithm.overlong_buffer_len": 4,
            "algorithm.dynamic_sampling": False,
            "optim.mini_batch_size": 2,
            "optim.total_steps": 2,
            "optim.warmup_steps": 0,
            "optim.lr": 1e-2,
            "validation.every_n_steps": 0,
            "checkpoint.every_n_steps": 1,
            "checkpoint.keep_last": 0,
            "execution.torch_threads": 1,
        }
    )
    run_dir = tmp_path_factory.mktemp("run")
    result = run(config, out_dir=run_dir, sinks=[JsonlSink(run_dir)])
    assert result.status == "succeeded", result.error
    return run_dir, config


def checkpoint_weights(run_dir, step):
    state = torch.load(run_dir / "checkpoints" / f"step_{step:06d}" / "state.pt", weights_only=True)
    return state["model"]


def test_the_export_loads_with_the_checkpoints_weights_and_the_trained_logits(trained, tmp_path):
    run_dir, config = trained
    out = tmp_path / "exported"
    result = export.export(run_dir, out)  # the newest checkpoint
    assert result.step == 2
    names = set(result.files)
    assert {"config.json", "generation_config.json", "model.safetensors", "dapo_export.json"} <= names
    assert "tokenizer.json" in names and "tokenizer_config.json" in names
    provenance = json.loads((out / "dapo_export.json").read_text())
    assert provenance["step"] == 2 and provenance["run_dir"] == str(run_dir.resolve())
    assert provenance["source_model"] == str(Path(config.model.path).resolve())

    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    saved = checkpoint_weights(run_dir, 2)
    loaded = model.state_dict()
    assert set(saved) == set(loaded)
    for name, tensor in saved.items():
        assert torch.equal(loaded[name], tensor), name
    assert provenance["parameters"] == sum(p.numel() for p in model.parameters())

    # The trained model: the base model with the checkpoint loaded the way a resume loads it.
    reference, ref_tokenizer = load_policy(config.model, torch.device("cpu"))
    base_logits_input = torch.tensor([tokenizer.encode("12+34=")])
    with torch.no_grad():
        before = reference(base_logits_input).logits
        reference.load_state_dict(saved)
        want = reference(base_logits_input).logits
        got = model(base_logits_input).logits
    assert ref_tokenizer.encode("12+34=") == tokenizer.encode("12+34=")
    assert not torch.allclose(before, want)  # training moved the weights: the check below can fail
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_an_older_step_and_a_tiny_shard_size_give_an_index_and_several_shards(trained, tmp_path):
    run_dir, _ = trained
    out = tmp_path / "sharded"
    result = export.export(run_dir, out, step=1, max_shard_size="100KB")
    shards = sorted(p.name for p in out.glob("model-*.safetensors"))
    assert result.step == 1 and len(shards) >= 3, shards
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards)
    loaded = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).state_dict()
    saved = checkpoint_weights(run_dir, 1)
    assert all(torch.equal(loaded[k], v) for k, v in saved.items())
    assert not all(torch.equal(v, checkpoint_weights(run_dir, 2)[k]) for k, v in saved.items())


def test_the_command_line_exports_and_reports_bad_requests(trained, tmp_path, capsys):
    run_dir, _ = trained
    assert export.main([str(run_dir), "--step", "1", "--out", str(tmp_path / "cli")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["step"] == 1 and "model.safetensors" in printed["files"]

    assert export.main([str(run_dir), "--step", "7", "--out", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "no checkpoint of step 7" in err and "steps on disk: 1, 2" in err
    assert not (tmp_path / "none").exists()

    assert export.main([str(run_dir), "--out", str(tmp_path / "cli")]) == 2  # not empty now
    assert "exists and is not empty" in capsys.readouterr().err


def test_errors_name_what_is_missing(trained, tmp_path):
    run_dir, _ = trained
    empty_run = tmp_path / "empty-run"
    empty_run.mkdir()
    with pytest.raises(export.ExportError, match="has no checkpoint"):
        export.export(empty_run, tmp_path / "a")
    with pytest.raises(export.ExportError, match="no run directory"):
        export.export(tmp_path / "missing", tmp_path / "b")
    (tmp_path / "empty-out").mkdir()  # an existing EMPTY folder is fine to write into
    assert export.export(run_dir, tmp_path / "empty-out", step=2).step == 2
    with pytest.raises(export.ExportError, match="base model folder .* has no config.json"):
        export.export(run_dir, tmp_path / "c", model_path=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty-out", "empty-run"]  # no leftovers
