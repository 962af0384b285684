"""The section "Your first run" (the README's quick start and the tour, docs/tour.md) states what the
tiny_cpu preset does, checked against the preset and against the benchmark's recorded curves
(bench/results/learn.json, written by bench/learn.py)."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from dapo.runconfig.presets import get_preset

ROOT = Path(__file__).resolve().parents[1]


# Both pages say it: the README in short, the tour in full.
PAGES = ["README.md", "docs/tour.md"]


def _first_run_section(page: str) -> str:
    """The text under the heading "Your first run" (any level) up to the next heading."""
    text = (ROOT / page).read_text(encoding="utf-8")
    found = re.search(r"^#+ Your first run\n(.*?)(?=^#)", text + "\n#", re.M | re.S)
    assert found, f"{page} has no section 'Your first run'"
    return found[1]


@pytest.mark.parametrize("page", PAGES)
def test_the_first_run_section_states_the_presets_length_and_its_measured_end(page: str):
    section = " ".join(_first_run_section(page).split())
    steps = get_preset("tiny_cpu").optim.total_steps
    assert f"The preset runs {steps} steps" in section
    curves = json.loads((ROOT / "bench" / "results" / "learn.json").read_text())["runs"]["tiny_cpu"]
    at_end = [{step: (t, acc) for step, t, acc in run["curve"]}[steps] for run in curves.values()]
    mean = statistics.mean(acc for _, acc in at_end)
    times = sorted(t for t, _ in at_end)
    pattern = r"([\d.]+)% at step (\d+) \(mean of (\d+) seeds\), reached after (\d+) to (\d+) s"
    claim = re.search(pattern, section)
    assert claim, section
    assert (float(claim[1]), int(claim[2]), int(claim[3])) == (round(100 * mean, 1), steps, len(at_end))
    assert (int(claim[4]), int(claim[5])) == (int(times[0]), int(times[-1]))
    assert "within 10 minutes" not in section  # the 85% needs more steps than the preset runs
