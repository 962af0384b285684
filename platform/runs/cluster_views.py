"""The cluster as people see it: ``/cluster/`` (a page, live over ``/ws/cluster/``) and ``GET /api/cluster/``.

One picture for both (``cluster_view``): the worker slots, each pool (its nodes with their totals, and what
they have free from the worker's Ray snapshot when one was recorded: runs.models.capacity), the runs that
hold room and what each holds (with their Ray placement groups from the snapshot), and the queue in order
with the reason each run waits (runs.scheduling). Runs the viewer may not read (runs.access) show their
number and owner only.

Live: a scheduler pass that changes the queue, and each save of a capacity or snapshot, send
``{"type": "cluster.changed"}`` to the channel group ``cluster`` (runs.cluster_events); each open page's
socket (runs.cluster_consumer) then sends its viewer a fresh picture.
"""

from __future__ import annotations

from typing import Any

from core.openapi import extend_schema
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs.access import visible_runs
from runs.models import ClusterCapacity, Run, Status
from runs.scheduling import ACTIVE, POOLS, Need, load_state, queue_view


def cluster_view(user: Any) -> dict[str, Any]:
    """The cluster page's data (module docstring), for ``user``."""
    state = load_state()
    active = list(Run.objects.filter(ACTIVE).select_related("owner").order_by("dispatched_at", "id"))
    readable = set(visible_runs(user).filter(pk__in=[r.pk for r in active]).values_list("pk", flat=True))
    rows = {row.kind: row for row in ClusterCapacity.objects.all()}
    groups = [g for row in rows.values() for g in (row.state or {}).get("groups", []) if isinstance(g, dict)]
    return {
        "slots": {"total": state.slots, "busy": state.busy},
        "pools": [_pool(name, rows.get(name), state.pools[name]) for name in POOLS],
        "running": [_holder(run, run.pk in readable, user, groups) for run in active],
        "queue": queue_view(user),
    }


def _pool(name: str, row: ClusterCapacity | None, pool: Any) -> dict[str, Any]:
    snapshot = (row.state or {}) if row is not None else {}
    nodes = [_node(n) for n in snapshot.get("nodes", []) if isinstance(n, dict)]
    if not nodes and row is not None:
        nodes = [
            {
                "node_id": "",
                "host": "",
                "alive": True,
                "total": {"CPU": n.cpus, "GPU": n.gpus},
                "available": None,
            }
            for n in row.capacity.nodes
        ]
    return {
        "name": name,
        "recorded": row is not None and bool(row.nodes),
        "describe": row.capacity.describe() if row is not None and row.nodes else None,
        "seen_at": row.seen_at.isoformat() if row is not None else None,
        "seen_by": row.seen_by if row is not None else "",
        "address": snapshot.get("address", ""),
        "total": {"cpus": pool.total_cpus, "gpus": pool.total_gpus},
        "held": {"cpus": pool.held_cpus, "gpus": pool.held_gpus},
        "free": {"cpus": pool.free_cpus, "gpus": pool.free_gpus},
        "nodes": nodes,
    }


def _node(n: dict[str, Any]) -> dict[str, Any]:
    return {
        "node_id": str(n.get("node_id", "")),
        "host": str(n.get("host", "")),
        "alive": bool(n.get("alive", True)),
        "total": n.get("total") if isinstance(n.get("total"), dict) else {},
        "available": n.get("available") if isinstance(n.get("available"), dict) else None,
    }


def _holder(run: Run, readable: bool, user: Any, groups: list[dict[str, Any]]) -> dict[str, Any]:
    need = Need.of(run)
    out: dict[str, Any] = {
        "id": run.pk,
        "owner": run.owner.get_username(),
        "pool": need.pool,
        "status": "running" if run.status == Status.RUNNING else "dispatched",
        "holds": {"cpus": need.cpus, "gpus": need.gpus},
        "priority": run.priority,
        "groups": [_group(g) for g in groups if g.get("run_id") == run.pk],
    }
    if readable:
        out |= {
            "name": run.name,
            "needs": need.text,
            "step": run.step,
            "total_steps": run.total_steps,
            "preempt_requested": run.preempt_requested,
        }
    return out


def _group(g: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": str(g.get("name", "")),
        "role": str(g.get("role", "")),
        "state": str(g.get("state", "")),
        "bundles": g.get("bundles") if isinstance(g.get("bundles"), list) else [],
        "node_ids": g.get("node_ids") if isinstance(g.get("node_ids"), list) else [],
    }


@require_GET
def cluster_page(request: HttpRequest) -> HttpResponse:
    context = {"data": cluster_view(request.user), "is_staff": request.user.is_staff}
    context["reaper_s"] = settings.DAPO_REAPER_INTERVAL_S
    return render(request, "runs/cluster.html", context)


class ClusterSerializer(serializers.Serializer):
    """The shape of GET /api/cluster/ (for the schema; the view builds the JSON itself)."""

    slots = serializers.DictField(help_text='{"total": worker slots, "busy": runs dispatched or running}')
    pools = serializers.ListField(
        child=serializers.DictField(),
        help_text="local and ray: nodes (total, available, alive), total/held/free CPUs and GPUs",
    )
    running = serializers.ListField(
        child=serializers.DictField(), help_text="runs dispatched or running: what each holds, Ray groups"
    )
    queue = serializers.ListField(
        child=serializers.DictField(), help_text="waiting runs in order: position, pool, needs, reason"
    )


class ClusterDetail(APIView):
    serializer_class = ClusterSerializer

    @extend_schema(responses={200: ClusterSerializer})
    def get(self, request: Request) -> Response:
        """The cluster: worker slots, pools with their nodes and free resources, the runs that hold room,
        and the queue in order with why each run waits. Others' runs you may not read show their number
        and owner only."""
        return Response(cluster_view(request.user))
