"""The policy actor: one model, its rollout engine, its optimiser, and the update of paper eq. 8.

The same class runs in the trainer's own process (local backend) and inside Ray actors (ray backend,
where ``world_size`` > 1 wraps the model in DistributedDataParallel). The controller hands it plain
Python data (lists of token ids, floats), so a call is cheap to pickle to a Ray actor.

Exact global token mean: the controller computes, for each mini-batch, the valid-token and sequence
counts of the WHOLE mini-batch (over every micro-batch and every data-parallel worker) and passes them
in; each micro-batch loss is divided by those totals, so the accumulated gradient equals the gradient of
the mini-batch's global mean whatever the split. DDP averages gradients over workers, so each worker
scales its loss by ``world_size``.

It is longer than 400 lines because the policy's state (model, engine, optimiser) and the update that
changes it are one object that Ray actors hold; the pieces that stand alone live beside it in learner/.
"""

from __future__ import annotations

import logging
import math
import os
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dapo.algo.loss import get_policy_loss, masked_mean
from dapo.cluster.resources import local_cpus
from dapo.learner.microbatch import PaddingCount, plan_micro_batches, split_to_count
from dapo.learner.modeling import eos_token_ids, load_policy, pack, resolve_device, response_logprobs
from dapo.learner.paths import path_decisions
from dapo.learner.shared_prompt import shared_prompt_logprobs, shares_prompts
from dapo.loop.distributions import ratio_sketch
from dapo.rollout import create_engine
from dapo.rollout.base import Completion, RolloutEngine, SamplingParams, Weights, named_tensors
from dapo.runconfig import RunConfig

log = logging.getLogger(__name__)


@dataclass
class UpdateBatch:
    """One rollout step's training data for this worker (its shard of every mini-batch)."""

    prompts: list[list[int]]
    responses: list[list[int]]
    advantages: list[float]
    old_logprobs: list[list[float]]
    loss_mask: list[bool]
    """False drops the whole sequence from the loss (overlong filtering)."""
    minibatch: list[int]
    """Mini-batch index of each row; rows of one mini-batch are contiguous."""
    minibatch_tokens: dict[int, int]
    """Valid tokens of each whole mini-batch (all workers)."""
    minibatch_seqs: dict[int, int]
    """Sequences of each whole mini-batch (all workers), for the seq-mean modes."""
    ratio_rows: list[int] = field(default_factory=list)
    """Rows whose per-token importance ratio and new-policy log-prob to return (token view)."""
    old_is_current: bool = False
    """True when the update makes one optimiser step (one mini-batch, one epoch) from the policy that
    sampled: ``old_logprobs`` are then not computed (empty), the update's own log-probs, detached, stand
    in for them (the same loss and gradient; every ratio is exactly 1), and the update returns each
    row's per-token entropy, the old policy's, in place of the skipped forward's."""
    return_entropy: bool = False
    """Hand back each row's per-token entropy at its first update also when ``old_is_current`` is False:
    one-step off-policy batches bring the generator's log-probs as ``old_logprobs`` and have no old
    forward, so the entropy logged is the learner's at the start of the update."""


RowValues = dict[int, list[float]]
"""Per-token values of some rows of an update batch, by row."""
UpdateResult = tuple[dict[str, float], RowValues, RowValues, RowValues]
"""What an update returns: (metrics, per-token ratios, per-token entropies, per-token log-probs of the
policy being updated), see ``PolicyActor.update``."""


class PolicyActor:
    """Holds the policy, its rollout engine and optimiser; generates, scores log-probs and updates."""

    def __init__(
        self,
        config: RunConfig,
        *,
        rank: int = 0,
        world_size: int = 1,
        learner: bool = True,
        generates: bool = True,
    ) -> None:
        """``learner`` False: a rollout-only actor (Ray split mode), never sharded. ``generates`` False: a
        learner that never samples (Ray split mode), built without a rollout engine."""
        self.config = config
        self.rank, self.world_size = rank, world_size
        self.policy_loss = get_policy_loss(config.algorithm.policy_loss)  # (algorithm.policy_loss)
        # A local run's torch uses the CPUs it asks for (dapo.cluster.resources.local_cpus), not every core
        # of the machine: two runs in two worker processes would otherwise each start a thread per core.
        e = config.execution
        threads = local_cpus(e) if e.backend == "local" else e.torch_threads
        if threads:
            torch.set_num_threads(threads)
            log.info("torch: %d thread(s) in process %d", torch.get_num_threads(), os.getpid())
        torch.manual_seed(config.seed + rank)
        self.device = resolve_device(config.model.device)
        self.model, self.tokenizer = load_policy(config.model, self.device)
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.eos_ids = eos_token_ids(self.model, self.tokenizer)
        self.fsdp = learner and config.execution.learner_strategy == "fsdp"
        # A sharded model cannot generate: under FSDP the hf engine loads its own whole copy.
        shares_model = config.rollout.engine != "vllm" and not self.fsdp
        self.engine: RolloutEngine = NoEngine()
        # vLLM beside a learner on one GPU: it sleeps (weights to host memory, KV cache freed) from the end
        # of each generate until the next, so the learner's forward and backward get that memory.
        self.sleeps_between_rollouts = learner and generates and config.rollout.engine == "vllm"
        if generates:
            self.engine = create_engine(
                config.rollout.engine,
                model_path=config.model.path,
                model=self.model if shares_model else None,
                eos_token_ids=self.eos_ids,
                pad_token_id=self.pad_id,
                device=str(self.device),
                dtype=config.model.dtype,
                seed=config.seed + rank,
                **engine_options(config, sleep=self.sleeps_between_rollouts),
            )
        self.train_module: torch.nn.Module = self.model
        if self.fsdp:
            from dapo.learner.fsdp import shard_model

            shard_model(self.model, self.device, cpu_offload=config.execution.fsdp_cpu_offload)
        elif world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            self.train_module = DistributedDataParallel(self.model)
        o = config.optim
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=o.lr, betas=o.betas, weight_decay=o.weight_decay
        )
        self.decisions = path_decisions(
            self.model, config, self.engine, world_size=world_size, fsdp=self.fsdp
        )  # which fast path runs for this policy and why the others do not: the trainer logs them

    def path_decisions(self) -> list[str]:
        """One line per fast path (``dapo.learner.paths``), for the run's log."""
        return list(self.decisions)

    # ---- rollout ------------------------------------------------------------------------------

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        self.model.eval()
        completions = self.engine.generate(prompts, params)  # a sleeping vLLM wakes itself first
        if self.sleeps_between_rollouts:
            self.engine.sleep()
        return completions

    # ---- log-probs ----------------------------------------------------------------------------

    @torch.no_grad()
    def compute_logprobs(
        self, prompts: list[list[int]], responses: list[list[int]]
    ) -> tuple[list[list[float]], list[list[float]]]:
        """Old-policy log-probs and entropies of each response token, in micro-batches; in row order."""
        self.model.eval()
        logps: list[list[float]] = [[] for _ in prompts]
        ents: list[list[float]] = [[] for _ in prompts]
        # Under FSDP every forward gathers weights: the learners run as many as the busiest one.
        for idx in self._micro_batches(prompts, responses, agree=getattr(self, "fsdp", False)):
            logp, ent, _ = self._logprobs([prompts[i] for i in idx], [responses[i] for i in idx])
            logp_rows, ent_rows = logp.tolist(), ent.tolist()  # one copy each, then Python slices
            for j, i in enumerate(idx):
                logps[i] = logp_rows[j][: len(responses[i])]
                ents[i] = ent_rows[j][: len(responses[i])]
        return logps, ents

    def _micro_batches(
        self, prompts: list[list[int]], responses: list[list[int]], *, agree: bool
    ) -> list[list[int]]:
        """Row indices of each micro-batch (``dapo.learner.microbatch``); ``agree``: as many micro-batches as
        the learner with the most, so that every learner runs the same number of passes."""
        o = self.config.optim
        plan = plan_micro_batches(
            [len(p) for p in prompts],
            [len(r) for r in responses],
            max_rows=o.micro_batch_size,
            max_tokens=o.micro_batch_max_tokens,
        )
        # Row plans agree already (every learner has as many rows); token plans need the largest count.
        if agree and o.micro_batch_max_tokens and self.world_size > 1 and torch.distributed.is_initialized():
            count = torch.tensor([len(plan)], device=self.device)
            torch.distributed.all_reduce(count, op=torch.distributed.ReduceOp.MAX)
            plan = split_to_count(plan, int(count.item()))
        return plan

    # ---- update -------------------------------------------------------------------------------

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def update(self, batch: UpdateBatch) -> UpdateResult:
        """``epochs`` passes over the batch, one optimiser step per mini-batch (paper eq. 8).

        Returns (metrics averaged over optimiser steps, {row: per-token ratio at its first update},
        {row: per-token entropy at its first update} for every row when ``batch.old_is_current`` or
        ``batch.return_entropy``, else empty, {row: per-token log π_θ at its first update}: the new
        log-probs the loss of that step compared with the old ones, for the ``ratio_rows``), with
        ``perf/padding_frac``: the padded share of the token slots of every micro-batch run, and the
        sketch of the first epoch's per-token ratios (``dapo.loop.distributions.ratio_sketch``).
        ``actor/pg_loss`` is the SUM of the mini-batch losses over the update's optimiser steps (verl's
        meaning); ``actor/pg_loss_mean`` their mean (docs/metrics.md).
        """
        self.model.train()
        sums: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        ratios: dict[int, list[float]] = {}
        entropies: RowValues = {}
        logps: RowValues = {}
        padding = PaddingCount()
        first_ratios: list[torch.Tensor] = []  # every trained token's ratio at its first update
        for epoch in range(self.config.optim.epochs):
            for mb in sorted(set(batch.minibatch)):
                rows = [i for i, m in enumerate(batch.minibatch) if m == mb]
                collect = first_ratios if epoch == 0 else None
                metrics = self._minibatch_step(batch, mb, rows, (ratios, entropies, logps), padding, collect)
                for k, v in metrics.items():
                    sums[k] += v
                    counts[k] += 1
        out = {k: sums[k] / counts[k] for k in sums}
        if "actor/pg_loss" in sums:
            out["actor/pg_loss_mean"] = out["actor/pg_loss"]
            out["actor/pg_loss"] = sums["actor/pg_loss"]
        sketch = ratio_sketch(torch.cat(first_ratios).numpy()) if first_ratios else {}
        return {**out, "perf/padding_frac": padding.fraction, **sketch}, ratios, entropies, logps

    def _minibatch_step(
        self,
        batch: UpdateBatch,
        mb: int,
        rows: list[int],
        token_data: tuple[RowValues, RowValues, RowValues],
        padding: PaddingCount,
        first_ratios: list[torch.Tensor] | None = None,
    ) -> dict[str, float]:
        a = self.config.algorithm
        self.optimizer.zero_grad(set_to_none=True)
        metrics: dict[str, float] = defaultdict(float)
        total_tokens = max(batch.minibatch_tokens[mb], 1)
        prompts, responses = [batch.prompts[i] for i in rows], [batch.responses[i] for i in rows]
        for local in self._micro_batches(prompts, responses, agree=True):
            idx = [rows[j] for j in local]
            padding.add([len(prompts[j]) for j in local], [len(responses[j]) for j in local])
            logp, entropy, response_mask = self._logprobs(
                [prompts[j] for j in local], [responses[j] for j in local]
            )
            mask = response_mask * torch.tensor(
                [float(batch.loss_mask[i]) for i in idx], device=self.device
            ).unsqueeze(-1)  # (b, T)
            if batch.old_is_current:  # old = current policy: ratio exactly 1, gradient −A·∇logp
                old = logp.detach()
            else:
                old = _pad_rows([batch.old_logprobs[i] for i in idx], logp.shape[1], self.device)  # (b, T)
            adv = torch.tensor([batch.advantages[i] for i in idx], device=self.device)  # (b,)
            loss, m = self.policy_loss(
                logp,
                old,
                adv,
                mask,
                clip_low=a.clip_low,
                clip_high=a.clip_high,
                clip_c=a.clip_c,
                agg=a.loss_agg_mode,
                num_tokens=batch.minibatch_tokens[mb],
                num_seqs=batch.minibatch_seqs[mb],
                max_len=self.config.rollout.max_response_length,
            )
            (loss * self.world_size).backward()
            # Metrics of the micro-batch weighted by its share of the mini-batch's tokens.
            share = float(mask.sum().item()) / total_tokens
            # the current policy's entropy during the update; verl's actor/entropy (old policy) is the
            # trainer's (dapo.loop.batching.step_metrics)
            m["actor/entropy_update"] = float(masked_mean(entropy.detach(), mask))
            m["actor/pg_loss"] = float(loss.item())
            for k, v in m.items():
                metrics[k] += v if k == "actor/pg_loss" else v * share
            self._record_rows(batch, idx, logp.detach(), old, entropy, token_data)
            if first_ratios is not None:  # the tokens the loss sees, for the step's ratio distribution
                log_ratio = torch.clamp(logp.detach() - old, -20, 20)[mask > 0]
                first_ratios.append(torch.exp(log_ratio.double()).cpu())
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.optim.grad_clip)
        if math.isfinite(float(grad_norm)):
            self.optimizer.step()
        else:  # a non-finite gradient would corrupt the weights: skip this optimiser step (as verl does)
            self.optimizer.zero_grad(set_to_none=True)
        metrics["actor/grad_norm"] = float(grad_norm)
        metrics["actor/lr"] = self.optimizer.param_groups[0]["lr"]
        return metrics

    def _logprobs(
        self, prompts: list[list[int]], responses: list[list[int]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logp, entropy, response_mask), each (b, T), of one micro-batch through the training module
        (with or without grad, as the caller runs it).
        In one process, rows that share a prompt (a group's samples) run it through the decoder once
        (``dapo.learner.shared_prompt``: the same numbers, a G-th of the prompt compute)."""
        r = self.config.rollout
        chunk = self.config.optim.logprob_chunk_tokens
        if not self.fsdp and self.world_size == 1 and shares_prompts(self.model, prompts):
            logp, entropy, response_mask = shared_prompt_logprobs(
                self.model,
                prompts,
                responses,
                self.pad_id,
                self.device,
                temperature=r.temperature,
                with_entropy=True,
                chunk_tokens=chunk,
            )
        else:
            packed = pack(prompts, responses, self.pad_id, self.device)
            logp, entropy = response_logprobs(
                self.train_module, packed, temperature=r.temperature, with_entropy=True, chunk_tokens=chunk
            )
            response_mask = packed.response_mask
        assert entropy is not None
        return logp, entropy, response_mask

    def _record_rows(
        self,
        batch: UpdateBatch,
        idx: list[int],
        logp,
        old,
        entropy,
        token_data: tuple[RowValues, RowValues, RowValues],
    ) -> None:
        """Per-token ratios and new log-probs of the asked rows and, when the old forward was skipped,
        every row's entropy, at each row's first update (one ``tolist`` per micro-batch, then slices)."""
        ratios, entropies, logps = token_data
        wanted = [j for j, i in enumerate(idx) if i in batch.ratio_rows and i not in ratios]
        if wanted:
            ratio = torch.exp(torch.clamp(logp[wanted] - old[wanted], -20, 20)).tolist()
            new = logp[wanted].tolist()
            for j, values, lp in zip(wanted, ratio, new, strict=True):
                ratios[idx[j]] = values[: len(batch.responses[idx[j]])]
                logps[idx[j]] = lp[: len(batch.responses[idx[j]])]
        if (batch.old_is_current or batch.return_entropy) and idx[0] not in entropies:
            ent = entropy.detach().tolist()
            for j, i in enumerate(idx):
                entropies[i] = ent[j][: len(batch.responses[i])]

    # ---- state --------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Model and optimiser state, whole, in the unsharded format for every strategy. Under FSDP a
        collective (every rank must call it): rank 0 gets the state, the other ranks empty dicts."""
        if not self.fsdp:
            return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        from dapo.learner.fsdp import full_optimizer_state, full_state_dict

        keep = self.rank == 0
        return {
            "model": full_state_dict(self.model, keep=keep),
            "optimizer": full_optimizer_state(self.optimizer, keep=keep),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a whole state (any strategy's); under FSDP every rank loads it and keeps its slice."""
        if self.fsdp:
            from dapo.learner.fsdp import load_full_optimizer_state, load_full_state

            load_full_state(self.model, state["model"])
            if "optimizer" in state:
                load_full_optimizer_state(self.optimizer, state["optimizer"])
            self.engine.update_weights(state["model"])
            return
        self.model.load_state_dict(state["model"])
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        self.engine.update_weights(self.model.state_dict())

    def full_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, whole tensor) of the model's state, gathered one tensor at a time under FSDP (a
        collective: every rank must consume it to the end)."""
        if not self.fsdp:
            return iter(self.model.state_dict().items())
        from dapo.learner.fsdp import full_state

        return full_state(self.model)

    def after_update(self) -> None:
        """Hand the new weights to the rollout engine (a no-op when it shares the model); under FSDP they
        are gathered and handed over one tensor at a time."""
        self.engine.update_weights(self.full_weights())

    def save_pretrained(self, path: str | Path) -> None:
        """A HuggingFace folder; under FSDP a collective, written by rank 0 only."""
        if not self.fsdp:
            self.model.save_pretrained(path)
        else:
            from dapo.learner.fsdp import full_state_dict

            state = full_state_dict(self.model, keep=self.rank == 0)
            if self.rank != 0:
                return
            self.model.save_pretrained(path, state_dict=state)
        self.tokenizer.save_pretrained(path)

    def memory_stats(self) -> dict[str, float]:
        """Peak accelerator memory, and the parameters, gradients and optimiser state this process holds
        (its shards only, under FSDP)."""
        from dapo.learner.fsdp import learner_state_bytes

        stats = {"perf/max_memory_allocated_gb": 0.0}
        if self.device.type == "cuda":
            stats["perf/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated(self.device) / 2**30
        stats["perf/learner_state_gb"] = sum(learner_state_bytes(self.model, self.optimizer).values()) / 2**30
        return stats


class NoEngine(RolloutEngine):
    """The engine of a learner that never generates (Ray split mode): it holds no copy of the weights."""

    name = "none"

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        raise RuntimeError("this learner has no rollout engine: with execution.colocate off it never samples")

    def update_weights(self, weights: Weights) -> None:
        for _ in named_tensors(weights):  # consumed all the same: under FSDP each pair is a collective
            pass


def _pad_rows(rows: list[list[float]], width: int, device: torch.device) -> torch.Tensor:
    """(len(rows), width) float32, each row zero-padded on the right: one tensor built, one copy."""
    return torch.tensor([r + [0.0] * (width - len(r)) for r in rows], dtype=torch.float32, device=device)


def engine_options(config: RunConfig, *, sleep: bool = False) -> dict[str, Any]:
    r = config.rollout
    if r.engine == "vllm":
        return {
            "tensor_parallel_size": r.tensor_parallel_size,
            "gpu_memory_utilization": r.gpu_memory_utilization,
            "enforce_eager": r.enforce_eager,
            "enable_sleep_mode": sleep,
        }
    return {"max_batch_size": r.max_batch_size} if r.max_batch_size else {}
