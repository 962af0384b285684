"""The Ray backend on a local Ray (the session's, started as a run with RAY_ADDRESS unset would start it):
where it starts, determinism against the one-process backend, DDP over uneven shards, and recovery from
a rollout worker or a learner that dies mid-run. Tiny model and batches: each test takes seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from dapo.cluster import resources  # noqa: E402
from dapo.cluster.backends import LocalBackend  # noqa: E402
from dapo.cluster.ray_backend import RayBackend  # noqa: E402
from dapo.cluster.ray_cluster import LOCAL_PLACEMENT_TIMEOUT_S  # noqa: E402
from dapo.cluster.resources import Capacity, ClusterTooSmall  # noqa: E402
from dapo.loop.report import StepReport  # noqa: E402
from dapo.loop.trainer import Trainer  # noqa: E402
from tests.dapo.ray_helpers import RecordingSink, local_twin, tiny_config  # noqa: E402


@pytest.fixture
def assets(ray_session) -> Path:
    return ray_session.assets


def fit(config, out_dir: Path, backend, hook=None, extra=()) -> tuple[RecordingSink, object]:
    sink = RecordingSink(hook)
    result = Trainer(config, out_dir, [sink, *extra], backend=backend).fit()
    assert sink.finished == ("succeeded", None), sink.finished
    return sink, result


def checksum(model) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def test_a_local_ray_starts_under_var_on_a_free_port_and_writes_nothing_to_home(ray_session) -> None:
    connection, root = ray_session.connection, ray_session.root
    assert connection.started_local and connection.owns_init
    port = int(connection.address.rsplit(":", 1)[1])
    assert port != 6379
    assert ray_session.temp_dir == root / "var" / "ray" and any((root / "var" / "ray").glob("session_*"))
    assert ray.cluster_resources()["CPU"] == os.cpu_count()
    assert not any((root / "home").iterdir()), "a local Ray wrote into the home directory"


def test_a_run_the_cluster_can_never_hold_fails_at_start_naming_what_is_missing(assets, monkeypatch) -> None:
    seen: list[Capacity] = []
    monkeypatch.setattr(resources, "_LISTENERS", [])  # this test's listener only, and only in this test
    resources.on_capacity(seen.append)
    started = time.monotonic()
    with pytest.raises(ClusterTooSmall, match=r"needs 2 GPUs; the cluster has 0\. Lower execution"):
        RayBackend(tiny_config(assets, num_learner_workers=2, gpus_per_worker=1))
    assert time.monotonic() - started < LOCAL_PLACEMENT_TIMEOUT_S / 2  # never waited for the placement
    assert seen[-1].kind == "ray" and (seen[-1].cpus, seen[-1].gpus) == (os.cpu_count(), 0)
    assert ray.util.placement_group_table() == {} or all(
        g["state"] == "REMOVED" for g in ray.util.placement_group_table().values()
    )  # nothing was placed


def test_two_learners_on_uneven_shards_update_like_one_process(assets, tmp_path) -> None:
    """Mini-batches of 3 rows over 2 learners (2 + 1 padded), split mode so that one rollout worker draws
    the one-process samples: DDP with the global counts gives the one-process update."""
    base = tiny_config(assets, num_learner_workers=2, num_rollout_workers=1, colocate=False)
    config = replace(base, rollout=replace(base.rollout, n=3), optim=replace(base.optim, mini_batch_size=1))
    local = LocalBackend(local_twin(config))
    on_ray = RayBackend(config)
    try:
        placed = ray.util.placement_group_table(on_ray._groups["learner"])["bundles"]
        assert list(placed.values()) == on_ray.request.ray_bundles("learner")  # resources' bundles, no other
        local_sink, _ = fit(local_twin(config), tmp_path / "local", local)
        ray_sink, _ = fit(config, tmp_path / "ray", on_ray)
        sums = ray.get([a.weights_checksum.remote() for a in on_ray.learners + on_ray.rollouts])
    finally:
        on_ray.close()
    for ours, theirs in zip(local_sink.reports, ray_sink.reports, strict=True):
        assert [s.response for s in ours.samples] == [s.response for s in theirs.samples]
        for key in ("actor/pg_loss", "actor/entropy", "actor/grad_norm", "actor/pg_clipfrac"):
            assert theirs.metrics[key] == pytest.approx(ours.metrics[key], rel=1e-4, abs=1e-6), key
    assert sums[0] == sums[1] == sums[2]  # both learners and the rollout worker hold the same weights
    assert sums[0] == pytest.approx(checksum(local.actor.model), rel=1e-5)


def test_two_learners_under_a_token_budget_update_like_one_process(assets, tmp_path) -> None:
    """optim.micro_batch_max_tokens: each learner plans its own shard (4 rows of each 8-row mini-batch)
    by the budget, so their plans can differ in count (here, in step 1's first mini-batch, 4 rows of 33
    tokens fit one pass of 136 tokens, 35 + 35 + 35 + 30 need two); they run the largest (DDP all-reduces
    in every backward) and the update equals the one-process update."""
    from tests.dapo.test_hardware import Samples

    base = tiny_config(assets, num_learner_workers=2, num_rollout_workers=1, colocate=False)
    config = replace(
        base,
        optim=replace(base.optim, micro_batch_max_tokens=136),
        logging=replace(base.logging, hardware_interval_s=0.25),
    )
    local = LocalBackend(local_twin(config))
    on_ray = RayBackend(config)
    hardware = Samples()
    try:
        placed = ray.util.placement_group_table(on_ray._groups["learner"])["bundles"]
        assert list(placed.values()) == on_ray.request.ray_bundles("learner")  # resources' bundles, no other
        local_sink, _ = fit(local_twin(config), tmp_path / "local", local)
        ray_sink, _ = fit(config, tmp_path / "ray", on_ray, extra=[hardware])
        sums = ray.get([a.weights_checksum.remote() for a in on_ray.learners])
    finally:
        on_ray.close()
    # every Ray actor samples its hardware for the controller
    workers = {s.worker for s in hardware.samples}
    assert workers == {"controller", "learner 0", "learner 1", "rollout 0"}, workers
    for worker in workers:
        mine = [s for s in hardware.samples if s.worker == worker]
        assert all(s.values["rss_gb"] > 0.05 and "cpu_percent" in s.values for s in mine), worker
    for ours, theirs in zip(local_sink.reports, ray_sink.reports, strict=True):
        assert [s.response for s in ours.samples] == [s.response for s in theirs.samples]
        actor_keys = [k for k in ours.metrics if k.startswith("actor/")]
        assert {"actor/pg_loss", "actor/grad_norm", "actor/pg_clipfrac"} <= set(actor_keys)
        for key in actor_keys:
            assert theirs.metrics[key] == pytest.approx(ours.metrics[key], rel=1e-4, abs=1e-6), key
        assert 0.0 < theirs.metrics["perf/padding_frac"] < 1.0
    assert sums[0] == sums[1] == pytest.approx(checksum(local.actor.model), rel=1e-5)


@pytest.mark.slow
def test_the_run_finishes_when_a_rollout_worker_is_killed_mid_run(assets, tmp_path) -> None:
    config = tiny_config(assets, steps=3, num_rollout_workers=1, colocate=False, max_step_retries=2)
    backend = RayBackend(config)
    victim = backend.rollouts[0]
    killed: list[int] = []

    def kill_after_step_one(report: StepReport) -> None:
        if report.step == 1:
            killed.append(ray.get(victim.where.remote())["pid"])
            os.kill(killed[0], signal.SIGKILL)  # a crash, not a polite exit: Ray restarts the actor

    try:
        sink, result = fit(config, tmp_path / "run", backend, kill_after_step_one)
        assert backend.rollouts[0] is victim  # restarted by Ray, not replaced
        pid_after = ray.get(victim.where.remote())["pid"]
        sums = ray.get([a.weights_checksum.remote() for a in backend.learners + backend.rollouts])
        recoveries = backend.recoveries
    finally:
        backend.close()
    assert result.last_step == 3 and [r.step for r in sink.reports] == [1, 2, 3]
    assert recoveries >= 1 and pid_after != killed[0]
    assert sums[1] == sums[0]  # the restarted worker got the newest weights


@pytest.mark.slow
def test_a_lost_learner_rebuilds_the_group_and_the_run_goes_on(assets, tmp_path) -> None:
    config = tiny_config(assets, steps=3, num_learner_workers=2, colocate=True, max_step_retries=2)
    backend = RayBackend(config)

    def kill_a_learner(report: StepReport) -> None:
        if report.step == 1:  # rank 0: the one whose newest state the controller keeps in the object store
            os.kill(ray.get(backend.learners[0].where.remote())["pid"], signal.SIGKILL)

    try:
        sink, result = fit(config, tmp_path / "run", backend, kill_a_learner)
        sums = ray.get([a.weights_checksum.remote() for a in backend.learners])
        recoveries = backend.recoveries
    finally:
        backend.close()
    assert result.last_step == 3 and recoveries >= 1
    assert sums[0] == sums[1]
    assert all(r.metrics["actor/pg_loss"] == r.metrics["actor/pg_loss"] for r in sink.reports)  # not NaN


def test_a_ray_run_and_its_resume_by_a_new_controller_match_one_process(assets, tmp_path):
    """Steps 1-2 on one RayBackend (one worker) draw the samples and losses of the one-process backend;
    then a fresh backend (a controller that died and came back) resumes from the step-2 checkpoint, and
    step 3 and the weights after it match step 3 of an uninterrupted one-process run (Adam's state too)."""
    config = tiny_config(assets, steps=3)
    local = LocalBackend(local_twin(config))
    local_sink, _ = fit(local_twin(config), tmp_path / "local", local)
    two_steps = replace(config, optim=replace(config.optim, total_steps=2))
    first = RayBackend(two_steps)
    try:
        placed = ray.util.placement_group_table(first._groups["learner"])["bundles"]
        assert list(placed.values()) == first.request.ray_bundles("learner")  # resources' bundles, no other
        first_sink, _ = fit(two_steps, tmp_path / "ray", first)
    finally:
        first.close()
    assert [r.step for r in first_sink.reports] == [1, 2]
    for ours, theirs in zip(local_sink.reports[:2], first_sink.reports, strict=True):
        assert [s.response for s in ours.samples] == [s.response for s in theirs.samples]
        assert [s.reward for s in ours.samples] == [s.reward for s in theirs.samples]
        for key in ("actor/pg_loss", "actor/entropy", "actor/grad_norm", "actor/ppo_kl"):
            assert theirs.metrics[key] == pytest.approx(ours.metrics[key], rel=1e-5, abs=1e-7), key
    second = RayBackend(config)
    try:
        sink = RecordingSink()
        Trainer(config, tmp_path / "ray", [sink], resume=True, backend=second).fit()
        ray_sum = ray.get(second.learners[0].weights_checksum.remote())
    finally:
        second.close()
    assert [r.step for r in sink.reports] == [3]
    ours, theirs = local_sink.reports[2], sink.reports[0]
    assert [s.response for s in ours.samples] == [s.response for s in theirs.samples]
    for key in ("actor/pg_loss", "actor/grad_norm"):
        assert theirs.metrics[key] == pytest.approx(ours.metrics[key], rel=1e-5, abs=1e-7), key
    assert ray_sum == pytest.approx(checksum(local.actor.model), rel=1e-6)  # Adam's state came back too


def test_importing_the_backends_does_not_import_ray() -> None:
    code = (
        "import sys, dapo.loop.trainer, dapo.cluster.ray_backend, dapo.cluster.ray_cluster;"
        " assert 'ray' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])
