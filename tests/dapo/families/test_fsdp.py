"""FSDP wrapping, every family in one run of two CPU learners (gloo): the sharded model computes the
plain forward's log-probs and averaged gradients, and gathers back to the unsharded weights.

One pair of processes for the whole matrix (starting them costs more than all the families' work). Each
rank shards each family as a learner does (``dapo.learner.fsdp.shard_model``: one unit per decoder
layer, then the root) and runs the update's log-probs (``response_logprobs``) on its half of the rows;
FSDP averages the two halves' gradients. Rank 0 compares with the unsharded model on both halves and
writes the largest differences per family; the test reads them.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch

from tests.dapo.families.matrix import FAMILIES, PAD, TEMPERATURE, build, rows

WORLD = 2


def _halves() -> list[tuple[list[list[int]], list[list[int]]]]:
    prompts, responses = rows(seed=3)
    return [(prompts[r::WORLD], responses[r::WORLD]) for r in range(WORLD)]


def _loss(model, prompts: list[list[int]], responses: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    from dapo.learner.modeling import pack, response_logprobs

    batch = pack(prompts, responses, PAD, torch.device("cpu"))
    logp, entropy = response_logprobs(model, batch, temperature=TEMPERATURE, with_entropy=True)
    assert entropy is not None
    return (logp * 1.3 + entropy * 0.7).sum(), logp.detach()


def _family_errors(name: str, rank: int) -> dict[str, float]:
    from torch.distributed.tensor import DTensor

    from dapo.learner.fsdp import full_state, shard_model

    reference, sharded = build(name).train(), build(name).train()
    shard_model(sharded, torch.device("cpu"))
    mine = _halves()[rank]
    loss, logp = _loss(sharded, *mine)
    loss.backward()
    grads = {n: p.grad.full_tensor() for n, p in sharded.named_parameters() if isinstance(p.grad, DTensor)}
    weights = dict(full_state(sharded))  # a collective: both ranks gather
    if rank != 0:
        return {}
    total = sum(_loss(reference, *half)[0] for half in _halves()) / WORLD  # FSDP averages the ranks
    total.backward()
    want_logp = _loss(reference, *mine)[1]
    return {
        "logp": (logp - want_logp).abs().max().item(),
        "grad": max((grads[n] - p.grad).abs().max().item() for n, p in reference.named_parameters()),
        "grad_scale": max(p.grad.abs().max().item() for p in reference.parameters()),
        "grads_missing": float(len([n for n, _ in reference.named_parameters() if n not in grads])),
        "weights": max((weights[k] - v).abs().max().item() for k, v in reference.state_dict().items()),
    }


def _rank_main(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        errors = {family.name: _family_errors(family.name, rank) for family in FAMILIES}
        if rank == 0:
            Path(out).write_text(json.dumps(errors))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def fsdp_errors(tmp_path_factory) -> dict[str, dict[str, float]]:
    import torch.multiprocessing as mp

    import dapo.learner.fsdp  # noqa: F401 - with torch's FSDP: imported here once, for both ranks
    from dapo.cluster.ray_cluster import free_port

    out = tmp_path_factory.mktemp("fsdp-families") / "errors.json"
    for family in FAMILIES:  # the models' modules are imported (and the models built) here once too
        build(family.name)
    # Forked, not spawned: a spawned learner imports torch, transformers and FSDP again (20-40 s on a
    # busy 2-core machine); the ranks run torch on one thread and this process holds no process group.
    context = mp.start_processes(
        _rank_main, args=(free_port(), str(out)), nprocs=WORLD, join=False, start_method="fork"
    )
    deadline = time.monotonic() + 300  # a stuck rank fails the test instead of holding the suite
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail("the two FSDP ranks did not finish in 300 s")
    return json.loads(out.read_text())


def test_two_fsdp_learners_compute_every_familys_log_probs_gradients_and_weights(fsdp_errors):
    assert sorted(fsdp_errors) == sorted(f.name for f in FAMILIES)
    for name, errors in fsdp_errors.items():
        assert errors["grads_missing"] == 0, name
        assert errors["logp"] <= 1e-5, (name, errors)
        assert errors["grad"] <= 1e-5 + 1e-4 * errors["grad_scale"], (name, errors)
        assert errors["grad_scale"] > 1e-3, (name, errors)  # real gradients
        assert errors["weights"] == 0.0, (name, errors)  # gathered bit for bit
