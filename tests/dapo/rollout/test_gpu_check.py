"""bench/gpu_check.sh's dry run (--cpu): every step of the GPU check runs on CPU with tiny models and the
hf engine in vLLM's place, so the script cannot rot between the rare sessions that have a GPU. Steps 2
(the conformance tests: the suite runs them itself) and 4 (Ray with the hf engine: step 6 starts Ray too,
with an FSDP learner) are left out to keep it short."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_dry_run_of_the_gpu_check_passes_its_steps(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "OUT_DIR": str(tmp_path), "STEPS": "1 3 5 6"}
    done = subprocess.run(
        ["bash", "bench/gpu_check.sh", "--cpu"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=880,
    )
    summary = done.stdout.rsplit("== summary", 1)[-1].splitlines()[1:]
    assert done.returncode == 0, "\n".join(summary) + done.stderr[-2000:]
    assert [line.split()[0] for line in summary] == ["ok", "skip", "ok", "skip", "ok", "ok"], summary
    results = [
        json.loads(line[len("RESULT ") :]) for line in done.stdout.splitlines() if line.startswith("RESULT ")
    ]
    by_step = {r.get("step", r.get("backend")): r for r in results}
    assert by_step["local"]["rollout_tok_s"] > 0 and by_step["local"]["train_tok_s"] > 0
    assert by_step["engines"]["engine"] == "hf" and by_step["engines"]["tokens"] > 0
    sync = by_step["weight_sync"]
    assert sync["logprob_gap_after"] < 0.5 * sync["logprob_gap_before"]
    real = by_step["real"]
    assert real["parameters"] == 336_192 and real["rollout_tok_s"] > 0 and real["learner_mfu"] is None
