"""The DAPO training loop (docs/dapo.md §1-§5), as the single controller.

Each rollout step reads top to bottom, each phase its own method and timer:

1. generate   draw prompts, sample G responses each (rollout engine);
2. reward     score each response (rule-based), add the soft overlong penalty (eq. 13);
3. filter     dynamic sampling: keep groups whose filter metric varies, refill from new rounds;
4. adv        group-normalised advantages (§3);
5. old_log_prob   log-probs of the sampling policy, recomputed by the learner (skipped when the update
                 makes one optimiser step from that policy: its own log-probs are the old ones);
6. update     epochs × mini-batches of the clipped objective (eq. 8), exact global token mean;
7. log        metrics, samples and timings to the sinks; validation and checkpoints when due.

The heavy work goes through a backend (dapo.cluster.backends): in this process, or on Ray actors. Both share
this loop, so a run behaves the same on either.

One-step off-policy generation (``rollout.one_step_off_policy``): phases 1-3 of step k+1 run in a
background thread on the backend's behaviour copy of the policy (the weights from before step k's
update) while step k's phases 4-6 run; step k then waits for that batch and loads the new weights into
the behaviour copy. So every batch after the first is exactly one update stale (``rollout/staleness``),
and its old log-probs are the generator's own (docs/dapo.md §1).

It is longer than 400 lines so that the loop reads top to bottom in one class: each phase of a step
(generate, reward, filter, advantage, update, log) is a method with its own timer.
"""

from __future__ import annotations

import logging
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dapo.algo.advantage import get_advantage_estimator
from dapo.algo.sampling import GroupBatchFiller, RoundSizer, keep_groups
from dapo.cluster.backends import Backend, make_backend
from dapo.data.problems import encode_prompts, load_problems
from dapo.data.stream import ProblemStream
from dapo.eval.validation import load_validation_sets, validate
from dapo.learner import checkpoint as ckpt
from dapo.learner.families import check_family
from dapo.learner.memory_plan import read_model_config
from dapo.loop.batching import (
    Rollout,
    build_update_batch,
    make_rollouts,
    old_policy_is_current,
    old_policy_reason,
    step_metrics,
)
from dapo.loop.distributions import pop_ratio_sketch, step_distributions
from dapo.loop.hardware import HardwareMonitor
from dapo.loop.report import RunInfo, RunResult, SampleRecord, Sink, Status, StepReport
from dapo.loop.timing import Timer
from dapo.rollout.base import Completion, SamplingParams
from dapo.runconfig import RunConfig

log = logging.getLogger(__name__)

Round = tuple[list[int], list[Completion]]
"""One generation round: the problem ids drawn and their completions (n per problem, contiguous)."""


@dataclass
class NextBatch:
    """A step's batch generated ahead (one-step off-policy): what ``_generate_and_filter`` returns, the
    rounds behind it (to checkpoint), the policy version that sampled it and its phase times."""

    step: int
    version: int
    filler: GroupBatchFiller[Rollout]
    rollouts: list[Rollout]
    batch: list[Rollout]
    rounds: list[Round]
    seconds: dict[str, float] = field(default_factory=dict)


class Trainer:
    """Runs one DAPO run: ``Trainer(config, out_dir, sinks).fit()``."""

    def __init__(
        self,
        config: RunConfig,
        out_dir: str | Path,
        sinks: list[Sink] | None = None,
        *,
        resume: bool = False,
        resume_from: str | Path | None = None,
        backend: Backend | None = None,
    ) -> None:
        self.config = config
        self.out_dir = Path(out_dir)
        self.sinks = list(sinks or [])
        self.resume, self.resume_from = resume, resume_from
        self._backend = backend
        self.step = 0
        self.off_policy = config.rollout.one_step_off_policy
        self._next: NextBatch | Future[NextBatch] | None = None
        """One-step off-policy: the next step's batch, or the job that is generating it."""
        self._behaviour_version = 0
        """Updates behind the weights of the backend's behaviour copy (= the step they were synced at)."""
        self._pool: ThreadPoolExecutor | None = None

    # ---- set-up -------------------------------------------------------------------------------

    def _setup(self) -> None:
        c = self.config
        ckpt.check_writable(self.out_dir)
        check_family(read_model_config(c.model.path))  # before any model is loaded or GPU taken
        # the run directory's name labels a Ray run's placement groups (the platform names it by run id)
        self.backend = self._backend or make_backend(c, label=self.out_dir.name)
        self.tokenizer = self.backend.tokenizer
        self.train_problems = load_problems(c.data.train_path)
        self.val_problems, self.val_sources = load_validation_sets(c)
        self.train_prompts = encode_prompts(self.tokenizer, self.train_problems, c.data.max_prompt_length)
        self.val_prompts = encode_prompts(self.tokenizer, self.val_problems, c.data.max_prompt_length)
        self.stream = ProblemStream(len(self.train_problems), seed=c.seed, shuffle=c.data.shuffle)
        self.advantage_fn = get_advantage_estimator(c.algorithm.advantage_estimator)
        sized = c.algorithm.adaptive_gen_batch and c.algorithm.dynamic_sampling  # rounds exist only then
        self.round_sizer = RoundSizer(c.data.gen_batch_size) if sized else None
        path = Path(self.resume_from) if self.resume_from else None
        if path is None and self.resume:
            path = ckpt.latest(self.out_dir)
        if path is not None:
            self.step = ckpt.load(path, self.backend, self.stream, self.round_sizer)
            log.info("resumed from %s at step %d", path, self.step)
            self._restore_next(ckpt.load_pending(path))
        for line in self.backend.path_decisions():  # the run's log: which fast path runs, and why
            log.info("paths: %s", line)
        reason = old_policy_reason(c)
        log.info(
            "paths: old-log-prob shortcut: %s",
            "on (one optimiser step a rollout step: the update's own log-probs stand in)"
            if reason is None
            else f"off ({reason}): a forward pass recomputes them",
        )
        if self.off_policy:
            self.backend.sync_behaviour()
            self._behaviour_version = self.step
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dapo-rollout")
            self._threads = torch.get_num_threads()  # the generation thread runs with as many
        self.t0 = time.time()

    def _emit(self, method: str, *args) -> None:
        for sink in self.sinks:
            getattr(sink, method)(*args)

    # ---- the loop -----------------------------------------------------------------------------

    def fit(self) -> RunResult:
        status: Status = "succeeded"
        error: str | None = None
        metrics: dict[str, float] = {}
        monitor: HardwareMonitor | None = None
        try:
            self._setup()
            c = self.config
            collect = getattr(self.backend, "hardware_samples", None)  # Ray: the actors' samples
            emit = lambda samples: self._emit("on_hardware", samples)  # noqa: E731
            monitor = HardwareMonitor(c.logging.hardware_interval_s, emit, collect=collect).start()
            self._emit(
                "on_start",
                RunInfo(
                    run_dir=str(self.out_dir),
                    total_steps=c.optim.total_steps,
                    start_step=self.step + 1,
                    config=c.to_dict(),
                    num_train_problems=len(self.train_problems),
                    num_val_problems=len(self.val_problems),
                ),
            )
            if self.step == 0 and c.validation.every_n_steps and self.val_problems:
                self._validate_only(0)
            while self.step < c.optim.total_steps:
                if any(s.should_stop() for s in self.sinks):
                    status = "cancelled"
                    self._save()
                    break
                metrics = self.train_step()
        except Exception as exc:  # the run fails with its reason; the caller gets it in the result
            status, error = "failed", f"{type(exc).__name__}: {exc}"
            log.error("run failed at step %d:\n%s", self.step + 1, traceback.format_exc())
        finally:
            self._stop_generating()
            if monitor is not None:
                monitor.stop()
            if self._backend is None and hasattr(self, "backend"):
                self.backend.close()
        self._emit("on_finish", status, error)
        return RunResult(status=status, last_step=self.step, error=error, metrics=metrics)

    def train_step(self) -> dict[str, float]:
        """One rollout step; returns its metrics (after handing the report to the sinks)."""
        c, timer = self.config, Timer()
        self.step += 1
        with timer("step"):
            self.backend.set_lr(self._lr(self.step))
            staleness = 0
            if self.off_policy:
                filler, rollouts, batch, staleness = self._take_next_batch(timer)
            else:
                filler, rollouts, batch = self._generate_and_filter(timer)
            with timer("adv"):
                self._advantages(rollouts)
            reuse = old_policy_is_current(len(batch), c, stale=staleness > 0)
            with timer("old_log_prob"):
                if self.off_policy and not reuse:  # the behaviour policy's: the generator's log-probs
                    for r in batch:
                        r.old_logprobs = r.sampling_logprobs
                elif not reuse:
                    self._old_logprobs(batch)
            with timer("update_actor"):
                update = build_update_batch(
                    batch,
                    c,
                    token_rows=c.logging.token_data_samples_per_step,
                    old_is_current=reuse,
                    return_entropy=self.off_policy,
                )
                result = self.backend.update(update) if batch else ({}, {}, {}, {})
                actor_metrics, ratios, entropies, new_logps = result
                self.backend.after_update()
            if self.off_policy:
                with timer("wait_gen"):
                    self._finish_next_batch()
                actor_metrics["rollout/staleness"] = float(staleness)
            ratio_quantiles = pop_ratio_sketch(actor_metrics)
            for row, ratio in ratios.items():
                batch[row].token_ratio = ratio
            for row, logps in new_logps.items():  # the loss's old log-probs are these when reused
                batch[row].new_logprobs = logps
            for row, entropy in entropies.items():  # the old policy's, when its forward was skipped
                batch[row].entropy = entropy
            actor_metrics["actor/old_logprob_reused"] = float(reuse)
            metrics = {**actor_metrics, **filler.metrics(), **step_metrics(rollouts, batch, c)}
            val_samples: list[SampleRecord] = []
            if self._validation_due():
                self._emit("on_activity", f"step {self.step}: validation")
                with timer("testing"):
                    val_metrics, val_samples = self._validate()
                metrics.update(val_metrics)
            if self._checkpoint_due():
                self._emit("on_activity", f"step {self.step}: checkpoint")
                with timer("save_checkpoint"):
                    self._save()
        metrics.update(timer.metrics(prefix="timing_s/"))
        metrics.update(self._timing(timer, batch))
        self._report(metrics, rollouts, val_samples, step_distributions(rollouts, batch, ratio_quantiles))
        return metrics

    # ---- phases -------------------------------------------------------------------------------

    def _generate_and_filter(
        self,
        timer: Timer,
        *,
        step: int | None = None,
        generate: Any = None,
        rounds: list[Round] | None = None,
    ) -> tuple[GroupBatchFiller[Rollout], list[Rollout], list[Rollout]]:
        """Generation rounds until the batch is full (or the round limit); returns (filler, every
        rollout of the step, the trained batch).

        ``step``: the step the batch is for (default: the current one); ``generate``: the backend call
        that samples (default ``backend.generate``); ``rounds``: receives each round's problem ids and
        completions; rounds it holds already are replayed, not generated (a checkpointed batch)."""
        c, a = self.config, self.config.algorithm
        step = self.step if step is None else step
        generate = generate or self.backend.generate
        replay = list(rounds or [])
        G = c.rollout.n
        limit = a.max_num_gen_batches if a.dynamic_sampling else 1
        sizer = self.round_sizer
        if sizer is None:
            filler: GroupBatchFiller[Rollout] = GroupBatchFiller(c.data.train_batch_size, G, limit)
        else:  # sized rounds: the limit counts prompts, as many as `limit` full rounds would draw
            max_groups = limit * c.data.gen_batch_size if limit > 0 else 0
            filler = GroupBatchFiller(c.data.train_batch_size, G, max_num_groups=max_groups)
        rollouts: list[Rollout] = []
        round_index = 0
        while filler.may_generate_more:
            replayed = round_index < len(replay)
            if replayed:
                problem_ids, completions = replay[round_index]
            else:
                if sizer is not None:
                    n_prompts = sizer.size(c.data.train_batch_size - filler.num_kept)
                    if filler.max_num_groups > 0:
                        n_prompts = min(n_prompts, filler.max_num_groups - filler.num_generated)
                elif a.dynamic_sampling:
                    n_prompts = c.data.gen_batch_size
                else:
                    n_prompts = c.data.train_batch_size
                problem_ids = self.stream.take(n_prompts)
                params = SamplingParams(
                    n=G,
                    temperature=c.rollout.temperature,
                    top_p=c.rollout.top_p,
                    top_k=c.rollout.top_k,
                    max_new_tokens=c.rollout.max_response_length,
                    seed=self._seed(round_index, step),
                )
                self._emit("on_activity", f"step {step}: generation round {round_index + 1}")
                with timer("gen"):
                    completions = generate([self.train_prompts[i] for i in problem_ids], params)
                if rounds is not None:
                    rounds.append((problem_ids, completions))
            with timer("reward"):
                new = make_rollouts(
                    self.backend,
                    self.tokenizer,
                    [self.train_problems[i] for i in problem_ids],
                    [self.train_prompts[i] for i in problem_ids],
                    completions,
                    c,
                    step=step,
                    first_group=len(rollouts) // G,
                )
            rollouts.extend(new)
            if a.dynamic_sampling:
                keep = filter_groups(new, a.filter_metric, G)
            else:
                keep = [True] * (len(new) // G)
            filler.add(new, keep, acc=[r.acc for r in new])
            if sizer is not None and not replayed:  # a replayed round was counted before the checkpoint
                sizer.observe(sum(keep), len(keep))
            round_index += 1
        batch = filler.batch()
        for r in batch:
            r.kept = True
        for g, reason in enumerate(filler.group_reasons()):  # groups arrive in the rollouts' order
            for r in rollouts[g * G : (g + 1) * G]:
                r.discard_reason = reason
        return filler, rollouts, batch

    # ---- one-step off-policy generation ------------------------------------------------------

    def _take_next_batch(
        self, timer: Timer
    ) -> tuple[GroupBatchFiller[Rollout], list[Rollout], list[Rollout], int]:
        """This step's batch (generated during the previous step, or now when there is none: the first
        step, or a resume without a saved one), its staleness, and the next step's generation started
        on the behaviour copy, which holds the weights of before this step's update."""
        ready = self._next
        self._next = None
        if not isinstance(ready, NextBatch) or ready.step != self.step:
            rounds: list[Round] = []
            filler, rollouts, batch = self._generate_and_filter(timer, rounds=rounds)
            ready = NextBatch(self.step, self.step - 1, filler, rollouts, batch, rounds)
        for name, seconds in ready.seconds.items():
            timer.totals[name] += seconds
        staleness = (self.step - 1) - ready.version  # learner's version (updates done) - the sampler's
        if not 0 <= staleness <= 1:
            raise RuntimeError(f"step {self.step}: a batch {staleness} updates stale; the bound is one")
        if self.step < self.config.optim.total_steps and self._pool is not None:
            self._next = self._pool.submit(self._generate_next, self.step + 1, self._behaviour_version)
        return ready.filler, ready.rollouts, ready.batch, staleness

    def _generate_next(self, step: int, version: int) -> NextBatch:
        """The background job: step ``step``'s batch sampled by the behaviour copy (policy ``version``)."""
        torch.set_num_threads(self._threads)
        timer, rounds = Timer(), list[Round]()
        filler, rollouts, batch = self._generate_and_filter(
            timer, step=step, generate=self.backend.generate_stale, rounds=rounds
        )
        return NextBatch(step, version, filler, rollouts, batch, rounds, dict(timer.totals))

    def _finish_next_batch(self) -> None:
        """Wait for the next step's batch, then load the updated weights into the behaviour copy."""
        if isinstance(self._next, Future):
            self._next = self._next.result()
        self.backend.sync_behaviour()
        self._behaviour_version = self.step

    def _stop_generating(self) -> None:
        """Let a running generation job end (its failure does not mask the run's), then the thread."""
        if isinstance(self._next, Future):
            try:
                self._next.result()
            except Exception:  # noqa: BLE001 - the run is ending already; its own error is reported
                log.exception("the background generation failed while the run was ending")
            self._next = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _pending_state(self) -> dict[str, Any] | None:
        """The next step's batch for the checkpoint: each round's problem ids and completions as flat
        tensors (weights_only-loadable)."""
        ready = self._next
        if not isinstance(ready, NextBatch):
            return None
        rounds = []
        for problem_ids, completions in ready.rounds:
            rounds.append(
                {
                    "problem_ids": torch.tensor(problem_ids, dtype=torch.long),
                    "lengths": torch.tensor([len(x.token_ids) for x in completions], dtype=torch.long),
                    "token_ids": torch.tensor([t for x in completions for t in x.token_ids]),
                    "logprobs": torch.tensor([v for x in completions for v in x.logprobs]),
                    "eos": torch.tensor([x.finish_reason == "eos" for x in completions]),
                }
            )
        return {"step": ready.step, "version": ready.version, "rounds": rounds}

    def _restore_next(self, pending: dict[str, Any] | None) -> None:
        """Rebuild a checkpoint's next batch (rescored and refiltered as when it was generated)."""
        if pending is None:
            return
        if not self.off_policy or int(pending["step"]) != self.step + 1:
            log.warning(
                "the checkpoint's pre-generated batch for step %s is not used; its prompts are skipped",
                pending["step"],
            )
            return
        rounds: list[Round] = []
        for r in pending["rounds"]:
            tokens, logprobs = r["token_ids"].tolist(), r["logprobs"].tolist()
            completions, at = [], 0
            for length, eos in zip(r["lengths"].tolist(), r["eos"].tolist(), strict=True):
                finish = "eos" if eos else "length"
                completions.append(Completion(tokens[at : at + length], logprobs[at : at + length], finish))
                at += length
            rounds.append((r["problem_ids"].tolist(), completions))
        step = self.step + 1
        filler, rollouts, batch = self._generate_and_filter(Timer(), step=step, rounds=rounds)
        self._next = NextBatch(step, int(pending["version"]), filler, rollouts, batch, rounds)

    def _advantages(self, rollouts: list[Rollout]) -> None:
        a = self.config.algorithm
        scores = torch.tensor([r.reward for r in rollouts], dtype=torch.float64)
        adv = self.advantage_fn(scores, self.config.rollout.n, norm_by_std=a.norm_adv_by_std)
        for r, v in zip(rollouts, adv.tolist(), strict=True):
            r.advantage = float(v)

    def _old_logprobs(self, batch: list[Rollout]) -> None:
        if not batch:
            return
        logps, ents = self.backend.compute_logprobs(
            [r.prompt_ids for r in batch], [r.response_ids for r in batch]
        )
        for r, lp, ent in zip(batch, logps, ents, strict=True):
            r.old_logprobs, r.entropy = lp, ent

    def _validate(self) -> tuple[dict[str, float], list]:
        return validate(
            self.backend,
            self.tokenizer,
            self.val_problems,
            self.val_prompts,
            self.config,
            step=self.step,
            sources=self.val_sources,
        )

    def _validate_only(self, step: int) -> None:
        self._emit("on_activity", f"step {step}: validation")
        timer = Timer()
        with timer("testing"):
            metrics, samples = self._validate()
        metrics.update(timer.metrics(prefix="timing_s/"))
        self._emit(
            "on_step",
            StepReport(
                step=step,
                metrics=metrics,
                val_samples=samples,
                wall_time=time.time(),
                elapsed_s=time.time() - self.t0,
            ),
        )

    def _save(self) -> None:
        if not all(s.may_save_checkpoint() for s in self.sinks):
            log.warning(
                "step %d: a sink refused the checkpoint (the run has another owner); not saved", self.step
            )
            return
        c = self.config.checkpoint
        path = ckpt.save(
            self.out_dir,
            self.step,
            self.backend,
            self.stream,
            self.config,
            round_sizer=self.round_sizer,
            save_optimizer=c.save_optimizer,
            keep_last=c.keep_last,
            pending=self._pending_state(),
        )
        self._emit("on_checkpoint", self.step, str(path))

    def _report(
        self, metrics: dict[str, float], rollouts: list[Rollout], val_samples: list, distributions: dict
    ) -> None:
        samples = [r.record(self.tokenizer) for r in reported(rollouts, self.config)]
        self._emit(
            "on_step",
            StepReport(
                step=self.step,
                metrics=metrics,
                samples=samples,
                val_samples=val_samples,
                wall_time=time.time(),
                elapsed_s=time.time() - self.t0,
                distributions=distributions,
            ),
        )

    # ---- small helpers ------------------------------------------------------------------------

    def _last_step(self) -> bool:
        return self.step == self.config.optim.total_steps

    def _validation_due(self) -> bool:
        """Every validation.every_n_steps steps and at the last step; never when it is 0."""
        every = self.config.validation.every_n_steps
        return bool(self.val_problems) and every > 0 and (self.step % every == 0 or self._last_step())

    def _checkpoint_due(self) -> bool:
        """Every checkpoint.every_n_steps steps (0: none on the way) and always at the last step."""
        every = self.config.checkpoint.every_n_steps
        return self._last_step() or (every > 0 and self.step % every == 0)

    def _lr(self, step: int) -> float:
        """Linear warm-up over ``warmup_steps`` rollout steps, then constant or cosine to 10%."""
        o = self.config.optim
        if o.warmup_steps and step <= o.warmup_steps:
            return o.lr * step / o.warmup_steps
        if o.lr_schedule == "cosine":
            import math

            progress = (step - o.warmup_steps) / max(1, o.total_steps - o.warmup_steps)
            return o.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        return o.lr

    def _seed(self, round_index: int, step: int | None = None) -> int:
        """Sampling seed of a generation round: a function of (seed, step, round), so a resumed run
        draws the same samples as an uninterrupted one (``step`` defaults to the current one)."""
        step = self.step if step is None else step
        return (self.config.seed * 1_000_003 + step * 1_009 + round_index) % (2**31)

    def _timing(self, timer: Timer, batch: list[Rollout]) -> dict[str, float]:
        """Step time and throughput. verl's: ``timing_s/step`` and ``perf/time_per_step`` are the whole
        step, validation and checkpoint included (verl times testing and save_checkpoint inside its step
        timer); ``perf/throughput`` is tokens per second per GPU over it. Ours: ``timing_s/step_train``
        and ``perf/throughput_train`` leave validation and checkpoint time out (docs/metrics.md)."""
        step = timer.totals["step"]
        train = max(step - timer.totals.get("testing", 0.0) - timer.totals.get("save_checkpoint", 0.0), 0.0)
        tokens = sum(len(r.prompt_ids) + len(r.response_ids) for r in batch)
        gpus = num_gpus(self.config)
        out = {
            "timing_s/step": step,
            "timing_s/step_train": train,
            "perf/total_num_tokens": float(tokens),
            "perf/time_per_step": step,
            "perf/throughput": tokens / max(step, 1e-9) / gpus,
            "perf/throughput_train": tokens / max(train, 1e-9) / gpus,
            "perf/cpu_memory_used_gb": _rss_gb(),
        }
        out.update(self.backend.memory_stats())
        return out


def reported(rollouts: list[Rollout], config: RunConfig) -> list[Rollout]:
    """The step's samples handed to the sinks: all of them, or with ``logging.samples_per_step`` = N >= 0
    whole groups up to N samples, the trained groups first, then the discarded ones in generation order
    (the inspector shows how many of each reason were not stored, from the step's metrics)."""
    limit = config.logging.samples_per_step
    if limit < 0:
        return rollouts
    G = config.rollout.n
    groups = [rollouts[i : i + G] for i in range(0, len(rollouts), G)]
    groups.sort(key=lambda group: not group[0].kept)  # stable: generation order within each kind
    return [r for group in groups[: limit // G] for r in group]


FILTER_FIELD = {"acc": "acc", "score": "score", "seq_reward": "reward"}
"""The Rollout field each algorithm.filter_metric reads: correctness, the score before the overlong
penalty, the sequence reward after it (verl's filter_groups.metric acc / score / seq_reward)."""


def filter_groups(rollouts: list[Rollout], metric: str, group_size: int) -> list[bool]:
    """Dynamic sampling's verdict on each group of ``group_size`` contiguous rollouts: keep it when the
    ``metric`` field varies within the group (std > 0)."""
    values = [float(getattr(r, FILTER_FIELD[metric])) for r in rollouts]
    return keep_groups(torch.tensor(values, dtype=torch.float64), group_size).tolist()


def num_gpus(config: RunConfig) -> int:
    """The accelerators a run holds (verl's n_gpus, the divisor of perf/throughput): one on the local
    backend; on Ray, the workers' GPUs (learners and rollout workers share them when colocated); at
    least 1 (a CPU run counts as one device)."""
    e = config.execution
    if e.backend != "ray" or e.gpus_per_worker <= 0:
        return 1
    workers = (
        max(e.num_learner_workers, e.num_rollout_workers)
        if e.colocate
        else e.num_learner_workers + e.num_rollout_workers
    )
    return max(1, round(workers * e.gpus_per_worker))


def _rss_gb() -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0
