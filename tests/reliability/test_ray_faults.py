"""Ray fails under a run on the Ray backend: the run's local Ray dies mid-run, or the cluster of RAY_ADDRESS
does not answer. The run ends succeeded after a retry, or failed with a reason a person can read on its
page; it is never left "running". Real Celery worker (prefork, as `make demo` starts it), real local Ray
started by the run, the real trainer on a tiny model."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from config.celery import app
from django.urls import reverse
from django.utils import timezone
from runs.models import Run, Status

from tests.reliability import support
from tests.reliability.support import command_line, descendants, final, steps_of, wait_run
from tests.worker import stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def short_var() -> Any:
    """A short DAPO_VAR_DIR: the local Ray puts its sockets under it (107-byte limit on their paths)."""
    path = Path(tempfile.mkdtemp(prefix="dapo-rel-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ray-logs")


RAY_LEASE_SECONDS = 20


@pytest.fixture(scope="module")
def ray_worker(
    django_db_setup: Any, django_db_blocker: Any, test_queue: str, short_var: Path, logs: Path
) -> Any:
    # A longer lease than the other fault tests' 4 s: starting a local Ray on a busy machine starves the
    # driver's heartbeat thread for seconds, and a lapsed lease there would be a second takeover, not the
    # fault under test (seen at load 18: four attempts instead of two).
    env = support.worker_env(short_var, DAPO_LEASE_SECONDS=str(RAY_LEASE_SECONDS))
    with support.workers(env, logs) as workers:
        yield workers
        support.kill_quietly(ray_processes(workers.procs[0].pid))  # anything a failed test left
    with django_db_blocker.unblock():
        stack.wait_for_other_sessions_to_leave()


def ray_processes(worker_pid: int, name: str = "") -> list[int]:
    """The worker's Ray processes (they all descend from its pool process, the run's driver)."""
    return [
        pid for pid in descendants(worker_pid) if name in command_line(pid) and "ray" in command_line(pid)
    ]


def ray_config(assets: dict[str, str], steps: int, every: int) -> Any:
    return support.tiny_config(
        assets,
        steps=steps,
        every=every,
        **{
            "execution.backend": "ray",
            "execution.colocate": True,
            "execution.cpus_per_worker": 0.5,
            "execution.max_step_retries": 2,
        },
    )


def test_a_dead_local_ray_ends_the_attempt_and_the_run_resumes_on_a_fresh_one(ray_worker, alice, tiny_assets):
    """The run's local Ray (its GCS and raylet) is killed mid-run. Ray then ends its driver, the Celery pool
    process; the run is queued again and resumes from its checkpoint on a new local Ray. (A dead actor
    under a live Ray is recovered inside the attempt: tests/dapo/test_ray_backend.py.)"""
    run = Run.create_queued(owner=alice, name="ray-faults", config=ray_config(tiny_assets, steps=6, every=2))
    wait_run(run.pk, lambda r: r.step >= 3, 240, "the run's first steps on Ray")
    first_ray = ray_processes(ray_worker.procs[0].pid)
    core = [p for p in first_ray if "raylet" in command_line(p) or "gcs_server" in command_line(p)]
    assert len(core) == 2, [command_line(p) for p in first_ray]
    support.kill_quietly(core)
    killed_at = time.time()
    wait_run(run.pk, lambda r: r.attempts == 2, 300, "the second attempt")
    print(f"local Ray killed: second attempt {time.time() - killed_at:.1f} s later")
    run = final(run.pk, timeout=300)
    assert (run.status, run.attempts, run.error) == (Status.SUCCEEDED, 2, "")
    assert steps_of(run) == list(range(1, 7))  # killed at step 3 or later, resumed from a checkpoint
    gone = lambda: not any(os.path.exists(f"/proc/{p}") for p in first_ray)  # noqa: E731
    stack.wait_for(gone, 30, "the dead Ray's processes to exit")


def test_an_unreachable_ray_cluster_fails_the_run_with_the_reason_on_its_page(
    test_queue, alice, tiny_assets, short_var, logs, alice_client, django_db_blocker
):
    queue, port = f"{os.environ['DAPO_QUEUE']}-ray", stack.free_port()  # nothing listens there
    env = support.worker_env(
        short_var, DAPO_QUEUE=queue, RAY_ADDRESS=f"127.0.0.1:{port}", DAPO_RAY_CONNECT_TIMEOUT_S="3"
    )
    # sent by hand to this worker's queue, so marked dispatched as the scheduler marks what it sends: left
    # waiting, the module's other worker (its local Ray answers) would dispatch and train it
    run = Run.objects.create(
        owner=alice,
        name="no-ray",
        config=ray_config(tiny_assets, 3, 0).to_dict(),
        dispatched_at=timezone.now(),
    )
    with support.workers(env, logs / "unreachable"):
        app.send_task("worker.tasks.launch_run", args=[run.pk], queue=queue)
        run = final(run.pk, timeout=60)
    with django_db_blocker.unblock():
        stack.wait_for_other_sessions_to_leave()
    assert run.status == Status.FAILED and run.step == 0
    assert run.error == (
        f"ConnectionError: no Ray cluster answers at RAY_ADDRESS=127.0.0.1:{port} (Connection refused,"
        " for 3 s): start its head, or unset RAY_ADDRESS to run on a local Ray"
    )
    assert (
        f"RAY_ADDRESS=127.0.0.1:{port}"
        in alice_client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    )
