"""The ablation ladder on the demo task with its demo setting: every rung trains differently from the one
before it (the paper's Table 1 only means something if each technique acts), in two steps of the demo
model per rung. Without the setting, responses never reach the 48-token limit and the overlong rungs
train exactly as the rungs before them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dapo.loop.report import Sink, StepReport
from dapo.runconfig.presets import ABLATION_LADDER, DEMO_LADDER_SETTING, ablation_ladder, tiny_cpu

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "assets" / "demo"
STEPS = 2
COMPARED = (
    "actor/pg_loss",
    "actor/ppo_kl",
    "actor/pg_clipfrac",
    "critic/score/mean",
    "critic/advantages/mean",
    "response_length/mean",
)
"""Step metrics that follow from the samples and the update (timings differ on every run)."""

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


class Metrics(Sink):
    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []

    def on_step(self, report: StepReport) -> None:
        self.steps.append(dict(report.metrics))


@pytest.fixture(scope="module")
def ladder(tmp_path_factory: Any) -> dict[str, list[dict[str, float]]]:
    """Each rung's step metrics: the demo model and data, the demo setting, two steps, one seed."""
    if not (DEMO / "model" / "model.safetensors").is_file():
        pytest.skip("the demo model is not built (python -m dapo.data.demo --out assets/demo)")
    from dapo.loop.runner import run

    base = tiny_cpu().with_overrides(
        {
            "model.path": str(DEMO / "model"),
            "data.train_path": str(DEMO / "data" / "train.parquet"),
            "data.val_path": str(DEMO / "data" / "test.parquet"),
            "validation.every_n_steps": 0,
            "checkpoint.every_n_steps": 0,
            "execution.torch_threads": 1,
        }
    )
    out = tmp_path_factory.mktemp("ladder")
    metrics = {}
    for name, config in ablation_ladder(base, demo_setting=True, steps=STEPS):
        sink = Metrics()
        result = run(config, out_dir=out / name, sinks=[sink])
        assert result.status == "succeeded", result
        metrics[name] = sink.steps
    return metrics


def test_the_demo_setting_only_shortens_responses_and_the_mini_batches():
    plain, demo = ablation_ladder(), ablation_ladder(demo_setting=True, steps=7)
    for (_, a), (_, b) in zip(plain, demo, strict=True):
        assert b.rollout.max_response_length == 27 and b.algorithm.overlong_buffer_len == 4
        assert b.optim.mini_batch_size == 1 and b.optim.total_steps == 7
        a_dict, b_dict = a.to_dict(), b.to_dict()
        for key in [*DEMO_LADDER_SETTING, "optim.total_steps"]:
            section, name = key.split(".")
            b_dict[section][name] = a_dict[section][name]
        assert b_dict == a_dict  # nothing else changed


def test_the_limit_bites_on_the_demo_task(ladder):
    naive = ladder["naive_grpo"][0]
    assert naive["response_length/clip_ratio"] > 0.05  # some responses reach the 27-token limit
    filtering = ladder["grpo_overlong_filtering"][0]
    assert filtering["train/discarded_samples/overlong"] > 0  # and overlong filtering drops them
    soft = ladder["grpo_soft_overlong"][0]
    assert soft["train/overlong_penalty/mean"] < 0  # and the soft punishment reaches some


@pytest.mark.parametrize("index", range(1, len(ABLATION_LADDER)))
def test_each_rung_trains_differently_from_the_one_before(ladder, index):
    before, rung = ABLATION_LADDER[index - 1][0], ABLATION_LADDER[index][0]
    assert len(ladder[rung]) == len(ladder[before]) == STEPS

    def seen(name: str) -> list[tuple[float | None, ...]]:
        return [tuple(step.get(k) for k in COMPARED) for step in ladder[name]]

    assert seen(rung) != seen(before), f"{rung} trained exactly as {before}"
