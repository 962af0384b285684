"""The body of the Ray backend's actors: a ``PolicyActor`` that the controller builds and restores.

Ray runs ``ray.remote(PolicyWorker)`` (dapo.cluster.ray_backend). The policy is built by ``setup``, not in
``__init__``: an actor that Ray restarts after a crash comes back empty, answers ``ready() -> False`` and
raises ``WorkerNotReady`` for any call, and the controller sets it up again and loads the newest weights.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dapo.learner.actor import PolicyActor, UpdateBatch, UpdateResult
from dapo.loop.batching import score_locally
from dapo.runconfig import RunConfig


class WorkerNotReady(RuntimeError):
    """The actor holds no policy: it is new, or Ray restarted it, and the controller has not set it up."""


def score_chunk(prompts: list[str], responses: list[str], ground_truths: list[str], data: Any) -> list[Any]:
    """Body of a reward task (run with ``ray.remote``); ``data`` is the run's DataConfig."""
    return score_locally(prompts, responses, ground_truths, data)


class PolicyWorker:
    """The body of every Ray actor: a ``PolicyActor`` built by ``setup`` (not in ``__init__``), so an actor
    that Ray restarts comes back empty and the controller decides what it loads."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.policy: PolicyActor | None = None
        self.monitor: Any = None

    def start_hardware(self, queue: Any, worker: str) -> None:
        """Sample this actor's process every ``logging.hardware_interval_s`` onto ``queue`` (a Ray queue the
        controller drains; when it is full, samples are dropped). Restarting replaces the monitor."""
        from dapo.loop.hardware import HardwareMonitor

        def put(samples: list) -> None:
            for sample in samples:
                try:
                    queue.put_nowait(sample)
                except Exception:  # full, or the controller is closing: the sample is dropped
                    return

        if self.monitor is not None:
            self.monitor.stop()
        self.monitor = HardwareMonitor(self.config.logging.hardware_interval_s, put, worker=worker).start()

    def ready(self) -> bool:
        return self.policy is not None

    def where(self) -> dict[str, Any]:
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def rendezvous(self) -> tuple[str, int]:
        """Address for the process group's rendezvous (called on rank 0): this node's IP and a free port."""
        import ray

        from dapo.cluster.ray_cluster import free_port

        return ray.util.get_node_ip_address(), free_port()

    def setup(
        self,
        rank: int,
        world_size: int,
        master: tuple[str, int] | None,
        learner: bool = True,
        generates: bool = True,
    ) -> None:
        """Join the learners' process group (given ``master``: several learners, or FSDP) and build the
        policy; ``learner`` False: a rollout worker; ``generates`` False: a learner without an engine."""
        if master is not None:
            import datetime

            import torch
            import torch.distributed as dist

            assert master is not None
            cuda = self.config.model.device != "cpu" and torch.cuda.is_available()
            dist.init_process_group(
                "nccl" if cuda else "gloo",
                init_method=f"tcp://{master[0]}:{master[1]}",
                rank=rank,
                world_size=world_size,
                timeout=datetime.timedelta(minutes=10),
            )
        self.policy = PolicyActor(
            self.config, rank=rank, world_size=world_size, learner=learner, generates=generates
        )

    def call(self, method: str, *args: Any) -> Any:
        """Run ``PolicyActor.<method>(*args)``."""
        return getattr(self._policy(), method)(*args)

    def _policy(self) -> PolicyActor:
        if self.policy is None:
            raise WorkerNotReady(f"worker pid {os.getpid()} has no policy (new or restarted actor)")
        return self.policy

    def train(
        self, batch: UpdateBatch, lr: float | None, hand_over: bool, export: bool
    ) -> tuple[tuple[UpdateResult, dict[str, float]], Any, Any]:
        """A whole update in one call (``num_returns=3``): set the rate, update, hand the weights to this
        actor's engine (``hand_over``, colocated mode), and export the new state (``export``, rank 0).

        Returns ((update result, memory stats), model state, optimiser state); the states in wire form,
        or None when not exported. Under FSDP every rank must be asked to export (the state is gathered
        by all of them) and only rank 0 returns it.
        """
        policy = self._policy()
        if lr is not None:
            policy.set_lr(lr)
        result = policy.update(batch)
        if hand_over:
            policy.after_update()
        if not export:
            return (result, policy.memory_stats()), None, None
        state = policy.state_dict()
        if policy.rank != 0:
            return (result, policy.memory_stats()), None, None
        return (result, policy.memory_stats()), to_wire(state["model"]), to_wire(state["optimizer"])

    def export_state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(model state, optimiser state) in wire form (``to_wire``), as two objects (``num_returns=2``).
        Under FSDP a collective: ask every learner, rank 0 answers with the state, the others with {}."""
        state = self.call("state_dict")
        return to_wire(state["model"]), to_wire(state["optimizer"])

    def import_state(self, model: dict[str, Any], optimizer: dict[str, Any] | None) -> None:
        """Load a learner state in wire form (no optimiser state: keep this worker's)."""
        state = {"model": from_wire(model)}
        if optimizer is not None:
            state["optimizer"] = from_wire(optimizer)
        self.call("load_state_dict", state)

    def load_weights(self, model: dict[str, Any]) -> None:
        """New policy weights (wire form) for this worker's model and engine; the optimiser is untouched."""
        self.call("load_state_dict", {"model": from_wire(model)})

    def weights_checksum(self) -> float:
        """Sum of every parameter (float64): equal checksums mean, in practice, equal weights. Under FSDP
        a collective (the sum is of the whole parameters)."""
        policy = self._policy()
        state = dict(policy.full_weights())
        names = [n for n, _ in policy.model.named_parameters()]  # tied weights count once
        return float(sum(state[n].double().sum() for n in names))

    def pretrained_files(self) -> dict[str, bytes]:
        """``save_pretrained`` into a temporary folder on this node; returns {relative path: content}
        (under FSDP a collective: rank 0 returns the files, the other ranks {})."""
        with tempfile.TemporaryDirectory() as tmp:
            self.call("save_pretrained", tmp)
            root = Path(tmp)
            return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@dataclass(frozen=True)
class Bf16Array:
    """A bfloat16 tensor's bits (numpy has no bfloat16)."""

    bits: Any  # np.ndarray of int16


def to_wire(value: Any) -> Any:
    """Nested state with every tensor as a CPU numpy array: Ray stores numpy arrays without pickling their
    data (about 10x faster than torch tensors), and readers map them from the object store."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            return Bf16Array(tensor.view(torch.int16).numpy())
        return tensor.numpy()
    if isinstance(value, dict):
        return {k: to_wire(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_wire(v) for v in value)
    return value


def from_wire(value: Any) -> Any:
    """Undo ``to_wire``; tensors are copies (object-store arrays are read-only, and the optimiser updates
    its state in place)."""
    if isinstance(value, Bf16Array):
        return torch.from_numpy(np.array(value.bits)).view(torch.bfloat16)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value))
    if isinstance(value, dict):
        return {k: from_wire(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(from_wire(v) for v in value)
    return value
