"""dapo.cluster.resources: what a run asks for, from its config alone."""

from __future__ import annotations

from dapo.cluster.resources import local_cpus
from dapo.runconfig.presets import tiny_cpu
from dapo.runconfig.sections import ExecutionConfig


def test_a_local_run_asks_for_its_torch_threads_else_its_cpus_per_worker_rounded_up():
    assert local_cpus(tiny_cpu().execution) == 1  # the demo preset: one CPU, so two runs fit two cores
    assert local_cpus(ExecutionConfig(torch_threads=3, cpus_per_worker=8)) == 3
    assert local_cpus(ExecutionConfig(cpus_per_worker=2.5)) == 3
    assert local_cpus(ExecutionConfig(cpus_per_worker=0)) == 1  # a process runs on one CPU at least
