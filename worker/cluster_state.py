"""What the shared Ray cluster holds, recorded every reaper pass for the platform's cluster page and queue.

A worker configured for an existing cluster (``RAY_ADDRESS``; never for a local Ray, which exists only while
a run holds it) records the live nodes' totals (``ClusterCapacity.record``: the scheduler admits runs by
them, so a dead node's GPUs stop counting at the next pass) and the snapshot (``record_state``): every node
with its total and free CPUs and GPUs, and every placement group with the run that holds it
(dapo.cluster.state), for the cluster page.

Why a child process (``python -m dapo.cluster.state``) rather than ``ray.init`` here: this is the Celery
worker's main process, which forks the pool's processes (a process that joined Ray must not fork) and
whose run controllers, in the solo pool, own their own Ray connection. The child joins once and answers
one JSON line per request; a Ray that does not answer within ``ANSWER_TIMEOUT_S`` is logged once per
outage, the child is replaced on the next pass, and the reaper goes on.
"""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from runs.models import ClusterCapacity

from dapo.cluster.resources import Capacity
from worker.sink import DB_ERRORS, drop_connection

log = logging.getLogger(__name__)

ANSWER_TIMEOUT_S = 20.0
"""How long one pass waits for the child's snapshot (its first answer includes joining the cluster)."""
REPO = Path(__file__).resolve().parents[1]


class ClusterWatcher:
    """The child process that looks at the cluster, and whether the last look failed (to log once)."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[str] | None = None
        self.outage: str | None = None
        """Why the last pass got no snapshot (None: it got one)."""

    def look(self) -> dict[str, Any]:
        """A snapshot of the cluster; raises RuntimeError saying why there is none."""
        child = self._child()
        assert child.stdin is not None and child.stdout is not None
        try:
            child.stdin.write("\n")
            child.stdin.flush()
        except OSError:
            pass  # it exited: its last words, if any, are on stdout
        ready, _, _ = select.select([child.stdout], [], [], ANSWER_TIMEOUT_S)
        line = child.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise RuntimeError(f"no answer from the Ray cluster within {ANSWER_TIMEOUT_S:.0f} s")
        answer = json.loads(line)
        if "error" in answer:
            self.close()
            raise RuntimeError(answer["error"])
        return answer

    def _child(self) -> subprocess.Popen[str]:
        if self.child is None or self.child.poll() is not None:
            env = {**os.environ, "RAY_ADDRESS": settings.RAY_ADDRESS}
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
            self.child = subprocess.Popen(
                [sys.executable, "-m", "dapo.cluster.state"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                cwd=REPO,
                env=env,
            )
        return self.child

    def close(self) -> None:
        if self.child is not None:
            if self.child.poll() is None:
                self.child.kill()
            self.child.wait(timeout=10)
            self.child = None


WATCHER = ClusterWatcher()


def record_cluster_state(watcher: ClusterWatcher = WATCHER) -> dict[str, Any] | None:
    """One look at RAY_ADDRESS's cluster, recorded; returns the snapshot, or None without a cluster or
    without an answer (logged once per outage). Never raises: it runs in the reaper's pass."""
    if not settings.RAY_ADDRESS:
        return None
    try:
        state = watcher.look()
    except Exception as e:  # noqa: BLE001 - the reaper must go on whatever the cluster does
        if watcher.outage is None:
            log.warning("the Ray cluster at RAY_ADDRESS=%s cannot be seen: %s", settings.RAY_ADDRESS, e)
        watcher.outage = str(e)
        return None
    if watcher.outage is not None:
        log.warning("the Ray cluster at RAY_ADDRESS=%s answers again", settings.RAY_ADDRESS)
        watcher.outage = None
    try:
        nodes = state["nodes"]
        capacity = Capacity.from_ray_nodes({"Alive": n["alive"], "Resources": n["total"]} for n in nodes)
        seen_by = f"{socket.gethostname()}:{os.getpid()}"
        with transaction.atomic():  # the totals and the picture of one look, together
            ClusterCapacity.record(capacity, seen_by=seen_by)
            ClusterCapacity.record_state(capacity.kind, state, seen_by=seen_by)
    except DB_ERRORS as e:
        log.warning("recording the Ray cluster's state failed (%s); the next pass tries again", e)
    except Exception:  # noqa: BLE001 - an error here must not end the reaper's thread
        log.exception("recording the Ray cluster's state failed")
    finally:
        drop_connection()  # the reaper thread's: none is left open between passes
    return state
