"""A vLLM engine beside a learner sleeps between rollouts, so the update gets the GPU memory it held."""

from __future__ import annotations

from typing import Any

import pytest

import dapo.learner.actor as actor_module
from dapo.rollout.base import Completion, RolloutEngine, SamplingParams
from dapo.runconfig.presets import get_preset


class RecordingEngine(RolloutEngine):
    name = "recording"

    def __init__(self, calls: list[str], **options: Any) -> None:
        self.calls, self.options = calls, options

    def generate(self, prompts, params):
        self.calls.append("generate")
        return [Completion([2], [-0.1], "eos") for _ in prompts for _ in range(params.n)]

    def update_weights(self, weights) -> None:
        self.calls.append("update_weights")

    def sleep(self) -> None:
        self.calls.append("sleep")


@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch) -> list[RecordingEngine]:
    built: list[RecordingEngine] = []

    def create(name: str, **options: Any) -> RecordingEngine:
        built.append(RecordingEngine([], **options))
        return built[-1]

    monkeypatch.setattr(actor_module, "create_engine", create)
    return built


@pytest.mark.parametrize(
    ("engine", "learner", "sleeps"),
    [("vllm", True, True), ("hf", True, False), ("vllm", False, False)],
    ids=["vllm-beside-a-learner", "hf-shares-the-model", "vllm-rollout-worker-alone"],
)
def test_vllm_beside_a_learner_sleeps_after_each_generate(engines, engine, learner, sleeps):
    config = get_preset("tiny_cpu").with_overrides({"rollout.engine": engine, "model.device": "cpu"})
    actor = actor_module.PolicyActor(config, learner=learner)
    (built,) = engines
    assert built.options.get("enable_sleep_mode", False) is (sleeps and engine == "vllm")
    out = actor.generate([[5, 6, 7]], SamplingParams(n=2, max_new_tokens=4))
    assert len(out) == 2
    assert built.calls == (["generate", "sleep"] if sleeps else ["generate"])
