"""What a run asks of the machine or cluster it runs on, from its config alone (no torch, no Ray).

``request_for(cfg)`` is the single source of the bundles a run places:

* **ray**: one bundle per Ray actor, ``{"CPU": cpus_per_worker, "GPU": gpus_per_worker}``: the
  ``num_learner_workers`` learners, and with ``colocate`` off the ``num_rollout_workers`` rollout workers
  too. ``dapo.cluster.ray_backend`` places exactly these, one placement group per role. The driver (the
  Celery worker's process) holds no GPU; reward tasks and the hardware queue ask for no CPU.
* **local**: one bundle in the worker's own process: ``local_cpus`` CPUs, which is also its torch thread
  count, so several runs on one worker (``DAPO_TRAINING_CONCURRENCY``) share the cores instead of each
  starting a thread per core; and one GPU when ``model.device`` is ``cuda``.

With GPUs, the memory per GPU comes from the memory plan (``dapo.learner.memory_plan``) when the model's
config.json is at hand. ``describe()`` is the sentence the launch form and the API show ("needs 2 GPUs,
8 CPUs, ~30.2 GiB per GPU"). ``shortfall(capacity)`` names what a cluster lacks to ever hold the run:
more CPUs or GPUs in all than it has, or a bundle bigger than its largest node (a bundle's resources
come from one node). These are certainties; a run that passes may still wait for room that other runs
hold, or, on a cluster of many small nodes, fail to pack (Ray's placement timeout then says so).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dapo.learner.memory_plan import GIB, PlanError, estimate
from dapo.runconfig import RunConfig
from dapo.runconfig.sections import ExecutionConfig

log = logging.getLogger(__name__)

CPU_SLIVER = 0.01
"""What a Ray actor that asks for no resource holds: Ray needs one resource in every bundle."""


def local_cpus(execution: ExecutionConfig) -> int:
    """A local run's CPUs and torch threads: ``torch_threads`` when set, else ``cpus_per_worker`` rounded
    up, at least one (the demo's ``tiny_cpu`` asks for one)."""
    return execution.torch_threads or max(1, math.ceil(execution.cpus_per_worker))


def ray_bundle(cpus: float, gpus: float) -> dict[str, float]:
    """One Ray actor's bundle; an actor that asks for nothing still holds a sliver of a CPU."""
    bundle = {"CPU": float(cpus)} if cpus > 0 else {}
    if gpus > 0:
        bundle["GPU"] = float(gpus)
    return bundle or {"CPU": CPU_SLIVER}


@dataclass(frozen=True)
class Bundle:
    """What one actor (or the local run's process) holds, all of it on one node."""

    role: str
    """``learner`` or ``rollout`` (Ray), ``process`` (local)."""
    cpus: float
    gpus: float

    def as_ray(self) -> dict[str, float]:
        return ray_bundle(self.cpus, self.gpus)


@dataclass(frozen=True)
class Node:
    """One machine of a cluster: the CPUs and GPUs it has (not what is free now)."""

    cpus: float
    gpus: float


@dataclass(frozen=True)
class Capacity:
    """The cluster a run would be placed on, as a worker last saw it: ``local`` (the worker's machine) or
    ``ray`` (every live node of the Ray cluster)."""

    kind: str
    nodes: tuple[Node, ...]

    @property
    def cpus(self) -> float:
        return sum(n.cpus for n in self.nodes)

    @property
    def gpus(self) -> float:
        return sum(n.gpus for n in self.nodes)

    def describe(self) -> str:
        where = "this machine" if self.kind == "local" else f"{_count(len(self.nodes), 'node')}"
        return f"{where}: {_count(self.gpus, 'GPU')}, {_count(self.cpus, 'CPU')}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "nodes": [{"cpus": n.cpus, "gpus": n.gpus} for n in self.nodes]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Capacity:
        nodes = tuple(Node(float(n.get("cpus", 0)), float(n.get("gpus", 0))) for n in data.get("nodes", []))
        return cls(str(data.get("kind", "ray")), nodes)

    @classmethod
    def from_ray_nodes(cls, nodes: Iterable[Mapping[str, Any]]) -> Capacity:
        """From ``ray.nodes()``: each live node's total CPUs and GPUs (``Resources``)."""
        alive = [n for n in nodes if n.get("Alive", n.get("alive", True))]
        return cls(
            "ray",
            tuple(
                Node(float(n.get("Resources", {}).get("CPU", 0)), float(n.get("Resources", {}).get("GPU", 0)))
                for n in alive
            ),
        )


@dataclass(frozen=True)
class Missing:
    """One reason a cluster can never hold a request: the setting that asks for it, and the sentence."""

    setting: str
    reason: str


@dataclass(frozen=True)
class ResourceRequest:
    backend: str
    bundles: tuple[Bundle, ...]
    gib_per_gpu: float | None = None
    """Per-GPU memory from the memory plan (None: no GPU, or no model config.json to plan from)."""

    @property
    def cpus(self) -> float:
        return sum(b.cpus for b in self.bundles)

    @property
    def gpus(self) -> float:
        return sum(b.gpus for b in self.bundles)

    def ray_bundles(self, role: str) -> list[dict[str, float]]:
        """The bundles of one placement group (one per actor of ``role``), as Ray takes them."""
        return [b.as_ray() for b in self.bundles if b.role == role]

    def describe(self) -> str:
        """``needs 2 GPUs, 8 CPUs, ~30.2 GiB per GPU``; ``needs 1 CPU``."""
        parts = [_count(self.gpus, "GPU")] if self.gpus else []
        parts.append(_count(self.cpus, "CPU"))
        if self.gpus and self.gib_per_gpu is not None:
            parts.append(f"~{self.gib_per_gpu:.1f} GiB per GPU")
        where = (
            "in the worker's process" if self.backend == "local" else _count(len(self.bundles), "Ray actor")
        )
        return f"needs {', '.join(parts)} ({where})"

    def missing(self, capacity: Capacity) -> list[Missing]:
        """What ``capacity`` lacks to ever hold this request (empty: it can)."""
        found: list[Missing] = []
        cluster = "this machine" if capacity.kind == "local" else "the cluster"
        gpu_setting, cpu_setting = self._settings()
        for what, needed, has, setting in (
            ("GPU", self.gpus, capacity.gpus, gpu_setting),
            ("CPU", self.cpus, capacity.cpus, cpu_setting),
        ):
            if needed > has + 1e-9:
                found.append(Missing(setting, f"needs {_count(needed, what)}; {cluster} has {_num(has)}"))
                continue
            biggest = max((b.gpus if what == "GPU" else b.cpus for b in self.bundles), default=0.0)
            largest = max((n.gpus if what == "GPU" else n.cpus for n in capacity.nodes), default=0.0)
            if biggest > largest + 1e-9 and capacity.kind != "local":
                one_node = f"a bundle needs {_count(biggest, what)} on one node"
                found.append(Missing(setting, f"{one_node}; the largest node has {_num(largest)}"))
        return found

    def shortfall(self, capacity: Capacity) -> list[str]:
        """The reasons ``capacity`` can never hold this request, naming what is missing; empty: it fits."""
        return [m.reason for m in self.missing(capacity)]

    def errors(self, capacity: Capacity, seen: str = "") -> dict[str, str]:
        """{setting: the reason and the fix}: a launch refused against the setting that asks for it.
        ``seen``: when the capacity was recorded, said in the message."""
        fix = (
            "lower it or the number of workers (execution.num_learner_workers, num_rollout_workers), "
            "or add nodes"
            if self.backend == "ray"
            else "lower it, or run on the Ray backend with a cluster that has them (execution.backend=ray)"
        )
        errors: dict[str, str] = {}
        for m in self.missing(capacity):
            errors[m.setting] = "; ".join(filter(None, [errors.get(m.setting), m.reason]))
        where = capacity.describe() + (f", seen {seen}" if seen else "")
        return {k: f"{v} ({where}): {fix}" for k, v in errors.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "text": self.describe(),
            "cpus": self.cpus,
            "gpus": self.gpus,
            "gib_per_gpu": None if self.gib_per_gpu is None else round(self.gib_per_gpu, 3),
            "bundles": [{"role": b.role, "CPU": b.cpus, "GPU": b.gpus} for b in self.bundles],
        }

    def _settings(self) -> tuple[str, str]:
        if self.backend == "local":
            return "model.device", "execution.torch_threads"
        return "execution.gpus_per_worker", "execution.cpus_per_worker"


def request_for(cfg: RunConfig, model_config: Mapping[str, Any] | None = None) -> ResourceRequest:
    """What ``cfg`` asks for (module docstring); ``model_config``: the model's config.json, for the memory
    per GPU (left out when absent, or when it does not say enough to plan)."""
    e = cfg.execution
    if e.backend == "local":
        gpus = 1.0 if cfg.model.device == "cuda" else 0.0
        bundles: tuple[Bundle, ...] = (Bundle("process", float(local_cpus(e)), gpus),)
    else:
        roles = [("learner", e.num_learner_workers)]
        if not e.colocate:
            roles.append(("rollout", e.num_rollout_workers))
        bundles = tuple(
            Bundle(role, e.cpus_per_worker, e.gpus_per_worker) for role, n in roles for _ in range(n)
        )
    gib = None
    if model_config is not None and any(b.gpus for b in bundles):
        try:
            gib = estimate(cfg, model_config).total_bytes / GIB
        except PlanError:
            gib = None
    return ResourceRequest(e.backend, bundles, gib)


def _num(value: float) -> str:
    return f"{value:g}"


def _count(value: float, unit: str) -> str:
    return f"{_num(value)} {unit}{'' if value == 1 else 's'}"


class ClusterTooSmall(RuntimeError):
    """A Ray run whose request the cluster can never hold, found at start before anything is placed."""


CapacityListener = Callable[[Capacity], None]
_LISTENERS: list[CapacityListener] = []


def on_capacity(listener: CapacityListener) -> None:
    """Call ``listener`` with every capacity a run of this process sees (the platform's worker records
    it, so the launch form can refuse a run the cluster can never hold). Registered once per process."""
    if listener not in _LISTENERS:
        _LISTENERS.append(listener)


def report_capacity(capacity: Capacity) -> None:
    """Hand the capacity a run just saw to the listeners; a listener's failure never fails the run."""
    for listener in list(_LISTENERS):
        try:
            listener(capacity)
        except Exception:  # noqa: BLE001 - recording is a convenience; the run goes on
            log.warning("recording the cluster's capacity failed", exc_info=True)
