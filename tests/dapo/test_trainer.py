"""The trainer: a real tiny model, a few steps; learning signal, resume, dynamic sampling, failures."""

import json
import math

import pytest
import torch

from dapo import rewards as reward
from dapo.loop.report import Sink
from dapo.loop.runner import run
from dapo.loop.sinks import JsonlSink, read_jsonl


class LengthParityReward:
    """A test reward with a learning signal for a random model: correct iff the response length is even."""

    def __call__(self, response: str, ground_truth: str) -> reward.MathResult:
        ok = len(response) % 2 == 0
        return reward.MathResult(score=1.0 if ok else -1.0, acc=ok, pred=str(len(response)))


@pytest.fixture
def parity_reward(monkeypatch):
    monkeypatch.setitem(reward.REWARD_FUNCTIONS, "length_parity", LengthParityReward)
    return "length_parity"


class Recorder(Sink):
    def __init__(self, stop_after: int | None = None):
        self.reports, self.checkpoints, self.finished = [], [], None
        self.stop_after = stop_after

    def on_step(self, report):
        self.reports.append(report)

    def on_checkpoint(self, step, path):
        self.checkpoints.append((step, path))

    def on_finish(self, status, error=None):
        self.finished = (status, error)

    def should_stop(self):
        return self.stop_after is not None and len(self.reports) >= self.stop_after


def straight_and_resumed(config, tmp_path, stop_after: int, between=None):
    """The run straight through (in tmp_path/a), and the same run stopped after ``stop_after`` steps then
    resumed from its checkpoint (in tmp_path/b), calling ``between()`` before the resume: the Recorders of
    the straight run and of the resumed part."""
    straight = Recorder()
    assert run(config, out_dir=tmp_path / "a", sinks=[straight]).status == "succeeded"
    first = Recorder(stop_after=stop_after)
    assert run(config, out_dir=tmp_path / "b", sinks=[first, JsonlSink(tmp_path / "b")]).status == "cancelled"
    if between is not None:
        between()
    second = Recorder()
    result = run(config, out_dir=tmp_path / "b", sinks=[second, JsonlSink(tmp_path / "b")], resume=True)
    assert result.status == "succeeded", result.error
    return straight, second


def weights(path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_two_steps_train_the_policy_with_finite_loss(tiny_config, parity_reward, tmp_path, tiny_assets):
    config = tiny_config.with_overrides({"data.reward_fn": parity_reward})
    rec = Recorder()
    result = run(config, out_dir=tmp_path, sinks=[rec])
    assert result.status == "succeeded", result.error
    assert [r.step for r in rec.reports] == [1, 2]
    m = rec.reports[-1].metrics
    for name in ["actor/pg_loss", "actor/entropy", "actor/grad_norm", "actor/ppo_kl", "critic/score/mean"]:
        assert math.isfinite(m[name]), name
    assert m["actor/grad_norm"] > 0
    assert m["train/num_prompts_kept"] >= 1
    # Parameters changed: compare the saved checkpoint with the initial weights.
    state = torch.load(tmp_path / "checkpoints" / "step_000002" / "state.pt", weights_only=True)
    before = weights(tiny_assets / "model")
    changed = [k for k, v in state["model"].items() if k in before and not torch.equal(v, before[k])]
    assert len(changed) > 10


def test_reports_carry_every_sample_with_its_reward_and_group(tiny_config, parity_reward, tmp_path):
    config = tiny_config.with_overrides({"data.reward_fn": parity_reward, "optim.total_steps": 1})
    rec = Recorder()
    run(config, out_dir=tmp_path, sinks=[rec])
    samples = rec.reports[0].samples
    G = config.rollout.n
    assert len(samples) == rec.reports[0].metrics["train/num_prompts_generated"] * G
    for s in samples:
        assert s.reward == s.score + s.overlong_penalty
        assert s.acc == (len(s.response) % 2 == 0)
        assert 1 <= s.length <= config.rollout.max_response_length
        if s.truncated:
            assert s.length == config.rollout.max_response_length
    groups = {}
    for s in samples:
        groups.setdefault(s.group, []).append(s)
    for members in groups.values():
        assert len(members) == G and len({m.problem_index for m in members}) == 1
        if len({m.acc for m in members}) == 1:  # dynamic sampling drops all-same groups
            assert not any(m.kept for m in members)
    kept = [s for s in samples if s.kept]
    assert len(kept) == config.data.train_batch_size * G or rec.reports[0].metrics["train/gen_limit_hit"]
    with_tokens = [s for s in samples if s.tokens is not None]
    assert with_tokens and all(len(s.tokens) == len(s.token_logprobs) == s.length for s in with_tokens)
    assert all(s.token_ratio is not None and len(s.token_ratio) == s.length for s in with_tokens)


def test_a_resumed_run_continues_the_same_curves(tiny_config, parity_reward, tmp_path):
    config = tiny_config.with_overrides({"data.reward_fn": parity_reward, "optim.total_steps": 3})
    straight = Recorder()
    run(config, out_dir=tmp_path / "a", sinks=[straight])
    first = Recorder(stop_after=2)
    assert run(config, out_dir=tmp_path / "b", sinks=[first, JsonlSink(tmp_path / "b")]).status == "cancelled"
    second = Recorder()
    result = run(config, out_dir=tmp_path / "b", sinks=[second, JsonlSink(tmp_path / "b")], resume=True)
    assert result.status == "succeeded" and [r.step for r in second.reports] == [3]
    a, b = straight.reports[2].metrics, second.reports[0].metrics
    for name in ["critic/score/mean", "actor/pg_loss", "actor/entropy", "response_length/mean"]:
        assert a[name] == pytest.approx(b[name], rel=1e-4, abs=1e-6), name
    assert [s.response for s in straight.reports[2].samples] == [
        s.response for s in second.reports[0].samples
    ]
    steps = [row["step"] for row in read_jsonl(tmp_path / "b" / "metrics.jsonl")]
    assert steps == [1, 2, 3]  # no gap, no duplicate


def test_the_round_limit_trains_on_what_it_has_and_warns(tiny_config, tmp_path, caplog):
    # A random model never writes a right answer: every group is all-wrong and gets filtered.
    config = tiny_config.with_overrides({"optim.total_steps": 1, "algorithm.max_num_gen_batches": 2})
    rec = Recorder()
    with caplog.at_level("WARNING"):
        result = run(config, out_dir=tmp_path, sinks=[rec])
    assert result.status == "succeeded"
    m = rec.reports[0].metrics
    assert m["train/num_gen_batches"] == 2 and m["train/gen_limit_hit"] == 1.0
    assert m["train/frac_all_wrong"] == 1.0 and m["train/num_samples_trained"] == 0
    assert "max_num_gen_batches" in caplog.text


def test_validation_logs_mean_and_pass_at_k(tiny_config, tmp_path):
    config = tiny_config.with_overrides(
        {"optim.total_steps": 1, "validation.every_n_steps": 1, "validation.n_samples": 3}
    )
    rec = Recorder()
    run(config, out_dir=tmp_path, sinks=[rec])
    assert [r.step for r in rec.reports] == [0, 1]  # before training, then after step 1
    for r in rec.reports:
        assert {"val/acc/mean@3", "val/acc/pass@3"} <= set(r.metrics)
        assert len(r.val_samples) == 6 * 3 and all(s.split == "val" for s in r.val_samples)


def test_a_missing_model_fails_the_run_with_its_reason(tiny_config, tmp_path):
    rec = Recorder()
    result = run(
        tiny_config.with_overrides({"model.path": str(tmp_path / "nope")}), out_dir=tmp_path, sinks=[rec]
    )
    assert result.status == "failed" and "not a model directory" in result.error
    assert rec.finished == ("failed", result.error)


def test_an_unwritable_run_directory_fails_clearly(tiny_config, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = run(tiny_config, out_dir=blocker / "run", sinks=[])
    assert result.status == "failed" and "not writable" in result.error and str(blocker) in result.error


def test_jsonl_sink_writes_metrics_and_samples(tiny_config, parity_reward, tmp_path):
    config = tiny_config.with_overrides({"data.reward_fn": parity_reward, "optim.total_steps": 1})
    run(config, out_dir=tmp_path, sinks=[JsonlSink(tmp_path)])
    assert read_jsonl(tmp_path / "metrics.jsonl")[0]["step"] == 1
    assert read_jsonl(tmp_path / "samples.jsonl")[0]["split"] == "train"
    events = [e["event"] for e in read_jsonl(tmp_path / "events.jsonl")]
    assert events[0] == "start" and events[-1] == "finish" and "checkpoint" in events
    assert json.loads((tmp_path / "config.json").read_text())["data"]["reward_fn"] == parity_reward


class LosesOwnership(Recorder):
    """A sink whose run is taken over after the first reported step (a controller that lost its lease)."""

    def may_save_checkpoint(self):
        return not self.reports


def test_no_checkpoint_is_written_once_a_sink_refuses(tiny_config, parity_reward, tmp_path):
    config = tiny_config.with_overrides(
        {"data.reward_fn": parity_reward, "optim.total_steps": 3, "checkpoint.every_n_steps": 1}
    )
    rec = LosesOwnership(stop_after=2)
    assert run(config, out_dir=tmp_path, sinks=[rec]).status == "cancelled"
    assert [step for step, _ in rec.checkpoints] == [1]  # not step 2's, nor the one a stop writes
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000001"]
