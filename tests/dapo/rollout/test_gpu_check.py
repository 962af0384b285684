"""bench/gpu_check.sh's parts on CPU with tiny models and the hf engine in vLLM's place, so the script cannot
rot between the rare sessions that have a GPU: the shell driver (steps chosen, time limits, the summary), then
each Python step in this process. The whole dry run (`bench/gpu_check.sh --cpu`, a few minutes) is a
benchmark: bench/README.md. Step 2 (the conformance tests) is the suite's own; step 4 (Ray with the hf
engine) is what step 6 does with an FSDP learner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """bench/ on sys.path (its scripts import each other by bare name) and DAPO_VAR_DIR in tmp_path."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    monkeypatch.setenv("DAPO_VAR_DIR", str(tmp_path / "var"))
    yield tmp_path


def results(text: str) -> list[dict]:
    return [json.loads(line[len("RESULT ") :]) for line in text.splitlines() if line.startswith("RESULT ")]


def test_the_driver_runs_the_chosen_steps_and_summarises_each(tmp_path: Path) -> None:
    """STEPS picks the steps; each gets a line in the summary, and a failing step says why in one line."""
    env = {**os.environ, "PYTHON": sys.executable, "OUT_DIR": str(tmp_path), "STEPS": "1 3"}
    env["PATH"] = f"{tmp_path / 'bin'}:{env['PATH']}"
    (tmp_path / "bin").mkdir()
    # step 3 runs through a python that fails the way a step does: "FAIL <step>: <reason>" on stderr
    fake = tmp_path / "bin" / "fake-python"
    fails = 'if [ "$2" = steps ]; then echo "FAIL steps: no room" >&2; exit 1; fi'
    fake.write_text(f'#!/bin/sh\n{fails}\nexec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    env["PYTHON"] = str(fake)
    done = subprocess.run(
        ["bash", "bench/gpu_check.sh", "--cpu"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    summary = done.stdout.rsplit("== summary", 1)[-1].splitlines()[1:]
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert [line.split()[0] for line in summary] == ["ok", "skip", "FAIL", "skip", "skip", "skip"], summary
    assert summary[2] == "FAIL  3 DAPO steps, one process: FAIL steps: no room", summary
    assert (tmp_path / "step-1.log").is_file() and "torch" in (tmp_path / "step-1.log").read_text()


def test_the_environment_step_names_the_versions_and_asks_a_gpu_only_on_a_gpu(
    bench: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gpu_check

    gpu_check.env("cpu")
    out = capsys.readouterr().out
    assert "torch 2.13.0" in out and "transformers:" in out and "ray:" in out
    if not __import__("torch").cuda.is_available():
        with pytest.raises(SystemExit, match="FAIL env: no CUDA device"):
            gpu_check.env("gpu")


def test_the_steps_step_trains_and_reports_throughputs(
    bench: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gpu_check

    gpu_check.steps("cpu", bench, "local")
    (row,) = results(capsys.readouterr().out)
    assert row["backend"] == "local" and row["samples_per_step"] == 8
    assert row["rollout_tok_s"] > 0 and row["train_tok_s"] > 0 and row["logprob_tok_s"] > 0


def test_the_engines_step_closes_the_log_prob_gap_by_a_weight_sync(
    bench: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gpu_engines

    gpu_engines.engines("cpu", bench)
    by_step = {r.get("step"): r for r in results(capsys.readouterr().out)}
    assert by_step["engines"]["engine"] == "hf" and by_step["engines"]["tokens"] > 0
    sync = by_step["weight_sync"]
    assert sync["logprob_gap_after"] < 0.5 * sync["logprob_gap_before"]


@pytest.mark.ray  # the local Ray of this session's cluster tests (tests/conftest.py)
def test_the_real_step_trains_with_an_fsdp_learner_on_ray(
    bench: Path, ray_session: object, capsys: pytest.CaptureFixture[str]
) -> None:
    import gpu_check

    gpu_check.real("cpu", bench)
    (real,) = results(capsys.readouterr().out)
    assert real["step"] == "real" and real["parameters"] == 336_192
    assert real["rollout_tok_s"] > 0 and real["learner_mfu"] is None
