"""The one entry point other parts of the product call to run DAPO: ``run(config, out_dir=..., sinks=...)``.

``config.execution.backend`` picks where the heavy work runs: ``local`` (this process) or ``ray``
(Ray actors; RAY_ADDRESS selects a cluster, unset starts a local Ray). The loop is the same.
"""

from __future__ import annotations

from pathlib import Path

from dapo.loop.report import RunResult, Sink
from dapo.runconfig import RunConfig


def run(
    config: RunConfig,
    *,
    out_dir: str | Path,
    sinks: list[Sink],
    resume: bool = False,
    resume_from: str | Path | None = None,
) -> RunResult:
    """Train ``config`` to ``optim.total_steps`` and return how it ended (it never raises for a failed
    run: the result carries status "failed" and the error, and the sinks got ``on_finish``).

    resume: continue from the newest checkpoint under ``out_dir`` (a fresh start when there is none).
    resume_from: continue from this checkpoint directory instead (a fork of another run).
    """
    from dapo.loop.trainer import Trainer  # imports torch: only when a run actually starts

    return Trainer(config, out_dir, sinks, resume=resume, resume_from=resume_from).fit()
