"""The Ray backend: the trainer's heavy work on Ray actors, driven by the single controller.

Who does what (``config.execution``):
  * learners: ``num_learner_workers`` actors, each a ``PolicyActor`` in one torch.distributed group (gloo on
    CPU, nccl on GPU) that wraps the model in DDP, or shards it with FSDP2 (``learner_strategy``; then
    exporting the state, saving and log-prob forwards are collectives, asked of every learner).
    ``update`` hands each learner a contiguous shard of every mini-batch with the mini-batch's GLOBAL
    token and sequence counts, so the step equals the one-process update (the exact global token mean).
    Learners also compute the old-policy log-probs.
  * generation: ``colocate`` on -> the learners generate with their own weights (verl's hybrid engine);
    off -> ``num_rollout_workers`` separate actors, which receive the learner's weights after each update
    (one object in Ray's object store, loaded by every rollout worker).
    Prompts are split contiguously over the generating actors and the completions concatenated in order, so
    each prompt's G samples stay contiguous. Shard i samples with seed ``shard_seed(seed, i, workers)``:
    one worker uses the trainer's seed itself (a one-worker run matches the one-process run), and several
    workers are deterministic for a fixed worker count.
  * rewards: Ray tasks over chunks of responses (``score_locally``), off the rollout actors.

Failures: a call that fails because an actor died is retried up to ``max_step_retries`` times. A dead
rollout worker is restarted by Ray (``max_restarts``); it comes back empty, and the controller sets it up
again and loads the newest weights. Any learner failure rebuilds the whole learner group (a new placement
group, actors and process group) from the newest state, kept in the object store after every update.
The object store lives on the learner's node: losing that node fails the run, which then resumes from its
last checkpoint (``dapo.learner.checkpoint``).

A node that dies takes its workers with it. Recovery places them again on the nodes left (Ray reschedules
a rollout group's bundles; a learner group is placed anew), waiting up to the placement timeout for room.
When the cluster cannot hold them without that node, the run fails with ``NodeLost`` (dapo.cluster.backends)
naming the node, its host and the workers it held: node death is read from Ray (``ray.nodes()``'s alive
flags for the nodes the run's bundles were placed on), never guessed from an error's text. The platform
queues such a run again; it resumes from its last checkpoint when the cluster can hold it.

Placement groups are named ``dapo-run-<label>-<role>`` (``label``: the trainer passes its run directory's
name), so Ray's state maps them back to their run (dapo.cluster.state).

It is longer than 400 lines because the controller's side of every Ray actor call, with its recovery
from a lost actor, is one protocol; the pure splitting and merging lives in ``ray_shards``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from dapo.cluster.ray_cluster import (
    PlacementTimeout,
    connect,
    loopback_only_local_ray,
    placement_strategy,
    release,
    reserve,
)
from dapo.cluster.ray_shards import logprob_shards, merge_updates, shard_seed, shard_update, split_evenly
from dapo.cluster.ray_worker import PolicyWorker, WorkerNotReady, from_wire, score_chunk, to_wire
from dapo.cluster.resources import Capacity, ClusterTooSmall, report_capacity, request_for
from dapo.cluster.state import NodeLost, bundle_nodes, describe_loss, group_name, lost_workers
from dapo.learner.actor import UpdateBatch, UpdateResult
from dapo.rollout.base import Completion, SamplingParams
from dapo.runconfig import RunConfig

log = logging.getLogger(__name__)
T = TypeVar("T")

REWARD_CHUNK = 256
"""Responses per reward task."""
RESTART_TIMEOUT_S = 300.0
"""How long Ray may take to restart a dead rollout worker before the controller replaces it."""
LIVENESS_TIMEOUT_S = 30.0
"""How long a learner may take to answer a ping after a failed collective call before it counts as lost."""
NODE_DEATH_WAIT_S = 30.0
"""After workers were lost for good: how long to wait for Ray to say whether their node died (the GCS calls a
node dead after several failed health checks, ~15 s with Ray's defaults) before the failure counts as the
workers' own rather than a NodeLost."""
HARDWARE_QUEUE_SIZE = 10_000
"""Hardware samples the actors may queue before the controller drains them (the newest are dropped)."""


class LearnerGroupBroken(RuntimeError):
    """A learner died or hangs, so the collective calls of the others cannot finish."""


class RayBackend:
    """The ``Backend`` protocol on Ray actors (see the module docstring)."""

    def __init__(self, config: RunConfig, *, placement: str | None = None, label: str = "") -> None:
        loopback_only_local_ray()
        import ray

        self._ray = ray
        self.config = _with_absolute_paths(config)
        self.tokenizer = _load_tokenizer(self.config.model.path)
        self.strategy = placement_strategy(placement)
        self.label = label
        """Names the placement groups (``dapo-run-<label>-<role>``); empty: unnamed groups."""
        self.recoveries = 0
        """Failed calls that were recovered and retried (for logs and tests)."""
        self._lr: float | None = None
        self._weights: Any = None  # ObjectRef of the newest model state (None: the weights on disk)
        self._optim: Any = None  # ObjectRef of the matching optimiser state
        self._broadcast: Any = None  # the weights the rollout workers hold
        self._memory: dict[str, float] | None = None
        self._sharded = self.config.execution.learner_strategy == "fsdp"
        """FSDP learners: exporting the state, saving and scoring are collectives over all of them."""
        self._groups: dict[str, Any] = {}
        self._placed: dict[str, list[str | None]] = {}
        """Each role's bundles' nodes, as last placed: what a dead node took with it."""
        self.learners: list[Any] = []
        self.rollouts: list[Any] = []
        self._hardware: Any = None  # a Ray queue of the actors' hardware samples
        self.request = request_for(self.config)
        """The bundles this run places (one per actor); dapo.cluster.resources is their single source."""
        self.connection = connect()
        self._recoverable = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, WorkerNotReady)
        try:
            self._check_capacity()
            self._score_task = ray.remote(num_cpus=0)(score_chunk)
            if self.config.logging.hardware_interval_s > 0:
                from ray.util.queue import Queue

                self._hardware = Queue(maxsize=HARDWARE_QUEUE_SIZE, actor_options={"num_cpus": 0})
            # The rollout workers start (import torch, build their model) while the learners form their
            # group: started one after the other, a two-learner, one-rollout run waited ~1.5x as long.
            self._reserve("learner")  # learners are placed first
            pending = [] if self.config.execution.colocate else self._spawn_rollouts()
            self.learners = self._start_learners()
            self._get_all(pending)
            self._start_hardware([(a, f"rollout {i}") for i, a in enumerate(self.rollouts)])
        except BaseException:
            self.close()
            raise

    # ---- the Backend protocol -----------------------------------------------------------------

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        recover = self._rebuild_learners if self.config.execution.colocate else self._restore_rollouts
        return self._retry("generate", lambda: self._generate_once(prompts, params), recover)

    def score(
        self, prompts: list[str], responses: list[str], ground_truths: list[str], data: Any
    ) -> list[Any]:
        chunks = [slice(i, i + REWARD_CHUNK) for i in range(0, len(responses), REWARD_CHUNK)]
        refs = [self._score_task.remote(prompts[c], responses[c], ground_truths[c], data) for c in chunks]
        return [result for chunk in self._ray.get(refs) for result in chunk]

    def compute_logprobs(
        self, prompts: list[list[int]], responses: list[list[int]]
    ) -> tuple[list[list[float]], list[list[float]]]:
        def once() -> tuple[list[list[float]], list[list[float]]]:
            shards = logprob_shards(len(prompts), len(self.learners), even=self._sharded)
            calls = [
                (a, "compute_logprobs", [prompts[i] for i in rows], [responses[i] for i in rows])
                for a, (rows, _) in zip(self.learners, shards, strict=False)
            ]
            parts = zip(self._on_learners(calls), shards, strict=True)
            kept = [(lp[:real], ent[:real]) for (lp, ent), (_, real) in parts]  # padding rows dropped
            return [x for lp, _ in kept for x in lp], [x for _, ent in kept for x in ent]

        return self._retry("compute_logprobs", once, self._rebuild_learners)

    def update(self, batch: UpdateBatch) -> UpdateResult:
        """One call per learner does the whole update (see ``PolicyWorker.train``): every hop between
        processes costs latency, the more so on a busy machine."""
        colocate = self.config.execution.colocate
        keep = not colocate or self.config.execution.max_step_retries > 0

        def once() -> UpdateResult:
            # Under a token budget, learners with balanced token totals wait less for each other at every
            # micro-batch; with row micro-batches, contiguous groups pad less (bench/README.md).
            balance = self.config.optim.micro_batch_max_tokens > 0
            shards = shard_update(batch, len(self.learners), balance=balance)
            refs = [
                actor.train.options(num_returns=3).remote(
                    shard, self._lr, colocate, keep and (rank == 0 or self._sharded)
                )
                for rank, (actor, (shard, _)) in enumerate(zip(self.learners, shards, strict=True))
            ]
            results = self._collect([r[0] for r in refs], "update")
            # The newest state stays in the object store: weight broadcast, recovery and checkpoints.
            self._weights, self._optim = (refs[0][1], refs[0][2]) if keep else (None, None)
            self._memory = {k: max(m.get(k, 0.0) for _, m in results) for k in results[0][1]}
            merged = merge_updates([r for r, _ in results], [rows for _, rows in shards])
            return merged[0], merged[1], merged[2], merged[3]

        return self._retry("update", once, self._rebuild_learners)

    def after_update(self) -> None:
        """Colocated: nothing left to do (``train`` handed the weights to the engine). Split: the rollout
        workers load the newest weights, one object in the store for all of them; with one-step
        off-policy generation they are the behaviour copy, loaded by ``sync_behaviour`` instead."""
        if not self.config.rollout.one_step_off_policy:
            self.sync_behaviour()

    def path_decisions(self) -> list[str]:
        """Learner 0's decisions; in split mode the rollout line is a rollout worker's (it samples)."""
        lines = self._ray.get(self.learners[0].call.remote("path_decisions"))
        if self.rollouts:
            theirs = self._ray.get(self.rollouts[0].call.remote("path_decisions"))
            rollout = next(line for line in theirs if line.startswith("rollout:"))
            lines = [rollout if line.startswith("rollout:") else line for line in lines]
        return lines

    def generate_stale(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """Sample on the rollout workers (split mode: ``rollout.one_step_off_policy`` requires it) with
        the weights they hold, while the learners update; called from the trainer's generation thread."""
        return self._retry("generate", lambda: self._generate_once(prompts, params), self._restore_rollouts)

    def sync_behaviour(self) -> None:
        """Split mode: the rollout workers load the newest weights (colocated: they are the learners')."""
        if not self.config.execution.colocate and self._weights is not self._broadcast:
            self._retry("after_update", self._broadcast_weights, self._restore_rollouts)

    def set_lr(self, lr: float) -> None:
        """Applied with the next update (or when a learner group is built): the rate matters only there."""
        self._lr = lr

    def state_dict(self) -> dict[str, Any]:
        def once() -> dict[str, Any]:
            refs = [self._weights, self._optim]
            if self._weights is None or self._optim is None:
                askees = self.learners if self._sharded else self.learners[:1]
                every = [a.export_state.options(num_returns=2).remote() for a in askees]
                self._get_all([ref for pair in every for ref in pair])
                refs = every[0]
            model, optim = self._get_all(refs)
            return {"model": from_wire(model), "optimizer": from_wire(optim)}

        return self._retry("state_dict", once, self._rebuild_learners)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._weights = self._ray.put(to_wire(state["model"]))
        self._optim = self._ray.put(to_wire(state["optimizer"])) if state.get("optimizer") else None
        self._retry("load_state_dict", lambda: self._load_newest_state(self.learners), self._rebuild_learners)
        if self.rollouts:
            self._retry("load_state_dict", self._broadcast_weights, self._restore_rollouts)

    def save_pretrained(self, path: str | Path) -> None:
        askees = self.learners if self._sharded else self.learners[:1]
        files = self._get_all([a.pretrained_files.remote() for a in askees])[0]
        for name, content in files.items():
            target = Path(path) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)

    def memory_stats(self) -> dict[str, float]:
        """Peak memory over the learners, as of the last update."""
        if self._memory is None:
            stats = self._on_all_learners("memory_stats")
            self._memory = {k: max(s.get(k, 0.0) for s in stats) for k in stats[0]}
        return dict(self._memory)

    def hardware_samples(self) -> list[Any]:
        """The actors' hardware samples since the last call (dapo.loop.hardware), drained from their queue."""
        if self._hardware is None:
            return []
        try:
            return list(self._hardware.get_nowait_batch(self._hardware.qsize()))
        except Exception as e:  # the queue's actor is gone (closing, or its node died): no samples
            log.debug("no hardware samples: %s", e)
            return []

    def close(self) -> None:
        """Kill the workers, free their placement groups, and leave Ray as connect() found it."""
        if self._ray.is_initialized():
            for actor in self.learners + self.rollouts:
                self._ray.kill(actor, no_restart=True)
            for group in self._groups.values():
                release(group)
            if self._hardware is not None:
                self._hardware.shutdown()
        self._hardware = None
        self.learners, self.rollouts, self._groups = [], [], {}
        self.connection.close()

    # ---- inspection ---------------------------------------------------------------------------

    def placement(self) -> list[dict[str, Any]]:
        """Where each worker runs: [{role, rank, node_id, pid}], learners first."""
        roles = [("learner", i, a) for i, a in enumerate(self.learners)]
        roles += [("rollout", i, a) for i, a in enumerate(self.rollouts)]
        found = self._ray.get([a.where.remote() for _, _, a in roles])
        return [{"role": role, "rank": i, **w} for (role, i, _), w in zip(roles, found, strict=True)]

    # ---- workers ------------------------------------------------------------------------------

    def _check_capacity(self) -> None:
        """Before placing anything: fail at once, naming what is missing, when the cluster can never hold
        this run (rather than after the placement timeout). The capacity seen is reported
        (``resources.report_capacity``: the platform's worker records it for the launch check)."""
        capacity = Capacity.from_ray_nodes(self._ray.nodes())
        report_capacity(capacity)
        if reasons := self.request.shortfall(capacity):
            raise ClusterTooSmall(
                f"this run {self.request.describe()}, which the Ray cluster ({capacity.describe()}) can "
                f"never hold: {'; '.join(reasons)}. Lower execution.cpus_per_worker / gpus_per_worker or "
                "the number of workers, or add nodes."
            )

    def _spawn(self, role: str, index: int, max_restarts: int) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = self.request.ray_bundles(role)[index]
        return (
            self._ray.remote(PolicyWorker)
            .options(
                num_cpus=bundle.get("CPU", 0.0),
                num_gpus=bundle.get("GPU", 0.0),
                max_restarts=max_restarts,
                max_task_retries=0,  # the controller retries, after restoring the weights
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._groups[role], placement_group_bundle_index=index
                ),
            )
            .remote(self.config)
        )

    def _reserve(self, role: str) -> None:
        bundles = self.request.ray_bundles(role)
        name = group_name(self.label, role) if self.label else ""
        self._groups[role] = reserve(bundles, self.strategy, self.connection.placement_timeout_s, name)
        self._placed[role] = bundle_nodes(self._ray, self._groups[role])

    def _await_placement(self, role: str) -> None:
        """Wait until Ray has placed every bundle of ``role``'s group (after a node died it reschedules the
        bundles that were there), up to the placement timeout; raises PlacementTimeout."""
        from ray.util.placement_group import placement_group_table

        timeout = self.connection.placement_timeout_s
        deadline = time.monotonic() + timeout
        while (state := placement_group_table(self._groups[role])["state"]) != "CREATED":
            if time.monotonic() >= deadline:
                raise PlacementTimeout(
                    f"Ray could not place the {role} workers again within {timeout:.0f} s ({state})"
                )
            time.sleep(0.5)
        self._placed[role] = bundle_nodes(self._ray, self._groups[role])

    def _start_learners(self) -> list[Any]:
        """A fresh learner group: placement group, actors, process group, then the newest state."""
        n = self.config.execution.num_learner_workers
        if "learner" not in self._groups:  # reserved by __init__; released by _rebuild_learners
            self._reserve("learner")
        # Learners are never restarted by Ray: a restarted rank could not rejoin the old process group.
        actors = [self._spawn("learner", i, max_restarts=0) for i in range(n)]
        try:
            grouped = n > 1 or self._sharded  # FSDP needs a process group even for one learner
            master = self._ray.get(actors[0].rendezvous.remote()) if grouped else None
            # split mode: learners never sample, so they hold no rollout engine (nor its copy of the model)
            generates = self.config.execution.colocate
            self._get_all([a.setup.remote(rank, n, master, True, generates) for rank, a in enumerate(actors)])
            self._load_newest_state(actors)
            self._start_hardware([(a, f"learner {rank}") for rank, a in enumerate(actors)])
        except BaseException:
            for actor in actors:
                self._ray.kill(actor, no_restart=True)
            raise
        return actors

    def _load_newest_state(self, learners: list[Any]) -> None:
        if self._weights is not None:
            self._get_all([a.import_state.remote(self._weights, self._optim) for a in learners])
        if self._lr is not None:
            self._get_all([a.call.remote("set_lr", self._lr) for a in learners])

    def _spawn_rollouts(self) -> list[Any]:
        """Reserve and start the rollout workers; returns their pending set-up calls (no weights to load
        yet: they load the model from disk, as the learners do)."""
        self._reserve("rollout")
        count = self.config.execution.num_rollout_workers
        self.rollouts = [self._spawn("rollout", i, max_restarts=-1) for i in range(count)]
        return [actor.setup.remote(0, 1, None, False) for actor in self.rollouts]

    def _setup_rollout(self, actor: Any, index: int) -> None:
        self._ray.get(actor.setup.remote(0, 1, None, False))
        if self._weights is not None:
            self._ray.get(actor.load_weights.remote(self._weights))
        self._start_hardware([(actor, f"rollout {index}")])

    def _start_hardware(self, actors: list[tuple[Any, str]]) -> None:
        if self._hardware is not None:
            self._get_all([a.start_hardware.remote(self._hardware, name) for a, name in actors])

    def _rebuild_learners(self) -> None:
        """Tear the learner group down and build it again from the newest state."""
        for actor in self.learners:
            self._ray.kill(actor, no_restart=True)
        release(self._groups.pop("learner"))
        self.learners = self._start_learners()

    def _restore_rollouts(self) -> None:
        """Set up rollout workers that Ray restarted (and replace any that are gone for good), once their
        group is placed again."""
        self._await_placement("rollout")
        for i, actor in enumerate(self.rollouts):
            ready = self._ready_after_restart(actor)
            if ready is None:
                self._ray.kill(actor, no_restart=True)
                self.rollouts[i] = actor = self._spawn("rollout", i, max_restarts=-1)
            if not ready:
                self._setup_rollout(actor, i)

    def _ready_after_restart(self, actor: Any) -> bool | None:
        """Whether the actor holds a policy, once Ray has finished restarting it; None if it is gone."""
        exceptions = self._ray.exceptions
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                return bool(self._ray.get(actor.ready.remote(), timeout=RESTART_TIMEOUT_S))
            except exceptions.ActorUnavailableError:  # restarting: ask again, once its bundle has a node
                self._await_placement("rollout")
                time.sleep(0.5)
            except (exceptions.RayActorError, exceptions.GetTimeoutError):
                return None
        return None

    def _broadcast_weights(self) -> None:
        if self._weights is not None:
            self._get_all([a.load_weights.remote(self._weights) for a in self.rollouts])
        self._broadcast = self._weights

    # ---- calls --------------------------------------------------------------------------------

    def _generate_once(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        workers = self.learners if self.config.execution.colocate else self.rollouts
        refs = []
        for i, (worker, r) in enumerate(zip(workers, split_evenly(len(prompts), len(workers)), strict=True)):
            if len(r):
                shard_params = replace(params, seed=shard_seed(params.seed, i, len(workers)))
                refs.append(worker.call.remote("generate", prompts[r.start : r.stop], shard_params))
        return [c for part in self._get_all(refs) for c in part]

    def _on_all_learners(self, method: str, *args: Any) -> list[Any]:
        """The same call on every learner, retried after rebuilding the group."""

        def once() -> list[Any]:
            return self._on_learners([(a, method, *args) for a in self.learners])

        return self._retry(method, once, self._rebuild_learners)

    def _on_learners(self, calls: list[tuple]) -> list[Any]:
        """``PolicyActor`` calls on learners: [(actor, method, *args)]."""
        return self._collect(
            [actor.call.remote(method, *args) for actor, method, *args in calls], calls[0][1]
        )

    def _collect(self, refs: list[Any], what: str) -> list[Any]:
        """Results of learner calls; a learner lost mid-call (its peers then fail in a collective, or hang)
        raises LearnerGroupBroken, which the retry recovers from."""
        try:
            return self._get_all(refs)
        except self._recoverable:
            raise
        except self._ray.exceptions.RayTaskError as exc:
            if self._learners_alive():
                raise
            raise LearnerGroupBroken(f"a learner was lost during {what}") from exc

    def _learners_alive(self) -> bool:
        pings = [a.ready.remote() for a in self.learners]
        done, _ = self._ray.wait(pings, num_returns=len(pings), timeout=LIVENESS_TIMEOUT_S)
        if len(done) < len(pings):
            return False
        try:
            return all(self._ray.get(done))
        except self._recoverable:
            return False

    def _get_all(self, refs: list[Any]) -> list[Any]:
        """ray.get in completion order, so the first failure raises at once (survivors may hang)."""
        pending = list(refs)
        while pending:
            done, pending = self._ray.wait(pending, num_returns=1)
            self._ray.get(done[0])
        return self._ray.get(refs)

    def _retry(self, what: str, call: Callable[[], T], recover: Callable[[], None]) -> T:
        """``call``, recovered and retried up to ``max_step_retries`` times. A failure left over when a node
        that held this run's workers died is a NodeLost naming it (module docstring)."""
        try:
            return self._attempts(what, call, recover)
        except (*self._recoverable, LearnerGroupBroken, PlacementTimeout) as exc:
            lost = lost_workers(self._ray, self._placed, NODE_DEATH_WAIT_S)
            if not lost:
                raise
            raise NodeLost(describe_loss(what, lost, exc)) from exc

    def _attempts(self, what: str, call: Callable[[], T], recover: Callable[[], None]) -> T:
        retries = self.config.execution.max_step_retries
        for attempt in range(retries + 1):
            try:
                return call()
            except (*self._recoverable, LearnerGroupBroken) as exc:
                if attempt == retries:
                    raise
                self.recoveries += 1
                log.warning(
                    "%s failed (%s); recovering, retry %d of %d",
                    what,
                    type(exc).__name__,
                    attempt + 1,
                    retries,
                )
                recover()
        raise AssertionError("unreachable")


def _with_absolute_paths(config: RunConfig) -> RunConfig:
    """Actors may run in another working directory: hand them absolute paths (``RunConfig.file_paths``)."""

    def absolute(_field: str, path: str) -> str:
        return (
            str(Path(path).resolve())
            if path and not Path(path).is_absolute() and Path(path).exists()
            else path
        )

    return config.with_file_paths(absolute)


def _load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
