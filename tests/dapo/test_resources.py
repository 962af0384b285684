"""dapo.cluster.resources: what a run asks for, from its config alone, and what a cluster lacks to hold it."""

from __future__ import annotations

import pytest

from dapo.cluster.resources import Capacity, Node, local_cpus, ray_bundle, request_for
from dapo.learner.memory_plan import GIB, estimate
from dapo.runconfig.presets import get_preset, tiny_cpu
from dapo.runconfig.sections import ExecutionConfig
from tests.dapo.test_memory_plan import QWEN7B

RAY = {"execution.backend": "ray", "execution.cpus_per_worker": 4, "execution.gpus_per_worker": 1}


def cluster(*nodes: tuple[float, float]) -> Capacity:
    return Capacity("ray", tuple(Node(cpus, gpus) for cpus, gpus in nodes))


def test_a_local_run_asks_for_its_torch_threads_else_its_cpus_per_worker_rounded_up():
    assert local_cpus(tiny_cpu().execution) == 1  # the demo preset: one CPU, so two runs fit two cores
    assert local_cpus(ExecutionConfig(torch_threads=3, cpus_per_worker=8)) == 3
    assert local_cpus(ExecutionConfig(cpus_per_worker=2.5)) == 3
    assert local_cpus(ExecutionConfig(cpus_per_worker=0)) == 1  # a process runs on one CPU at least


def test_a_local_run_is_one_bundle_in_the_workers_process():
    request = request_for(tiny_cpu())
    assert [(b.role, b.cpus, b.gpus) for b in request.bundles] == [("process", 1.0, 0.0)]
    assert request.describe() == "needs 1 CPU (in the worker's process)"
    on_gpu = request_for(tiny_cpu().with_overrides({"model.device": "cuda", "execution.torch_threads": 4}))
    assert (on_gpu.cpus, on_gpu.gpus) == (4, 1)
    assert on_gpu.describe() == "needs 1 GPU, 4 CPUs (in the worker's process)"  # no config.json: no memory


def test_colocated_ray_learners_are_one_bundle_each():
    request = request_for(tiny_cpu().with_overrides({**RAY, "execution.num_learner_workers": 2}))
    assert request.ray_bundles("learner") == [{"CPU": 4.0, "GPU": 1.0}] * 2
    assert request.ray_bundles("rollout") == []  # colocated: the learners generate
    assert (request.cpus, request.gpus) == (8, 2)
    assert request.describe() == "needs 2 GPUs, 8 CPUs (2 Ray actors)"


def test_separate_rollout_workers_add_their_bundles():
    overrides = {**RAY, "execution.colocate": False, "execution.num_rollout_workers": 3}
    request = request_for(tiny_cpu().with_overrides(overrides))
    assert len(request.ray_bundles("learner")) == 1 and len(request.ray_bundles("rollout")) == 3
    assert (request.cpus, request.gpus) == (16, 4)
    cpu_only = request_for(tiny_cpu().with_overrides({**overrides, "execution.gpus_per_worker": 0.0}))
    assert cpu_only.describe() == "needs 16 CPUs (4 Ray actors)"
    assert ray_bundle(0, 0) == {"CPU": 0.01}  # Ray needs one resource in a bundle
    assert ray_bundle(0.5, 0.25) == {"CPU": 0.5, "GPU": 0.25}


def test_a_gpu_runs_memory_per_gpu_comes_from_the_memory_plan():
    config = tiny_cpu().with_overrides({**RAY, "model.device": "cuda", "model.dtype": "bfloat16"})
    request = request_for(config, QWEN7B)
    assert request.gib_per_gpu == pytest.approx(estimate(config, QWEN7B).total_bytes / GIB)
    assert request.describe() == f"needs 1 GPU, 4 CPUs, ~{request.gib_per_gpu:.1f} GiB per GPU (1 Ray actor)"
    assert request_for(tiny_cpu(), QWEN7B).gib_per_gpu is None  # no GPU: no memory per GPU
    assert request_for(config, {"architectures": ["LlamaForCausalLM"]}).gib_per_gpu is None  # no sizes


def test_the_shortfall_names_what_the_cluster_lacks():
    four = request_for(tiny_cpu().with_overrides({**RAY, "execution.num_learner_workers": 4}))
    assert four.shortfall(cluster((8, 1), (8, 1))) == ["needs 4 GPUs; the cluster has 2"]
    assert four.shortfall(cluster((64, 4))) == []
    assert four.shortfall(cluster((2, 2), (2, 2))) == ["needs 16 CPUs; the cluster has 4"]
    two_per_actor = request_for(tiny_cpu().with_overrides({**RAY, "execution.gpus_per_worker": 2}))
    assert two_per_actor.shortfall(cluster((8, 1), (8, 1))) == [
        "a bundle needs 2 GPUs on one node; the largest node has 1"
    ]
    errors = two_per_actor.errors(cluster((8, 1), (8, 1)))
    assert list(errors) == ["execution.gpus_per_worker"]
    assert errors["execution.gpus_per_worker"].startswith(
        "a bundle needs 2 GPUs on one node; the largest node has 1 (2 nodes: 2 GPUs, 16 CPUs): lower it"
    )


def test_a_local_run_is_held_to_the_workers_machine():
    machine = Capacity("local", (Node(2, 0),))
    assert request_for(tiny_cpu()).shortfall(machine) == []
    greedy = request_for(tiny_cpu().with_overrides({"execution.torch_threads": 4, "model.device": "cuda"}))
    assert greedy.shortfall(machine) == [
        "needs 1 GPU; this machine has 0",
        "needs 4 CPUs; this machine has 2",
    ]
    assert set(greedy.errors(machine)) == {"model.device", "execution.torch_threads"}


def test_a_capacity_survives_the_database_and_reads_ray_nodes():
    nodes = [
        {"Alive": True, "Resources": {"CPU": 8.0, "GPU": 2.0, "memory": 1e10}},
        {"Alive": False, "Resources": {"CPU": 64.0, "GPU": 8.0}},  # a dead node holds nothing
        {"Alive": True, "Resources": {"CPU": 2.0}},
    ]
    seen = Capacity.from_ray_nodes(nodes)
    assert seen == cluster((8, 2), (2, 0)) and (seen.cpus, seen.gpus) == (10, 2)
    assert Capacity.from_dict(seen.to_dict()) == seen
    assert seen.describe() == "2 nodes: 2 GPUs, 10 CPUs"


def test_the_papers_run_asks_for_its_128_gpus():
    paper = request_for(get_preset("paper_qwen32b"))
    assert paper.describe() == "needs 128 GPUs, 1024 CPUs (128 Ray actors)"
