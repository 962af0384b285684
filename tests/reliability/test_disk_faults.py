"""The disk fills up, or the checkpoint folder stops accepting writes, in the middle of a run: the run fails
with an error that names the path and the errno (on its page too), never silently and never "running".

Real faults: the Celery worker runs in a mount namespace of its own where ``$DAPO_VAR_DIR/runs`` is a 16 KiB
tmpfs (a checkpoint of the tiny model takes 72 KiB), and an immutable flag (``chattr +i``, which binds
root too) is set on a run's checkpoint folder through ``/proc/<worker>/root``. Both need root or an
unprivileged user namespace; the tests skip where neither exists.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse
from runs.models import Run, Status

from tests.reliability import support
from tests.reliability.support import final, steps_of, wait_run
from tests.worker import stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(240)]

TMPFS = "size=16k"


def namespace_prefix(runs: Path) -> list[str]:
    """Run a command in a private mount namespace where ``runs`` is a tiny tmpfs."""
    script = f'mount -t tmpfs -o {TMPFS} tmpfs "{runs}" && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]


def can_mount_tmpfs(tmp: Path) -> str:
    """Empty when this machine lets us mount a tmpfs in a namespace of our own, else why not."""
    if not shutil.which("unshare") or not shutil.which("chattr"):
        return "unshare or chattr is missing"
    probe = subprocess.run([*namespace_prefix(tmp), "chattr", "+i", str(tmp)], capture_output=True, text=True)
    return "" if probe.returncode == 0 else f"no tmpfs in a mount namespace here: {probe.stderr.strip()}"


@pytest.fixture(scope="module")
def full_disk_worker(django_db_setup: Any, django_db_blocker: Any, test_queue: str, var: Path) -> Any:
    runs = var / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    if reason := can_mount_tmpfs(runs):
        pytest.skip(reason)
    with support.workers(
        support.worker_env(var), var / "logs-disk", prefix=namespace_prefix(runs)
    ) as workers:
        yield workers
    with django_db_blocker.unblock():
        stack.wait_for_other_sessions_to_leave()


@pytest.fixture
def launch(alice: Any, tiny_assets: dict[str, str]) -> Any:
    def launch(steps: int, every: int) -> Run:
        config = support.tiny_config(tiny_assets, steps=steps, every=every)
        return Run.create_queued(owner=alice, name="disk", config=config)  # queued on commit

    return launch


def page_of(run: Run, client: Any) -> str:
    return client.get(reverse("runs:detail", args=[run.pk])).content.decode()


def test_a_full_disk_mid_run_fails_the_run_naming_the_path_and_errno(
    full_disk_worker, launch, alice_client, var
):
    run = final(launch(steps=10, every=2).pk, timeout=120)
    folder = var / "runs" / str(run.pk) / "checkpoints"
    assert run.status == Status.FAILED
    assert run.error.startswith(f"CheckpointError: could not write checkpoint {folder}/step_000002: ")
    assert "No space left on device (ENOSPC, errno 28) at " in run.error and "state.pt" in run.error
    assert steps_of(run) == [1]  # what was computed before the failure is kept
    assert "ENOSPC, errno 28" in page_of(run, alice_client)


def test_a_checkpoint_folder_made_unwritable_mid_run_fails_the_run_naming_it(full_disk_worker, launch, var):
    run = launch(steps=100, every=50)  # 49 steps to set the flag in before the first checkpoint
    wait_run(run.pk, lambda r: r.step >= 1, 120, "the first step")  # its checkpoint folder was probed
    folder = var / "runs" / str(run.pk) / "checkpoints"
    in_namespace = Path(f"/proc/{full_disk_worker.procs[0].pid}/root") / folder.relative_to("/")
    subprocess.run(["chattr", "+i", str(in_namespace)], check=True)
    run = final(run.pk, timeout=120)
    assert run.status == Status.FAILED and 1 <= run.step < 50
    assert f"could not write checkpoint {folder}/step_000050: " in run.error
    assert f"Operation not permitted (EPERM, errno 1) at {folder}/.tmp-step_000050" in run.error
