"""What a run asks of the machine or cluster it runs on, from its config alone (no torch, no Ray).

A run on the local backend is one process: it asks for ``local_cpus`` CPUs and runs torch on that many
threads, so several runs on one worker (``DAPO_TRAINING_CONCURRENCY``) share the cores instead of each
starting a thread per core.
"""

from __future__ import annotations

import math

from dapo.runconfig.sections import ExecutionConfig


def local_cpus(execution: ExecutionConfig) -> int:
    """A local run's CPUs and torch threads: ``torch_threads`` when set, else ``cpus_per_worker`` rounded
    up, at least one (the demo's ``tiny_cpu`` asks for one)."""
    return execution.torch_threads or max(1, math.ceil(execution.cpus_per_worker))
