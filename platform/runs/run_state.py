"""What the pages, the API and the live events show of a run: its state as JSON, with the markers where its
curves change hands (a fork, each resume)."""

from __future__ import annotations

from typing import Any

from runs.models import Run, Status


def run_state(run: Run) -> dict[str, Any]:
    """What pages and events show of a run (JSON-ready)."""
    return {
        "id": run.pk,
        "name": run.name,
        "kind": run.kind,
        "source": run.source,  # "" this platform's, "trl" or "verl": an external run (runs.external)
        "status": run.status,
        "step": run.step,
        "total_steps": run.total_steps,
        "progress": run.progress,
        "error": run.error,
        "cancel_requested": run.cancel_requested,
        "stalled": run.status == Status.RUNNING and run.stalled_at is not None,
        "can_cancel": run.can_cancel,
        "can_resume": run.can_resume,
        "created_at": run.created_at.isoformat() if run.created_at else None,
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "elapsed_s": run.elapsed_s(),  # wall time since the first start: queued and cancelled time included
        "running_s": run.running_s(),  # time the run's attempts ran (Run.running_s)
        "eta_s": run.eta_s(),  # at the running time's pace
        "last_checkpoint_step": run.last_checkpoint_step,
        "latest_metrics": run.latest_metrics,
        "tags": list(run.tags or []),
        "archived": run.archived,
        "markers": markers(run),
        "priority": run.priority,  # higher first in the queue (runs.scheduling)
        "preempt_requested": run.preempt_requested,
        "preemptions": run.preemptions,
    }


def markers(run: Run) -> list[dict[str, Any]]:
    """Where the curves change hands: the step a fork starts after, and each resume from a checkpoint."""
    out = []
    if run.parent_id is not None and run.fork_step is not None:
        out.append(
            {
                "step": run.fork_step,
                "kind": "fork",
                "label": f"forked from #{run.parent_id} at step {run.fork_step}",
            }
        )
    for step in run.resumed_steps or []:
        out.append({"step": step - 1, "kind": "resume", "label": f"resumed after step {step - 1}"})
    return out
