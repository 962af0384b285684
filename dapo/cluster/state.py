"""What a Ray cluster holds right now, from Ray's own state (no dashboard needed): its nodes, their total and
free CPUs and GPUs, and the placement groups with the node of every bundle.

``snapshot(ray)`` is the one schema the platform stores and shows (its cluster page):

    {"address": "10.0.0.1:6379",
     "nodes": [{"node_id", "host", "alive": bool, "total": {"CPU", "GPU"}, "available": {"CPU", "GPU"}}],
     "groups": [{"name", "run_id": int | None, "role", "state", "bundles": [{"CPU", "GPU"}], "node_ids"}]}

A run's placement groups are named ``dapo-run-<label>-<role>`` (``group_name``; the Ray backend's label is its
run directory's name, which the platform's worker names by the run id), so a group maps back to the run that
holds it: ``run_id`` is the label when it is a number, None for groups of headless runs and of other Ray
users. Removed groups hold nothing and are left out.

A node that dies takes the workers placed on it along: ``lost_workers`` reads which of a run's nodes Ray
reports dead (its alive flags, never an error's text) and ``describe_loss`` words the ``NodeLost`` the run
then fails with (the Ray backend, dapo.cluster.ray_backend; the platform queues such a run again).

Why Ray's GCS tables and not ``ray.util.state``: the list_* calls go through the dashboard, which the local
Ray we start and many clusters run without. ``ray.nodes()`` and the placement group table come from the GCS.

Also a command line, the platform worker's window on a cluster (worker/cluster_state.py): it joins
RAY_ADDRESS once and answers every line on stdin with one JSON line, a snapshot or {"error": "..."}:

    python -m dapo.cluster.state
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

GROUP_PREFIX = "dapo-run-"
ROLES = ("learner", "rollout")
_NAME = re.compile(rf"^{GROUP_PREFIX}(?P<label>.+)-(?P<role>{'|'.join(ROLES)})$")


def group_name(label: str, role: str) -> str:
    """The placement group of ``role``'s workers of the run labelled ``label``: ``dapo-run-12-learner``."""
    return f"{GROUP_PREFIX}{label}-{role}"


def parse_group_name(name: str) -> tuple[int | None, str | None]:
    """(run id, role) of a placement group's name; (None, role) for a run whose label is not a run id,
    (None, None) for a group that is not a DAPO run's."""
    match = _NAME.match(name or "")
    if match is None:
        return None, None
    label = match["label"]
    return (int(label) if label.isdigit() else None), match["role"]


def _cpu_gpu(resources: dict[str, Any]) -> dict[str, float]:
    return {"CPU": float(resources.get("CPU", 0.0)), "GPU": float(resources.get("GPU", 0.0))}


def nodes(ray: Any) -> list[dict[str, Any]]:
    """Every node Ray knows, dead ones too (``alive`` False), with its totals and what is free now. What
    placement groups reserve counts as taken (Ray moves it into the groups' own resources). The free figures
    are the GCS's view, which each raylet updates a moment after it reserves or frees something: right after
    a group is ready its bundles can still show as free in one snapshot."""
    from ray._private.state import available_resources_per_node  # only live nodes report

    free = available_resources_per_node()
    found = []
    for node in ray.nodes():
        node_id = node["NodeID"]
        alive = bool(node.get("Alive", False))
        found.append(
            {
                "node_id": node_id,
                "host": node.get("NodeManagerHostname") or node.get("NodeManagerAddress", ""),
                "alive": alive,
                "total": _cpu_gpu(node.get("Resources", {})),
                "available": _cpu_gpu(free.get(node_id, {})) if alive else {"CPU": 0.0, "GPU": 0.0},
            }
        )
    return found


def groups(ray: Any) -> list[dict[str, Any]]:
    """Every placement group that is not removed, with its run (when it is a DAPO run's), in Ray's order."""
    found = []
    for info in ray.util.placement_group_table().values():
        if info.get("state") == "REMOVED":
            continue
        run_id, role = parse_group_name(info.get("name", ""))
        indexes = sorted(info.get("bundles", {}))
        on = info.get("bundles_to_node_id", {})
        found.append(
            {
                "name": info.get("name", ""),
                "run_id": run_id,
                "role": role,
                "state": info.get("state", ""),
                "bundles": [_cpu_gpu(info["bundles"][i]) for i in indexes],
                "node_ids": [_placed_on(on.get(i)) for i in indexes],
            }
        )
    return found


def _placed_on(node_id: str | None) -> str | None:
    """A bundle's node; None while it waits for one (Ray reports the nil id, all f's or all 0's)."""
    return node_id if node_id and node_id.strip("f0") else None


def bundle_nodes(ray: Any, group: Any) -> list[str | None]:
    """The node of each bundle of a placement group, in bundle order (None: not placed)."""
    info = ray.util.placement_group_table(group)
    on = info.get("bundles_to_node_id", {})
    return [_placed_on(on.get(i)) for i in sorted(info.get("bundles", {}))]


def dead_nodes(ray: Any, among: Iterable[str | None]) -> dict[str, str]:
    """{node id: host} of the nodes in ``among`` that Ray reports dead (its ``Alive`` flag, set once the
    GCS's health checks of the node's raylet fail)."""
    wanted = {n for n in among if n}
    return {
        n["NodeID"]: n.get("NodeManagerHostname") or n.get("NodeManagerAddress", "")
        for n in ray.nodes()
        if n["NodeID"] in wanted and not n.get("Alive", False)
    }


class NodeLost(RuntimeError):
    """A Ray node died with some of the run's workers, and Ray could not place them again within the
    placement timeout (the cluster cannot hold the run without that node). The run is not broken: it can
    resume from its last checkpoint once the cluster holds it again, which the platform does
    (``is_node_loss``)."""


Lost = dict[str, tuple[str, list[str]]]
"""{node id: (host, ["learner 0", ...])}: the dead nodes a run's workers were on, and those workers."""


def lost_workers(ray: Any, placed: dict[str, list[str | None]], wait_s: float) -> Lost:
    """Which of a run's workers (``placed``: each role's bundles' nodes) were on nodes that died, asked of
    Ray until it names one or ``wait_s`` passed (a node is called dead only after failed health checks);
    empty when none died or Ray cannot tell."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            dead = dead_nodes(ray, [n for nodes in placed.values() for n in nodes])
        except Exception as exc:  # noqa: BLE001 - Ray itself is gone: the caller's failure stands
            log.debug("cannot ask Ray which nodes died: %s", exc)
            return {}
        if dead or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    lost: Lost = {}
    for role, nodes in placed.items():
        for rank, node in enumerate(nodes):
            if node in dead:
                lost.setdefault(node, (dead[node], []))[1].append(f"{role} {rank}")
    return lost


def describe_loss(what: str, lost: Lost, cause: BaseException) -> str:
    """The message of a NodeLost (dapo.cluster.backends): which node, on which host, with which workers."""
    nodes = "; ".join(f"node {n} on {host} (with {', '.join(w)})" for n, (host, w) in lost.items())
    text = str(cause).strip()
    first = text.splitlines()[0] if text else ""
    return (
        f"{nodes} died during {what}, and the run's workers could not be placed on the nodes left "
        f"({type(cause).__name__}: {first}). Resume the run from its last checkpoint when the cluster can "
        "hold it again (the platform queues it again by itself), or add a node."
    )


def snapshot(ray: Any) -> dict[str, Any]:
    """The cluster this process joined, in the module docstring's schema."""
    return {
        "address": ray.get_runtime_context().gcs_address,
        "nodes": nodes(ray),
        "groups": groups(ray),
    }


def serve(stdin: Any = None, answers: Any = None) -> int:
    """Join RAY_ADDRESS's cluster (never start one), then answer each line of stdin with a JSON line on
    stdout. What Ray itself prints (its drivers get the cluster's error messages) goes to stderr, so that
    stdout carries the answers only."""
    import os

    from dapo.cluster.ray_cluster import check_reachable

    if answers is None:
        answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # fd 1 is stderr now: Ray's prints go there
    stdin = sys.stdin if stdin is None else stdin

    def answer(record: dict[str, Any]) -> None:
        print(json.dumps(record), file=answers, flush=True)

    address = os.environ.get("RAY_ADDRESS", "").strip()
    if not address:
        answer({"error": "RAY_ADDRESS is not set: there is no cluster to look at"})
        return 2
    try:
        check_reachable(address)
        import ray

        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except Exception as e:  # noqa: BLE001 - said to the caller, who logs it once per outage
        answer({"error": f"{type(e).__name__}: {e}"})
        return 1
    for _ in stdin:
        try:
            answer(snapshot(ray))
        except Exception as e:  # noqa: BLE001 - a GCS that went away: say so, the caller decides
            answer({"error": f"{type(e).__name__}: {e}"})
    return 0


if __name__ == "__main__":
    raise SystemExit(serve())
