"""Per-sample bookkeeping of a rollout step: rewards, the update batch and the step's metrics.

A ``Rollout`` is one sampled response with everything the step learns about it. The G rollouts of a
prompt are contiguous (the group invariant): group statistics are a view of G consecutive items.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dapo.data.problems import Problem
from dapo.learner.actor import UpdateBatch
from dapo.loop.report import SampleRecord
from dapo.rewards import build_reward, overlong_penalty
from dapo.rollout.base import Completion
from dapo.runconfig import RunConfig


@dataclass
class Rollout:
    step: int
    group: int
    sample_index: int
    problem: Problem
    prompt_ids: list[int]
    response_ids: list[int]
    sampling_logprobs: list[float]
    truncated: bool
    response: str
    pred: str
    score: float
    acc: bool
    overlong_penalty: float
    reward: float
    split: str = "train"
    advantage: float = 0.0
    kept: bool = False
    old_logprobs: list[float] | None = None
    entropy: list[float] | None = None
    token_ratio: list[float] | None = None
    with_tokens: bool = False
    reward_scores: dict[str, float] | None = None
    discard_reason: str = ""
    new_logprobs: list[float] | None = None
    """log π_θ of each token at the sample's first optimiser step (rows with token data only)."""
    update_info: dict[str, Any] | None = None
    """Where the update put the sample: its mini-batch and that mini-batch's counts (trained samples)."""

    def record(self, tokenizer: Any) -> SampleRecord:
        tokens = None
        if self.with_tokens:
            tokens = [tokenizer.decode([i]) for i in self.response_ids]
        return SampleRecord(
            step=self.step,
            split=self.split,  # type: ignore[arg-type]
            group=self.group,
            sample_index=self.sample_index,
            problem_index=self.problem.index,
            prompt=self.problem.prompt_text,
            response=self.response,
            ground_truth=self.problem.ground_truth,
            pred=self.pred,
            score=self.score,
            acc=self.acc,
            overlong_penalty=self.overlong_penalty,
            reward=self.reward,
            advantage=self.advantage,
            length=len(self.response_ids),
            truncated=self.truncated,
            kept=self.kept,
            tokens=tokens,
            token_logprobs=self.sampling_logprobs if self.with_tokens else None,
            token_entropy=self.entropy if self.with_tokens else None,
            token_ratio=self.token_ratio if self.with_tokens else None,
            reward_scores=self.reward_scores,
            discard_reason=self.discard_reason,
            token_old_logprobs=(self.old_logprobs or self.new_logprobs) if self.with_tokens else None,
            token_new_logprobs=self.new_logprobs if self.with_tokens else None,
            update_info=self.update_info,
        )


def make_rollouts(
    scorer: Any,
    tokenizer: Any,
    problems: list[Problem],
    prompts: list[list[int]],
    completions: list[Completion],
    config: RunConfig,
    *,
    step: int,
    first_group: int,
    split: str = "train",
) -> list[Rollout]:
    """Score completions (n per problem, contiguous) and apply the soft overlong punishment (eq. 13).

    ``scorer.score(prompts, responses, ground_truths, data)`` returns one reward result per response
    (in this process or as Ray tasks, by backend), for the rewards ``data`` (a DataConfig) names.
    """
    n = len(completions) // max(len(problems), 1)
    texts = [tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in completions]
    truths = [problems[i // n].ground_truth for i in range(len(completions))]
    prompt_texts = [problems[i // n].prompt_text for i in range(len(completions))]
    results = scorer.score(prompt_texts, texts, truths, config.data)
    a, r = config.algorithm, config.rollout
    out = []
    for i, (comp, text, res) in enumerate(zip(completions, texts, results, strict=True)):
        penalty = 0.0
        if a.overlong_buffer and split == "train":
            penalty = overlong_penalty(
                len(comp.token_ids), r.max_response_length, a.overlong_buffer_len, a.overlong_penalty_factor
            )
        out.append(
            Rollout(
                step=step,
                group=first_group + i // n,
                sample_index=first_group * n + i,
                problem=problems[i // n],
                prompt_ids=list(prompts[i // n]),
                response_ids=list(comp.token_ids),
                sampling_logprobs=list(comp.logprobs),
                truncated=comp.finish_reason == "length",
                response=text,
                pred=res.pred,
                score=float(res.score),
                acc=bool(res.acc),
                overlong_penalty=penalty,
                reward=float(res.score) + penalty,
                split=split,
                reward_scores=res.scores,
            )
        )
    return out


def score_locally(prompts: list[str], responses: list[str], ground_truths: list[str], data: Any) -> list[Any]:
    """Score in this process with the rewards ``data`` (a DataConfig) names: a RewardResult each."""
    return build_reward(data).score_batch(prompts, responses, ground_truths)


def reward_metrics(rollouts: list[Rollout]) -> dict[str, float]:
    """reward/<name>/mean: each reward's own score (before its weight) over the step's samples."""
    scored = [r.reward_scores for r in rollouts if r.reward_scores]
    names = list(scored[0]) if scored else []
    return {f"reward/{n}/mean": sum(s.get(n, 0.0) for s in scored) / len(scored) for n in names}


def build_update_batch(
    batch: list[Rollout],
    config: RunConfig,
    *,
    token_rows: int,
    old_is_current: bool = False,
    return_entropy: bool = False,
) -> UpdateBatch:
    """The update's inputs, with each mini-batch's global token and sequence counts (exact token mean).

    Overlong filtering (paper §3.4) zeroes the loss mask of truncated samples (their discard reason
    becomes "overlong"). ``old_is_current``: the old log-probs were skipped (``old_policy_is_current``);
    the update stands its own in for them. Each row's ``update_info`` records its mini-batch, that
    mini-batch's global counts and whether the row is in the loss (the inspector's objective explainer).
    ``return_entropy``: no old forward ran (one-step off-policy), so the update hands entropies back.
    """
    G = config.rollout.n
    per_mb = config.optim.mini_batch_size * G
    loss_mask = [not (config.algorithm.overlong_filtering and r.truncated) for r in batch]
    minibatch = [i // per_mb for i in range(len(batch))]
    tokens: dict[int, int] = {}
    seqs: dict[int, int] = {}
    for r, m, keep in zip(batch, minibatch, loss_mask, strict=True):
        tokens[m] = tokens.get(m, 0) + (len(r.response_ids) if keep else 0)
        seqs[m] = seqs.get(m, 0) + int(keep)
    for i, (r, m, keep) in enumerate(zip(batch, minibatch, loss_mask, strict=True)):
        r.with_tokens = i < token_rows
        r.update_info = {
            "minibatch": m,
            "minibatch_tokens": tokens[m],
            "minibatch_seqs": seqs[m],
            "in_loss": keep,
        }
        if not keep:
            r.discard_reason = "overlong"
    return UpdateBatch(
        prompts=[r.prompt_ids for r in batch],
        responses=[r.response_ids for r in batch],
        advantages=[r.advantage for r in batch],
        old_logprobs=[r.old_logprobs or [] for r in batch],
        loss_mask=loss_mask,
        minibatch=minibatch,
        minibatch_tokens=tokens,
        minibatch_seqs=seqs,
        ratio_rows=list(range(min(token_rows, len(batch)))),
        old_is_current=old_is_current,
        return_entropy=return_entropy,
    )


def old_policy_is_current(num_rows: int, config: RunConfig, *, stale: bool = False) -> bool:
    """Whether the old-policy log-probs equal the ones the update computes before its first step, so
    their separate forward can be skipped (verl and TRL skip it alike): the update makes ONE optimiser
    step (one epoch over one mini-batch) from the weights that sampled the batch (``stale`` False: not
    one-step off-policy generation). Then π_old = π_θ, every ratio is exactly 1 and the gradient is
    −A·∇log π_θ, the same as with the recomputed log-probs."""
    per_mb = config.optim.mini_batch_size * config.rollout.n
    return not stale and config.optim.epochs == 1 and 0 < num_rows <= per_mb


def old_policy_reason(config: RunConfig) -> str | None:
    """Why the config's steps recompute the old log-probs (``old_policy_is_current`` is False for
    them); None when every full batch takes the shortcut. For the run's log, at start."""
    o = config.optim
    if config.rollout.one_step_off_policy:
        return "one-step off-policy: the generator's own log-probs are the old policy's"
    if o.epochs != 1:
        return f"optim.epochs {o.epochs}: more than one optimiser step a rollout step"
    prompts = config.data.train_batch_size
    if prompts > o.mini_batch_size:
        return (
            f"data.train_batch_size {prompts} > optim.mini_batch_size {o.mini_batch_size}: more than one "
            "optimiser step a rollout step"
        )
    return None


def stats(prefix: str, values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        f"{prefix}/mean": sum(values) / len(values),
        f"{prefix}/max": max(values),
        f"{prefix}/min": min(values),
    }


def token_weighted_stats(prefix: str, values: list[float], lengths: list[int]) -> dict[str, float]:
    """Mean, max and min of a per-sequence value over the response TOKENS: each sequence counts once per
    token (verl's critic/advantages/*, read from the token-level advantage tensor)."""
    kept = [(v, n) for v, n in zip(values, lengths, strict=True) if n > 0]
    if not kept:
        return {}
    return {
        f"{prefix}/mean": sum(v * n for v, n in kept) / sum(n for _, n in kept),
        f"{prefix}/max": max(v for v, _ in kept),
        f"{prefix}/min": min(v for v, _ in kept),
    }


def old_policy_entropy(batch: list[Rollout], config: RunConfig) -> float | None:
    """verl's actor/entropy: the old policy's per-token entropy over the batch's response tokens,
    aggregated by the loss mode (algorithm.loss_agg_mode); None before old log-probs exist."""
    rows = [r.entropy for r in batch if r.entropy]
    if not rows:
        return None
    import torch

    from dapo.algo.loss import aggregate

    width = max(len(e) for e in rows)
    values = torch.zeros(len(rows), width, dtype=torch.float64)  # (B, T)
    mask = torch.zeros(len(rows), width, dtype=torch.float64)  # (B, T)
    for i, e in enumerate(rows):
        values[i, : len(e)] = torch.tensor(e, dtype=torch.float64)
        mask[i, : len(e)] = 1.0
    agg = aggregate(values, mask, config.algorithm.loss_agg_mode, max_len=config.rollout.max_response_length)
    return float(agg)


def step_metrics(rollouts: list[Rollout], batch: list[Rollout], config: RunConfig) -> dict[str, float]:
    """Reference §10 metrics of the trained batch, plus accuracy over every generated sample.

    Under verl's names with verl's meaning: critic/score|rewards/* (per sequence), critic/advantages/*
    (token-weighted), actor/entropy (old policy, aggregated by the loss mode); ours beside them:
    critic/seq_advantages/* (one value per sequence). docs/metrics.md lists every metric."""
    m: dict[str, float] = {}
    m.update(stats("critic/score", [r.reward for r in batch]))  # verl DAPO: the penalty is in the score
    m.update(stats("critic/rewards", [r.reward for r in batch]))
    m.update(
        token_weighted_stats(
            "critic/advantages", [r.advantage for r in batch], [len(r.response_ids) for r in batch]
        )
    )
    m.update(stats("critic/seq_advantages", [r.advantage for r in batch]))
    entropy = old_policy_entropy(batch, config)
    if entropy is not None:
        m["actor/entropy"] = entropy
    lengths = [float(len(r.response_ids)) for r in batch]
    m.update(stats("response_length", lengths))
    if batch:
        m["response_length/clip_ratio"] = sum(r.truncated for r in batch) / len(batch)
    m.update(stats("prompt_length", [float(len(r.prompt_ids)) for r in batch]))
    if rollouts:
        m["train/acc/mean"] = sum(r.acc for r in rollouts) / len(rollouts)
        m["train/overlong_penalty/mean"] = sum(r.overlong_penalty for r in rollouts) / len(rollouts)
        m["train/response_length/mean"] = sum(len(r.response_ids) for r in rollouts) / len(rollouts)
        m["train/truncated_frac"] = sum(r.truncated for r in rollouts) / len(rollouts)
    m["train/num_samples_trained"] = float(len(batch))
    if config.algorithm.overlong_filtering:
        m["train/discarded_samples/overlong"] = float(sum(r.truncated for r in batch))
    m.update(reward_metrics(rollouts))
    return m
