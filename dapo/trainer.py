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

The heavy work goes through a backend (dapo.backends): in this process, or on Ray actors. Both share
this loop, so a run behaves the same on either.
"""

from __future__ import annotations

import logging
import time
import traceback
from pathlib import Path

import torch

from dapo import checkpoint as ckpt
from dapo.advantage import get_advantage_estimator
from dapo.backends import Backend, make_backend
from dapo.batching import Rollout, build_update_batch, make_rollouts, old_policy_is_current, step_metrics
from dapo.config import RunConfig
from dapo.data import encode_prompts, load_problems
from dapo.distributions import pop_ratio_sketch, step_distributions
from dapo.hardware import HardwareMonitor
from dapo.report import RunInfo, RunResult, SampleRecord, Sink, Status, StepReport
from dapo.rollout.base import SamplingParams
from dapo.sampling import GroupBatchFiller, keep_groups
from dapo.stream import ProblemStream
from dapo.timing import Timer
from dapo.validation import load_validation_sets, validate

log = logging.getLogger(__name__)


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

    # ---- set-up -------------------------------------------------------------------------------

    def _setup(self) -> None:
        c = self.config
        ckpt.check_writable(self.out_dir)
        self.backend = self._backend or make_backend(c)
        self.tokenizer = self.backend.tokenizer
        self.train_problems = load_problems(c.data.train_path)
        self.val_problems, self.val_sources = load_validation_sets(c)
        self.train_prompts = encode_prompts(self.tokenizer, self.train_problems, c.data.max_prompt_length)
        self.val_prompts = encode_prompts(self.tokenizer, self.val_problems, c.data.max_prompt_length)
        self.stream = ProblemStream(len(self.train_problems), seed=c.seed, shuffle=c.data.shuffle)
        self.advantage_fn = get_advantage_estimator(c.algorithm.advantage_estimator)
        path = Path(self.resume_from) if self.resume_from else None
        if path is None and self.resume:
            path = ckpt.latest(self.out_dir)
        if path is not None:
            self.step = ckpt.load(path, self.backend, self.stream)
            log.info("resumed from %s at step %d", path, self.step)
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
            filler, rollouts, batch = self._generate_and_filter(timer)
            with timer("adv"):
                self._advantages(rollouts)
            reuse = old_policy_is_current(len(batch), c)
            with timer("old_log_prob"):
                if not reuse:
                    self._old_logprobs(batch)
            with timer("update_actor"):
                update = build_update_batch(
                    batch, c, token_rows=c.logging.token_data_samples_per_step, old_is_current=reuse
                )
                result = self.backend.update(update) if batch else ({}, {}, {}, {})
                actor_metrics, ratios, entropies, new_logps = result
                self.backend.after_update()
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
                with timer("testing"):
                    val_metrics, val_samples = self._validate()
                metrics.update(val_metrics)
            if self._checkpoint_due():
                with timer("save_checkpoint"):
                    self._save()
        metrics.update(timer.metrics(prefix="timing_s/"))
        metrics.update(self._timing(timer, batch))
        self._report(metrics, rollouts, val_samples, step_distributions(rollouts, batch, ratio_quantiles))
        return metrics

    # ---- phases -------------------------------------------------------------------------------

    def _generate_and_filter(
        self, timer: Timer
    ) -> tuple[GroupBatchFiller[Rollout], list[Rollout], list[Rollout]]:
        """Generation rounds until the batch is full (or the round limit); returns (filler, every
        rollout of the step, the trained batch)."""
        c, a = self.config, self.config.algorithm
        G = c.rollout.n
        limit = a.max_num_gen_batches if a.dynamic_sampling else 1
        filler: GroupBatchFiller[Rollout] = GroupBatchFiller(c.data.train_batch_size, G, limit)
        rollouts: list[Rollout] = []
        round_index = 0
        while filler.may_generate_more:
            n_prompts = c.data.gen_batch_size if a.dynamic_sampling else c.data.train_batch_size
            problem_ids = self.stream.take(n_prompts)
            params = SamplingParams(
                n=G,
                temperature=c.rollout.temperature,
                top_p=c.rollout.top_p,
                top_k=c.rollout.top_k,
                max_new_tokens=c.rollout.max_response_length,
                seed=self._seed(round_index),
            )
            with timer("gen"):
                completions = self.backend.generate([self.train_prompts[i] for i in problem_ids], params)
            with timer("reward"):
                new = make_rollouts(
                    self.backend,
                    self.tokenizer,
                    [self.train_problems[i] for i in problem_ids],
                    [self.train_prompts[i] for i in problem_ids],
                    completions,
                    c,
                    step=self.step,
                    first_group=len(rollouts) // G,
                )
            rollouts.extend(new)
            if a.dynamic_sampling:
                keep = filter_groups(new, a.filter_metric, G)
            else:
                keep = [True] * (len(new) // G)
            filler.add(new, keep, acc=[r.acc for r in new])
            round_index += 1
        batch = filler.batch()
        for r in batch:
            r.kept = True
        for g, reason in enumerate(filler.group_reasons()):  # groups arrive in the rollouts' order
            for r in rollouts[g * G : (g + 1) * G]:
                r.discard_reason = reason
        return filler, rollouts, batch

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
            save_optimizer=c.save_optimizer,
            keep_last=c.keep_last,
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

    def _seed(self, round_index: int) -> int:
        """Sampling seed of a generation round: a function of (seed, step, round), so a resumed run
        draws the same samples as an uninterrupted one."""
        return (self.config.seed * 1_000_003 + self.step * 1_009 + round_index) % (2**31)

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
