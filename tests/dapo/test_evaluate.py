"""python -m dapo.eval.evaluate: metrics.json and samples.jsonl that agree, per-file sources, a run's
checkpoint evaluated like the same weights as a model folder, and bad arguments refused with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from dapo.data.problems import load_problems, write_parquet
from dapo.eval.evaluate import evaluate, evaluation_config, main
from dapo.loop.report import RunInfo, Sink, StepReport


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dapo.eval.evaluate", *args], capture_output=True, text=True, timeout=300
    )


def read_samples(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_cli_writes_metrics_per_file_that_match_its_samples(tiny_assets, tmp_path):
    second = tmp_path / "more-arith.parquet"
    write_parquet(load_problems(tiny_assets / "train.parquet", limit=2), second)
    out = tmp_path / "eval"
    done = cli(
        "--model",
        str(tiny_assets / "model"),
        "--data",
        str(tiny_assets / "test.parquet"),
        "--data",
        str(second),
        "--n",
        "3",
        "--out",
        str(out),
        "--set",
        "rollout.max_response_length=12",
        "--set",
        "model.device=cpu",
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "metrics.json").read_text())
    samples = read_samples(out / "samples.jsonl")
    assert summary["problems_per_source"] == {"test": 6, "more-arith": 2}
    assert len(samples) == 3 * 8 and {s["split"] for s in samples} == {"val"}
    m = summary["metrics"]
    for source in ("test", "more-arith"):
        acc = [s["acc"] for s in samples if s["source"] == source]
        assert m[f"val/{source}/acc/mean@3"] == pytest.approx(sum(acc) / len(acc))
        assert {
            f"val/{source}/acc/pass@3",
            f"val/{source}/score/maj@3/mean",
            f"val/{source}/acc/best@2/std",
        } <= set(m)
    assert m["val/acc/mean@3"] == pytest.approx(sum(s["acc"] for s in samples) / 24)
    assert json.loads(done.stdout.strip().splitlines()[-1])["val/acc/mean@3"] == m["val/acc/mean@3"]


def test_cli_refuses_bad_arguments_with_exit_2(tiny_assets, tmp_path):
    done = cli(
        "--model",
        str(tiny_assets / "model"),
        "--data",
        str(tiny_assets / "test.parquet"),
        "--n",
        "0",
        "--out",
        str(tmp_path / "x"),
    )
    assert done.returncode == 2 and "validation.n_samples" in done.stderr
    missing = cli("--checkpoint", str(tmp_path / "nope"), "--data", "a.parquet", "--out", str(tmp_path / "y"))
    assert missing.returncode == 2 and "no run directory" in missing.stderr


def test_a_checkpoint_evaluates_like_its_weights_saved_as_a_model(tiny_config, tmp_path):
    """A fake run directory whose checkpoint holds perturbed weights: evaluating it equals evaluating a
    model folder holding those weights, and differs from the base model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_path = Path(tiny_config.model.path)
    model = AutoModelForCausalLM.from_pretrained(base_path)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    trained = tmp_path / "trained"
    model.save_pretrained(trained)
    AutoTokenizer.from_pretrained(base_path).save_pretrained(trained)
    run_dir = tmp_path / "run"
    step = run_dir / "checkpoints" / "step_000003"
    step.mkdir(parents=True)
    torch.save({"model": model.state_dict(), "optimizer": {}}, step / "state.pt")
    (step / "trainer.json").write_text(json.dumps({"step": 3, "config": tiny_config.to_dict()}))

    config = evaluation_config(tiny_config, data=[tiny_config.data.val_path], n=2, max_problems=3)
    from_checkpoint = evaluate(config, checkpoint=step)
    from_folder = evaluate(replace(config, model=replace(config.model, path=str(trained))))
    from_base = evaluate(config)
    texts = [[s.response for s in e.samples] for e in (from_checkpoint, from_folder, from_base)]
    assert texts[0] == texts[1] != texts[2]
    assert from_checkpoint.metrics == from_folder.metrics

    out = tmp_path / "out"
    assert (
        main(
            [
                "--checkpoint",
                str(run_dir),
                "--data",
                tiny_config.data.val_path,
                "--n",
                "2",
                "--max-problems",
                "3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["checkpoint"] == str(step) and summary["metrics"] == pytest.approx(from_checkpoint.metrics)


class Recorder(Sink):
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def on_start(self, info: RunInfo) -> None:
        self.calls.append(("start", info.total_steps))

    def on_step(self, report: StepReport) -> None:
        self.calls.append(("step", report))

    def on_finish(self, status, error=None) -> None:
        self.calls.append(("finish", (status, error)))


def test_an_evaluation_run_reports_one_step_0_to_its_sinks(tiny_config, tmp_path):
    from dapo.eval.evaluate import run

    config = evaluation_config(tiny_config, data=[tiny_config.data.val_path], n=2, max_problems=2)
    sink = Recorder()
    result = run(config, out_dir=tmp_path, sinks=[sink])
    assert result.status == "succeeded" and [c[0] for c in sink.calls] == ["start", "step", "finish"]
    report = sink.calls[1][1]
    assert report.step == 0 and len(report.val_samples) == 4 and report.metrics == result.metrics
    assert (tmp_path / "metrics.json").is_file()
    broken = evaluation_config(tiny_config, data=[str(tmp_path / "missing.parquet")], n=2)
    failed = Recorder()
    assert run(broken, out_dir=tmp_path / "b", sinks=[failed]).status == "failed"
    assert failed.calls[-1][0] == "finish" and failed.calls[-1][1][0] == "failed"
