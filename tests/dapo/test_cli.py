"""python -m dapo.train in a subprocess: trains, writes its files, and rejects bad configs clearly."""

import json
import subprocess
import sys

from dapo.loop.sinks import read_jsonl


def train(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dapo.train", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_cli_trains_from_a_config_file(tiny_config, tmp_path):
    cfg = tmp_path / "run.json"
    cfg.write_text(tiny_config.with_overrides({"optim.total_steps": 1}).to_json())
    out = tmp_path / "run"
    proc = train("--config", str(cfg), "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["status"] == "succeeded"
    assert [row["step"] for row in read_jsonl(out / "metrics.jsonl")] == [1]
    assert (out / "checkpoints" / "step_000001" / "state.pt").is_file()


def test_cli_reports_config_errors_with_field_names_and_exit_2(tmp_path):
    proc = train("--preset", "tiny_cpu", "--set", "algorithm.clip_high=0.1", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert "algorithm.clip_high" in proc.stderr and "clip_low" in proc.stderr
    assert not (tmp_path / "metrics.jsonl").exists()


def test_cli_lists_presets_and_describes_fields():
    presets = train("--list-presets")
    assert presets.returncode == 0 and "dapo_full" in presets.stdout and "paper_qwen32b" in presets.stdout
    described = train("--describe")
    assert "algorithm.clip_high" in described.stdout and "verl clip_ratio_high" in described.stdout


def test_the_checked_in_config_reference_is_current():
    from pathlib import Path

    from dapo.train import markdown_reference

    doc = Path(__file__).resolve().parents[2] / "docs" / "config-reference.md"
    assert doc.read_text(encoding="utf-8") == markdown_reference(), "run: python -m dapo.train --reference"
