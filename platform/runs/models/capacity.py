"""The cluster runs are placed on, as a training worker last saw it: one row per kind, ``local`` (the
worker's own machine: its CPUs, and its GPUs when torch sees CUDA) and ``ray`` (every live node of the Ray
cluster, from ``ray.nodes()`` after the run connected). A worker records it each time it starts a run.

The launch (form and API, ``runs.configuring``) refuses a run whose request
(``dapo.cluster.resources.request_for``) the last recorded capacity can never hold. With no row yet, it
launches, and the plan panel says that nothing was checked.

``state`` is the live picture of a Ray cluster (recorded by the worker: ``record_state``): its nodes
with what they hold and have free, and the placement groups of the runs; the cluster page
(runs.cluster_views) shows it. Schema::

    {"address": str,
     "nodes": [{"node_id", "host", "alive": bool, "total": {"CPU": f, "GPU": f}, "available": {...}}],
     "groups": [{"name", "run_id": int | None, "role", "state", "bundles": [{...}], "node_ids": [...]}]}

Each save tells the open cluster pages (runs.cluster_events).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models
from django.utils import timezone

from dapo.cluster.resources import Capacity
from runs.cluster_events import changed


class ClusterCapacity(models.Model):
    kind = models.CharField(max_length=10, unique=True, help_text="local (a worker's machine) or ray.")
    nodes = models.JSONField(default=list, help_text='[{"cpus": 8, "gpus": 2}, ...]: each node\'s totals.')
    seen_at = models.DateTimeField(default=timezone.now)
    seen_by = models.CharField(max_length=200, blank=True, help_text="The worker (host:pid) that saw it.")
    state = models.JSONField(
        default=dict,
        blank=True,
        help_text="The Ray cluster's nodes and placement groups as last seen (schema: runs.models.capacity).",
    )

    class Meta:
        verbose_name_plural = "cluster capacities"

    def __str__(self) -> str:
        return f"{self.capacity.describe()} (seen {self.seen_at:%Y-%m-%d %H:%M})"

    @property
    def capacity(self) -> Capacity:
        return Capacity.from_dict({"kind": self.kind, "nodes": self.nodes})

    @classmethod
    def record(cls, capacity: Capacity, seen_by: str = "") -> None:
        """Keep ``capacity`` as the newest of its kind."""
        nodes = capacity.to_dict()["nodes"]
        cls.objects.update_or_create(
            kind=capacity.kind, defaults={"nodes": nodes, "seen_at": timezone.now(), "seen_by": seen_by}
        )
        changed()

    @classmethod
    def record_state(cls, kind: str, state: dict[str, Any], seen_by: str = "") -> None:
        """Keep ``state`` (the schema in the module docstring) as the newest live picture of ``kind``; the
        node totals stay those of the last ``record``."""
        row, _ = cls.objects.get_or_create(kind=kind)
        row.state, row.seen_at, row.seen_by = state, timezone.now(), seen_by or row.seen_by
        row.save(update_fields=["state", "seen_at", "seen_by"])
        changed()

    @classmethod
    def latest(cls, kind: str) -> tuple[Capacity, datetime] | None:
        """The last capacity of ``kind`` a worker recorded and when, or None when none has yet."""
        row = cls.objects.filter(kind=kind).first()
        return (row.capacity, row.seen_at) if row is not None else None
