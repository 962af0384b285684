"""FSDP learners (``execution.learner_strategy = "fsdp"``) on CPU with gloo.

Two ranks are spawned once for the module (``two_ranks``) and run every scenario, each against a
one-process learner on the same batch: the same loss, gradients and updated weights; half the parameter
and optimiser memory per rank; and a resume from an FSDP checkpoint that continues exactly. A last test
trains through the Ray backend with two FSDP learners and checks the run against the one-process run.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from dapo.cluster.ray_shards import merge_updates, shard_update
from dapo.learner.actor import PolicyActor, UpdateBatch
from dapo.learner.fsdp import learner_state_bytes
from dapo.runconfig import ConfigError, ExecutionConfig, RunConfig

WORLD = 2
LR = 1e-3
WEIGHTS = {"rtol": 0.0, "atol": 0.05 * LR}
"""Tolerance on weights after AdamW steps. Adam moves each weight by about lr * g / |g|, so a gradient entry
at float32 rounding level (the two ranks sum in another order) may move its weight by a different fraction
of lr; every other difference stays far below 5% of lr (measured: 1.6% at most)."""
GRADS = {"rtol": 1e-4, "atol": 2e-5}
"""Tolerance on gradients: float32 sums in another order (measured: 6e-6 on entries up to 0.17)."""


def make_batch(seed: int, rows: int = 6, minibatches: int = 2) -> UpdateBatch:
    """Rows of random prompts and responses (uneven lengths) over ``minibatches`` mini-batches; old
    log-probs are filled in by ``with_old_logprobs``."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(3, 40) for _ in range(rng.randint(3, 7))] for _ in range(rows)]
    responses = [[rng.randrange(3, 40) for _ in range(rng.randint(2, 9))] for _ in range(rows)]
    per = rows // minibatches
    minibatch = [i // per for i in range(rows)]
    return UpdateBatch(
        prompts=prompts,
        responses=responses,
        advantages=[rng.uniform(-1.5, 1.5) for _ in range(rows)],
        old_logprobs=[[0.0] * len(r) for r in responses],
        loss_mask=[i != 1 for i in range(rows)],  # one overlong-filtered row
        minibatch=minibatch,
        minibatch_tokens={
            m: sum(len(responses[i]) for i in range(rows) if minibatch[i] == m and i != 1)
            for m in set(minibatch)
        },
        minibatch_seqs={
            m: sum(1 for i in range(rows) if minibatch[i] == m and i != 1) for m in set(minibatch)
        },
        ratio_rows=[0, 3],
    )


def with_old_logprobs(actor: PolicyActor, batch: UpdateBatch, seed: int) -> UpdateBatch:
    """Old log-probs near the current policy's (so some ratios leave the clip range)."""
    logps, _ = actor.compute_logprobs(batch.prompts, batch.responses)
    rng = random.Random(seed)
    old = [[lp + rng.uniform(-0.4, 0.4) for lp in row] for row in logps]
    return replace(batch, old_logprobs=old)


def learner_config(base: RunConfig, strategy: str, offload: bool = False) -> RunConfig:
    e = ExecutionConfig(
        backend="ray" if strategy == "fsdp" else "local",
        learner_strategy=strategy,  # type: ignore[arg-type]
        fsdp_cpu_offload=offload,
        torch_threads=1,
    )
    return replace(base, execution=e, optim=replace(base.optim, grad_clip=1e6, weight_decay=0.01))


def full_grads(actor: PolicyActor) -> dict[str, torch.Tensor]:
    from torch.distributed.tensor import DTensor

    out = {}
    for name, p in actor.model.named_parameters():
        g = p.grad
        out[name] = (g.full_tensor() if isinstance(g, DTensor) else g).detach().clone()
    return out


# ---- the two-rank run ----------------------------------------------------------------------------------


def _rank_main(rank: int, port: int, config: RunConfig, ckpt: str, out_dir: str) -> None:
    """Every scenario on one rank; rank 0 saves what the tests compare. Plain FSDP: one update,
    hand-over, checkpoint, second update, and a fresh learner resumed from the checkpoint; with CPU
    offload: the first update."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        batch1, batch2 = torch.load(Path(out_dir) / "batches.pt", weights_only=False)
        shard1, shard2 = shard_update(batch1, WORLD)[rank][0], shard_update(batch2, WORLD)[rank][0]
        result: dict[str, Any] = {}
        for key in ("plain", "offload"):
            actor = PolicyActor(learner_config(config, "fsdp", key == "offload"), rank=rank, world_size=WORLD)
            run = result[key] = _first_update(actor, batch1, shard1)
            if key == "offload":
                run["state"] = actor.state_dict()
                continue
            run["engine"] = {k: v.clone() for k, v in actor.engine.model.state_dict().items()}
            actor.after_update()  # the engine's own copy gets the gathered weights
            run["engine_after"] = {k: v.clone() for k, v in actor.engine.model.state_dict().items()}
            run["state"] = actor.state_dict()
            if rank == 0:
                torch.save(run["state"], ckpt)
            actor.update(shard2)
            run["continued"] = actor.state_dict()["model"]
            actor.save_pretrained(Path(out_dir) / "hf")  # rank 0 writes it
            dist.barrier()  # the checkpoint is on disk
            resumed = PolicyActor(learner_config(config, "fsdp"), rank=rank, world_size=WORLD)
            resumed.load_state_dict(torch.load(ckpt, weights_only=True))
            resumed.update(shard2)
            run["resumed"] = resumed.state_dict()["model"]
        shards: list[Any] = [None] * WORLD
        dist.all_gather_object(shards, {k: result[k]["update"] for k in result})
        if rank == 0:
            for key in result:
                result[key]["shards"] = [r[key] for r in shards]
            torch.save(result, Path(out_dir) / "rank0.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _first_update(actor: PolicyActor, batch: UpdateBatch, shard: UpdateBatch) -> dict[str, Any]:
    """Log-probs of the whole batch, then an update on this rank's shard."""
    logps, _ = actor.compute_logprobs(batch.prompts, batch.responses)
    update = actor.update(shard)
    return {
        "logps": logps,
        "update": update,
        "grads": full_grads(actor),
        "bytes": learner_state_bytes(actor.model, actor.optimizer),
    }


@pytest.fixture(scope="module")
def tiny_learner(tiny_assets) -> RunConfig:
    from dapo.runconfig.presets import tiny_cpu

    return tiny_cpu().with_overrides(
        {
            "model.path": str(tiny_assets / "model"),
            "model.device": "cpu",
            "optim.lr": LR,
            "optim.micro_batch_size": 2,
            "optim.warmup_steps": 0,
            "rollout.max_response_length": 12,
        }
    )


@pytest.fixture(scope="module")
def two_ranks(tiny_learner: RunConfig, tmp_path_factory) -> dict[str, Any]:
    """The two-rank run of ``_rank_main`` and a one-process learner on the same batches."""
    import torch.multiprocessing as mp

    from dapo.cluster.ray_cluster import free_port

    out = tmp_path_factory.mktemp("fsdp")
    torch.manual_seed(0)
    single = PolicyActor(learner_config(tiny_learner, "ddp"))
    batch1 = with_old_logprobs(single, make_batch(1), seed=2)
    batch2 = with_old_logprobs(single, make_batch(3), seed=4)
    torch.save((batch1, batch2), out / "batches.pt")
    mp.spawn(_rank_main, args=(free_port(), tiny_learner, str(out / "ckpt"), str(out)), nprocs=WORLD)
    ranks = torch.load(out / "rank0.pt", weights_only=False)
    # the one-process reference: the same two steps
    logps, _ = single.compute_logprobs(batch1.prompts, batch1.responses)
    update = single.update(batch1)
    ref = {"logps": logps, "update": update, "grads": full_grads(single)}
    ref["weights"] = {k: v.clone() for k, v in single.model.state_dict().items()}
    ref["bytes"] = learner_state_bytes(single.model, single.optimizer)
    ref["tensors"] = len(list(single.model.parameters()))
    single.update(batch2)
    ref["continued"] = {k: v.clone() for k, v in single.model.state_dict().items()}
    return {
        "ranks": ranks,
        "ref": ref,
        "ckpt": out / "ckpt",
        "config": tiny_learner,
        "batches": (batch1, batch2),
    }


def _assert_close(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor], **tol: float) -> None:
    assert sorted(ours) == sorted(theirs)
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], msg=name, **tol)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["plain", "offload"])
def test_two_fsdp_learners_compute_the_one_process_loss_gradients_and_step(two_ranks, key) -> None:
    ref, run = two_ranks["ref"], two_ranks["ranks"][key]
    # log-probs of the whole batch on every rank (a forward of the sharded model) are the unsharded ones
    assert len(run["logps"]) == len(ref["logps"]) == 6
    for ours, theirs in zip(run["logps"], ref["logps"], strict=True):
        assert ours == pytest.approx(theirs, abs=1e-5)
    # the two shards' metrics add up to the one-process update's, with the same ratios
    shards = shard_update(two_ranks["batches"][0], WORLD)
    metrics, ratios, _, _ = merge_updates(run["shards"], [rows for _, rows in shards])
    ref_metrics, ref_ratios, _, _ = ref["update"]
    assert ref_metrics["actor/pg_loss"] != 0.0 and ref_metrics["actor/pg_clipfrac"] > 0.0
    for name in ("actor/pg_loss", "actor/pg_clipfrac", "actor/entropy_update", "actor/grad_norm"):
        assert metrics[name] == pytest.approx(ref_metrics[name], rel=1e-5, abs=1e-7), name
    assert sorted(ratios) == sorted(ref_ratios) == [0, 3]
    for row in ratios:
        assert ratios[row] == pytest.approx(ref_ratios[row], rel=1e-5)
    # gradients (of the last mini-batch) and the weights after both optimiser steps
    _assert_close(run["grads"], ref["grads"], **GRADS)
    _assert_close(run["state"]["model"], ref["weights"], **WEIGHTS)
    initial = two_ranks["ranks"]["plain"]["engine"]  # the engine's copy, before the first hand-over
    moved = max((ref["weights"][k] - initial[k]).abs().max().item() for k in ref["weights"])
    assert moved > 10 * WEIGHTS["atol"]


def test_the_engine_copy_of_an_fsdp_learner_gets_the_gathered_weights(two_ranks) -> None:
    run, ref = two_ranks["ranks"]["plain"], two_ranks["ref"]
    before, after = run["engine"], run["engine_after"]
    assert not torch.equal(before["model.embed_tokens.weight"], after["model.embed_tokens.weight"])
    _assert_close(after, run["state"]["model"], rtol=0.0, atol=0.0)  # exactly the learners' weights
    _assert_close(after, ref["weights"], **WEIGHTS)
    # tied embedding and LM head stay one tensor in the engine's model
    assert torch.equal(after["lm_head.weight"], after["model.embed_tokens.weight"])


@pytest.mark.parametrize("key", ["plain", "offload"])
def test_each_fsdp_rank_holds_half_of_the_parameters_gradients_and_optimiser_state(two_ranks, key) -> None:
    ours, ddp = two_ranks["ranks"][key]["bytes"], two_ranks["ref"]["bytes"]
    # AdamW: two fp32 moments per parameter, and a 4-byte step count per parameter tensor
    assert ddp["optimizer"] == 2 * ddp["params"] + 4 * two_ranks["ref"]["tensors"]
    assert ddp["grads"] == ddp["params"]
    for part in ("params", "grads", "optimizer"):
        ratio = ours[part] / ddp[part]
        print(f"{key} {part}: rank 0 {ours[part]:,} bytes, unsharded {ddp[part]:,} ({ratio:.3f})")
        assert 0.49 <= ratio <= 0.52, (part, ratio)


def test_a_resumed_fsdp_learner_continues_exactly(two_ranks) -> None:
    run, ref = two_ranks["ranks"]["plain"], two_ranks["ref"]
    continued, resumed = run["continued"], run["resumed"]
    assert sorted(continued) == sorted(ref["continued"])
    for name in continued:
        assert torch.equal(resumed[name], continued[name]), name  # bit for bit
    _assert_close(continued, ref["continued"], **WEIGHTS)


def test_an_fsdp_checkpoint_has_the_unsharded_format_and_resumes_on_one_process(two_ranks) -> None:
    """The same keys, shapes and optimiser layout as a one-process checkpoint: a one-process learner
    loads it and takes the second step as the FSDP learners did."""
    state = torch.load(two_ranks["ckpt"], weights_only=True)
    ref = two_ranks["ref"]
    assert {k: v.shape for k, v in state["model"].items()} == {k: v.shape for k, v in ref["weights"].items()}
    single = PolicyActor(learner_config(two_ranks["config"], "ddp"))
    assert state["optimizer"]["param_groups"] == single.optimizer.state_dict()["param_groups"]
    single.load_state_dict(state)
    single.update(two_ranks["batches"][1])
    _assert_close(single.model.state_dict(), two_ranks["ranks"]["plain"]["continued"], **WEIGHTS)


def test_an_fsdp_learner_saves_a_huggingface_folder_of_its_whole_weights(two_ranks) -> None:
    from transformers import AutoModelForCausalLM

    folder = two_ranks["ckpt"].parent / "hf"
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    _assert_close(model.state_dict(), two_ranks["ranks"]["plain"]["continued"], rtol=0.0, atol=0.0)
    assert (folder / "tokenizer_config.json").is_file()


def test_fsdp_learners_score_equally_long_log_prob_shards() -> None:
    from dapo.cluster.ray_shards import logprob_shards

    assert logprob_shards(5, 2) == [([0, 1, 2], 3), ([3, 4], 2)]
    assert logprob_shards(1, 3) == [([0], 1)]  # DDP: learners without rows are not asked
    assert logprob_shards(5, 2, even=True) == [([0, 1, 2], 3), ([3, 4, 0], 2)]
    assert logprob_shards(1, 3, even=True) == [([0], 1), ([0], 0), ([0], 0)]  # a forward on every rank


def test_fsdp_needs_the_ray_backend_and_offload_needs_fsdp() -> None:
    with pytest.raises(ConfigError) as e:
        ExecutionConfig(backend="local", learner_strategy="fsdp")
    assert "backend 'ray'" in e.value.errors["learner_strategy"]
    with pytest.raises(ConfigError) as e:
        ExecutionConfig(backend="ray", fsdp_cpu_offload=True)
    assert "fsdp" in e.value.errors["fsdp_cpu_offload"]
    with pytest.raises(ConfigError):
        RunConfig.from_dict({"execution": {"backend": "ray", "learner_strategy": "zero3"}})
    ok = RunConfig.from_dict({"execution": {"backend": "ray", "learner_strategy": "fsdp"}})
    assert ok.execution.learner_strategy == "fsdp" and not ok.execution.fsdp_cpu_offload


# ---- through the Ray backend ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_ray_run_with_two_fsdp_learners_trains_like_one_process(ray_session, tmp_path) -> None:
    """Two steps, split mode with one rollout worker (so the samples are the one-process ones): the same
    metrics, every learner and the rollout worker hold the one-process weights, and the step-2
    checkpoint has the one-process keys and values."""
    import ray

    from dapo.cluster.backends import LocalBackend
    from dapo.cluster.ray_backend import RayBackend
    from dapo.learner.checkpoint import latest
    from dapo.loop.trainer import Trainer
    from dapo.rollout.base import SamplingParams
    from tests.dapo.ray_helpers import RecordingSink, tiny_config

    base = tiny_config(ray_session.assets, num_learner_workers=2, num_rollout_workers=1, colocate=False)
    config = replace(
        base,
        execution=replace(base.execution, learner_strategy="fsdp"),
        checkpoint=replace(base.checkpoint, every_n_steps=2),
    )
    twin = replace(config, execution=ExecutionConfig(torch_threads=1))
    runs = {}
    for name, cfg, backend in (("local", twin, LocalBackend(twin)), ("fsdp", config, RayBackend(config))):
        try:
            sink = RecordingSink()
            Trainer(cfg, tmp_path / name, [sink], backend=backend).fit()
            assert sink.finished == ("succeeded", None), sink.finished
            sums = []
            if name == "fsdp":
                sums = ray.get([a.weights_checksum.remote() for a in backend.learners + backend.rollouts])
                # split mode: the learners hold no rollout engine (no idle whole copy of the model)
                with pytest.raises(ray.exceptions.RayTaskError, match="no rollout engine"):
                    ray.get(backend.learners[1].call.remote("generate", [[5, 6]], SamplingParams()))
            runs[name] = (sink.reports, sums, latest(tmp_path / name))
        finally:
            backend.close()
    (local, _, local_ckpt), (ours, sums, our_ckpt) = runs["local"], runs["fsdp"]
    assert [r.step for r in ours] == [1, 2]
    for theirs, mine in zip(local, ours, strict=True):
        assert [s.response for s in mine.samples] == [s.response for s in theirs.samples]
        for key in ("actor/pg_loss", "actor/entropy", "actor/grad_norm", "actor/pg_clipfrac"):
            assert mine.metrics[key] == pytest.approx(theirs.metrics[key], rel=1e-4, abs=1e-6), key
        assert mine.metrics["perf/learner_state_gb"] < 0.52 * theirs.metrics["perf/learner_state_gb"]
    assert sums[0] == sums[1] == sums[2]  # both learners (gathered) and the rollout worker
    saved = torch.load(our_ckpt / "state.pt", weights_only=True)
    reference = torch.load(local_ckpt / "state.pt", weights_only=True)
    # four AdamW steps: twice the one-step bound (measured: 7.3e-5 at most, at lr 1e-3)
    _assert_close(saved["model"], reference["model"], rtol=0.0, atol=0.1 * config.optim.lr)
    total = sum(float(saved["model"][k].double().sum()) for k in saved["model"] if k != "lm_head.weight")
    assert total == pytest.approx(sums[0], rel=1e-12)  # the checkpoint holds the learners' weights
    assert sorted(saved["optimizer"]["state"]) == sorted(reference["optimizer"]["state"])
