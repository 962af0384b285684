"""Ray fails under a run on the Ray backend: its rollout actor is killed, then the run's local Ray itself,
then (another run) the cluster of RAY_ADDRESS does not answer. Each run ends succeeded after retries, or
failed with a reason a person can read on its page; none is left "running". Real Celery worker (prefork,
as `make demo` starts it), real local Ray started by the run, the real trainer on a tiny model."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

import pytest
from config.celery import app
from django.urls import reverse
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


@pytest.fixture(scope="module")
def ray_worker(
    django_db_setup: Any, django_db_blocker: Any, test_queue: str, short_var: Path, logs: Path
) -> Any:
    with support.workers(support.worker_env(short_var), logs) as workers:
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
    return support.tiny_config(assets, steps=steps, every=every, **{
        "execution.backend": "ray", "execution.colocate": True, "execution.cpus_per_worker": 0.5,
        "execution.max_step_retries": 2,
    })  # fmt: skip


def test_a_killed_actor_is_replaced_and_a_dead_local_ray_restarted_the_run_ends_succeeded(
    ray_worker, alice, tiny_assets
):
    run = Run.create_queued(owner=alice, name="ray-faults", config=ray_config(tiny_assets, steps=10, every=2))
    wait_run(run.pk, lambda r: r.step >= 2, 240, "the run's first steps on Ray")
    worker = ray_worker.procs[0].pid
    (actor,) = ray_processes(worker, "ray::PolicyWorker")
    os.kill(actor, signal.SIGKILL)  # 1. the actor that generates and trains dies
    wait_run(run.pk, lambda r: r.step >= 5, 240, "the run to go on after the actor died")
    assert Run.objects.get(pk=run.pk).attempts == 1  # the controller recovered by itself
    assert ray_processes(worker, "ray::PolicyWorker") not in ([], [actor])
    assert "recovering, retry 1 of 2" in ray_worker.logs()
    first_ray = ray_processes(worker)
    support.kill_quietly(
        [p for p in first_ray if "raylet" in command_line(p) or "gcs_server" in command_line(p)]
    )
    run = final(run.pk, timeout=400)  # 2. the local Ray died: its driver exits, the run is taken up again
    assert (run.status, run.attempts, run.error) == (Status.SUCCEEDED, 2, "")
    assert steps_of(run) == list(range(1, 11))
    stack.wait_for(
        lambda: not any(os.path.exists(f"/proc/{p}") for p in first_ray), 30, "the dead Ray's processes"
    )


def test_an_unreachable_ray_cluster_fails_the_run_with_the_reason_on_its_page(
    test_queue, alice, tiny_assets, short_var, logs, alice_client, django_db_blocker
):
    queue, port = f"{os.environ['DAPO_QUEUE']}-ray", stack.free_port()  # nothing listens there
    env = support.worker_env(short_var, DAPO_QUEUE=queue, RAY_ADDRESS=f"127.0.0.1:{port}",
                             DAPO_RAY_CONNECT_TIMEOUT_S="3")  # fmt: skip
    run = Run.objects.create(owner=alice, name="no-ray", config=ray_config(tiny_assets, 3, 0).to_dict())
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
