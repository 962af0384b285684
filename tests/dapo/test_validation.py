"""Validation in the trainer: several files each report their own metrics (by file stem), one file
reports by its data_source column, and data.val_path alone keeps working."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dapo.data.problems import load_problems, write_parquet
from dapo.eval.validation import load_labelled
from dapo.loop.trainer import Trainer
from dapo.runconfig import ConfigError


def test_several_validation_files_report_per_file_and_overall(tiny_config, tiny_assets, tmp_path):
    extra = tmp_path / "hard.parquet"
    write_parquet(load_problems(tiny_assets / "train.parquet", limit=3), extra)
    config = tiny_config.with_overrides({"data.val_paths": [str(extra)], "validation.n_samples": 2})
    trainer = Trainer(config, tmp_path / "run")
    trainer._setup()
    try:
        metrics, samples = trainer._validate()
    finally:
        trainer.backend.close()
    assert trainer.val_sources == ["test"] * 6 + ["hard"] * 3
    assert len(samples) == 2 * 9
    for source, rows in (("test", samples[:12]), ("hard", samples[12:])):
        assert metrics[f"val/{source}/acc/mean@2"] == pytest.approx(sum(s.acc for s in rows) / len(rows))
        solved = [any(s.acc for s in rows[i : i + 2]) for i in range(0, len(rows), 2)]
        assert metrics[f"val/{source}/acc/pass@2"] == pytest.approx(sum(solved) / len(solved))
    assert metrics["val/acc/mean@2"] == pytest.approx(sum(s.acc for s in samples) / 18)
    assert metrics["val/response_length/mean"] == pytest.approx(sum(s.length for s in samples) / 18)


def test_labels_by_data_source_for_one_file_and_by_stem_for_several(tmp_path, tiny_assets):
    problems = load_problems(tiny_assets / "test.parquet")
    mixed = [replace(p, data_source="aime" if p.index % 2 else "amc") for p in problems]
    write_parquet(mixed, tmp_path / "mixed.parquet")
    write_parquet(problems[:2], tmp_path / "plain.parquet")
    _, one = load_labelled([str(tmp_path / "mixed.parquet")])
    assert one == ["amc", "aime"] * 3
    _, two = load_labelled([str(tmp_path / "mixed.parquet"), str(tmp_path / "plain.parquet")], limit=4)
    assert two == ["mixed-amc", "mixed-aime", "mixed-amc", "mixed-aime", "plain", "plain"]


def test_val_paths_are_checked_and_val_path_alone_still_works(tiny_config):
    assert tiny_config.data.validation_files == [tiny_config.data.val_path]
    assert tiny_config.with_overrides({"data.val_path": ""}).data.validation_files == []
    with pytest.raises(ConfigError, match="val_paths"):
        tiny_config.with_overrides({"data.val_paths": [tiny_config.data.val_path]})
    with pytest.raises(ConfigError, match="val_paths"):
        tiny_config.with_overrides({"data.val_paths": "one.parquet"})


def test_the_console_shows_acc_mean_and_pass_at_the_largest_n_per_source():
    from dapo.loop.sinks import headline_validation

    metrics = {
        "val/acc/mean@4": 0.5,
        "val/acc/pass@4": 0.75,
        "val/acc/pass@2": 0.6,
        "val/acc/maj@4/mean": 0.5,
        "val/aime/acc/mean@4": 0.25,
        "val/aime/acc/pass@4": 0.5,
        "val/aime/score/mean@4": -0.5,
        "critic/score/mean": 0.1,
    }
    assert headline_validation(metrics) == {
        "val/acc/mean@4": 0.5,
        "val/acc/pass@4": 0.75,
        "val/aime/acc/mean@4": 0.25,
        "val/aime/acc/pass@4": 0.5,
    }
    assert headline_validation({"critic/score/mean": 0.1}) == {}
