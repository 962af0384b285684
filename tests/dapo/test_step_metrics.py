"""Step metrics under verl's names (hand-computed values), the LR schedule, which field each
filter_metric reads, overlong filtering's loss mask, and the verl_dapo_32b preset."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from dapo.algo.loss import policy_loss
from dapo.data.problems import Problem
from dapo.loop.batching import Rollout, build_update_batch, old_policy_entropy, step_metrics
from dapo.loop.timing import Timer
from dapo.loop.trainer import FILTER_FIELD, Trainer, filter_groups, num_gpus
from dapo.runconfig.presets import get_preset, tiny_cpu


def rollout(
    *, length=2, adv=0.0, acc=False, score=-1.0, penalty=0.0, truncated=False, entropy=None, prompt=3
) -> Rollout:
    return Rollout(
        step=1,
        group=0,
        sample_index=0,
        problem=Problem(0, [{"role": "user", "content": "q"}], "1"),
        prompt_ids=[5] * prompt,
        response_ids=[7] * length,
        sampling_logprobs=[-1.0] * length,
        truncated=truncated,
        response="r",
        pred="1",
        score=score,
        acc=acc,
        overlong_penalty=penalty,
        reward=score + penalty,
        advantage=adv,
        old_logprobs=[-1.0] * length,
        entropy=entropy,
    )


# ---- verl-named step metrics -----------------------------------------------------------------


def test_advantages_are_token_weighted_and_ours_per_sequence():
    batch = [rollout(length=1, adv=1.0), rollout(length=3, adv=-1.0)]
    m = step_metrics(batch, batch, tiny_cpu())
    assert m["critic/advantages/mean"] == pytest.approx(-0.5)  # (1·1 − 1·3) / 4 tokens
    assert (m["critic/advantages/max"], m["critic/advantages/min"]) == (1.0, -1.0)
    assert m["critic/seq_advantages/mean"] == 0.0  # (1 − 1) / 2 sequences


def test_score_and_rewards_include_the_overlong_penalty_as_in_verls_dapo():
    batch = [rollout(score=1.0, penalty=-0.5), rollout(score=-1.0)]
    m = step_metrics(batch, batch, tiny_cpu())
    assert m["critic/score/mean"] == m["critic/rewards/mean"] == pytest.approx(-0.25)


@pytest.mark.parametrize(
    ("mode", "want"),
    [
        ("token-mean", 7 / 4),  # (1 + 2 + 2 + 2) / 4 tokens
        ("seq-mean-token-mean", (1 + 2) / 2),
        ("seq-mean-token-sum", (1 + 6) / 2),
        ("seq-mean-token-sum-norm", 7 / (2 * 48)),  # max_response_length 48
    ],
)
def test_entropy_is_the_old_policys_aggregated_by_the_loss_mode(mode, want):
    config = tiny_cpu().with_overrides({"algorithm.loss_agg_mode": mode})
    batch = [rollout(length=1, entropy=[1.0]), rollout(length=3, entropy=[2.0, 2.0, 2.0])]
    assert old_policy_entropy(batch, config) == pytest.approx(want)
    assert step_metrics(batch, batch, config)["actor/entropy"] == pytest.approx(want)
    assert old_policy_entropy([rollout()], config) is None  # before the old log-probs


def test_step_time_is_verls_whole_step_and_ours_leaves_out_validation_and_checkpoints():
    config = get_preset("paper_qwen32b")
    trainer = Trainer(config, "/nonexistent")
    trainer.backend = SimpleNamespace(memory_stats=lambda: {})
    timer = Timer()
    timer.totals.update({"step": 10.0, "gen": 4.0, "testing": 3.0, "save_checkpoint": 2.0})
    batch = [rollout(length=7, prompt=3)] * 64  # 640 tokens
    m = trainer._timing(timer, batch)
    assert (m["timing_s/step"], m["perf/time_per_step"], m["timing_s/step_train"]) == (10.0, 10.0, 5.0)
    assert num_gpus(config) == 128  # 128 learners colocated with 32 rollout workers, 1 GPU each
    assert m["perf/throughput"] == pytest.approx(640 / 10 / 128)  # tokens per second per GPU
    assert m["perf/throughput_train"] == pytest.approx(640 / 5 / 128)
    assert num_gpus(tiny_cpu()) == 1
    split = config.with_overrides({"execution.colocate": False, "execution.gpus_per_worker": 0.5})
    assert num_gpus(split) == 80  # (128 + 32) × 0.5


# ---- the learning-rate schedule ----------------------------------------------------------------


def lr_at(steps, **optim):
    config = tiny_cpu().with_overrides({f"optim.{k}": v for k, v in optim.items()})
    trainer = Trainer(config, "/nonexistent")
    return [trainer._lr(s) for s in steps]


def test_lr_warms_up_linearly_then_stays_constant():
    got = lr_at([1, 2, 4, 5, 14], lr=1e-3, warmup_steps=4, total_steps=14)
    assert got == pytest.approx([2.5e-4, 5e-4, 1e-3, 1e-3, 1e-3])


def test_lr_cosine_decays_to_a_tenth_after_warm_up():
    got = lr_at([4, 9, 14], lr=1e-3, warmup_steps=4, total_steps=14, lr_schedule="cosine")
    # progress (s − 4) / 10: 0 -> 1e-3 (end of warm-up); 0.5 -> 0.1 + 0.9·0.5·(1 + cos π/2) = 0.55;
    # 1 -> 0.1
    assert got == pytest.approx([1e-3, 5.5e-4, 1e-4])
    assert lr_at([1], lr=1e-3, warmup_steps=0, total_steps=3, lr_schedule="cosine") == pytest.approx(
        [1e-3 * (0.1 + 0.45 * (1 + math.cos(math.pi / 3)))]
    )


# ---- which field each filter_metric reads --------------------------------------------------------


def test_each_filter_metric_reads_its_own_field():
    """Three groups of two: (a) same acc and score, rewards differ by the overlong penalty; (b) same acc,
    scores differ (a partial-credit reward); (c) acc differs."""
    groups = [
        rollout(acc=False, score=-1.0),
        rollout(acc=False, score=-1.0, penalty=-0.5),
        rollout(acc=True, score=1.0),
        rollout(acc=True, score=0.5),
        rollout(acc=True, score=1.0),
        rollout(acc=False, score=1.0),
    ]
    assert FILTER_FIELD == {"acc": "acc", "score": "score", "seq_reward": "reward"}
    assert filter_groups(groups, "acc", 2) == [False, False, True]
    assert filter_groups(groups, "score", 2) == [False, True, False]
    assert filter_groups(groups, "seq_reward", 2) == [True, True, False]


# ---- overlong filtering ------------------------------------------------------------------------


def test_overlong_filtering_masks_truncated_rows_out_of_the_counts():
    batch = [rollout(length=4), rollout(length=6, truncated=True), rollout(length=2)]
    on = tiny_cpu().with_overrides(
        {
            "algorithm.overlong_filtering": True,
            "rollout.n": 3,
            "optim.mini_batch_size": 1,
            "data.train_batch_size": 1,
        }
    )
    off = on.with_overrides({"algorithm.overlong_filtering": False})
    masked, plain = (build_update_batch(batch, c, token_rows=0) for c in (on, off))
    assert masked.loss_mask == [True, False, True] and plain.loss_mask == [True, True, True]
    assert (masked.minibatch_tokens, masked.minibatch_seqs) == ({0: 6}, {0: 2})
    assert (plain.minibatch_tokens, plain.minibatch_seqs) == ({0: 12}, {0: 3})


@pytest.mark.parametrize(
    "mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
)
def test_a_masked_row_contributes_nothing_to_the_loss_or_the_gradient(mode):
    torch.manual_seed(0)
    logp = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)  # (B, T)
    old = logp.detach() + 0.1 * torch.randn(3, 5, dtype=torch.float64)
    adv = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    mask = torch.ones(3, 5, dtype=torch.float64)
    mask[1] = 0.0  # the truncated row, filtered
    kw = dict(clip_low=0.2, clip_high=0.28, agg=mode, max_len=5)
    loss, _ = policy_loss(logp, old, adv, mask, num_tokens=10, num_seqs=2, **kw)
    loss.backward()
    assert torch.all(logp.grad[1] == 0.0)
    # the same loss and gradient as the batch without the row
    kept = logp.detach()[[0, 2]].clone().requires_grad_(True)
    want, _ = policy_loss(kept, old[[0, 2]], adv[[0, 2]], mask[[0, 2]], **kw)
    want.backward()
    assert loss.item() == pytest.approx(want.item(), rel=1e-12)
    torch.testing.assert_close(logp.grad[[0, 2]], kept.grad)


# ---- the verl preset ---------------------------------------------------------------------------


def test_verl_dapo_32b_is_the_paper_run_as_verls_script_sets_it():
    paper, verl = get_preset("paper_qwen32b"), get_preset("verl_dapo_32b")
    assert paper.algorithm.overlong_filtering and not verl.algorithm.overlong_filtering
    diff = {k for k, v in verl.flat().items() if paper.flat()[k] != v}
    assert diff == {
        "model.gradient_checkpointing",
        "algorithm.overlong_filtering",
        "optim.warmup_steps",
        "optim.micro_batch_max_tokens",
        "validation.n_samples",
        "checkpoint.every_n_steps",
    }
    assert (verl.optim.warmup_steps, verl.validation.n_samples, verl.validation.top_p) == (10, 1, 0.7)
    assert verl.optim.micro_batch_max_tokens == 2048 + 20480
    a = verl.algorithm
    assert (a.clip_low, a.clip_high, a.clip_c, a.loss_agg_mode, a.filter_metric) == (
        0.2,
        0.28,
        10.0,
        "token-mean",
        "acc",
    )
    assert (a.overlong_buffer, a.overlong_buffer_len, a.overlong_penalty_factor) == (True, 4096, 1.0)
    assert (verl.data.train_batch_size, verl.data.gen_batch_size, verl.rollout.n) == (512, 1536, 16)
