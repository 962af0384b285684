"""Where a fork or a resume starts: only from a checkpoint whose weights are still on disk.

A run keeps its newest ``checkpoint.keep_last`` checkpoints and deletes the older ones, but their rows stay
(they name the steps a run passed through). The fork form therefore offers only the checkpoints still on
disk and names the pruned ones; the form is checked again when posted, the Resume button before it queues
the run, and the worker once more when it starts (a checkpoint can be pruned in between).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runs.models import Checkpoint


def on_disk(path: str) -> bool:
    """Whether a checkpoint folder still holds its weights (its ``state.pt``)."""
    return bool(path) and (Path(path) / "state.pt").is_file()


def fork_choices(run: Any) -> tuple[list[Checkpoint], list[int]]:
    """The run's checkpoints still on disk (newest first) and the steps of those pruned (newest first)."""
    available: list[Checkpoint] = []
    pruned: list[int] = []
    for checkpoint in run.checkpoints.order_by("-step"):
        if on_disk(checkpoint.path):
            available.append(checkpoint)
        else:
            pruned.append(checkpoint.step)
    return available, pruned


def fork_problem(checkpoint: Checkpoint) -> str | None:
    """Why a fork cannot start from ``checkpoint`` (pruned since the form was shown), or None."""
    if on_disk(checkpoint.path):
        return None
    return (
        f"the checkpoint of step {checkpoint.step} is no longer on disk (pruned by checkpoint.keep_last "
        "or deleted); pick one that is listed"
    )


def resume_step(run: Any) -> tuple[int | None, str]:
    """(the step a resume of ``run`` starts from, "") or (None, why it cannot be resumed).

    Its own newest recorded checkpoint still on disk (the worker resumes from the recorded one, or the
    newest left when that was deleted); a fork that saved none of its own starts again from its parent's
    checkpoint, which must still be there. Read afresh: a run deleted meanwhile raises ``RunGone`` (404)."""
    run.reload()
    if not run.can_resume:
        return None, "Only a failed or cancelled run with a checkpoint can be resumed."
    if run.last_checkpoint:
        steps = [c.step for c in run.checkpoints.order_by("-step") if on_disk(c.path)]
        if run.last_checkpoint_step in steps:
            return run.last_checkpoint_step, ""
        if steps:
            return steps[0], ""
        return None, (
            "None of this run's checkpoints is left on disk, so it cannot be resumed: "
            "use Clone & edit to start it again."
        )
    if on_disk(run.source_checkpoint):
        return run.fork_step, ""
    return None, (
        f"The parent's checkpoint of step {run.fork_step} that this fork starts from is no longer on disk "
        "(pruned or deleted): fork the parent again from a checkpoint it still has."
    )
