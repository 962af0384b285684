"""A real two-node Ray cluster on this machine (``ray start --head`` + ``ray start --address``, each on its
own free ports), two DAPO steps with two learners and two rollout workers spread over the nodes, then the
cluster is stopped by killing only the process groups this test started."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray")

from tests.dapo.ray_helpers import REPO, TwoNodeCluster  # noqa: E402


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TwoNodeCluster]:
    # Ray's socket paths must stay under ~107 characters: a short temp dir, not pytest's deep tmp_path.
    short = Path(tempfile.mkdtemp(prefix="dr-", dir="/tmp"))
    home = tmp_path / "home"
    home.mkdir()
    cluster = TwoNodeCluster(short / "ray")
    cluster.env["HOME"] = str(home)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        assert cluster.leftover_pids() == [], "processes of the test cluster survived stop()"
        assert not any(home.iterdir()), "the cluster wrote into the home directory"
        shutil.rmtree(short, ignore_errors=True)


@pytest.mark.slow
def test_two_steps_run_with_learners_and_rollout_workers_spread_over_two_nodes(cluster, tmp_path) -> None:
    assert cluster.alive_nodes() == 2
    env = {**cluster.env, "RAY_ADDRESS": cluster.address}
    done = subprocess.run(
        [sys.executable, "-m", "tests.dapo.ray_helpers", "two-node", "--root", str(tmp_path)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))

    assert result["status"] == "succeeded", result["error"]
    assert result["steps"] == [1, 2]
    nodes = set(result["nodes"])
    assert len(nodes) == 2
    by_role: dict[str, set[str]] = {"learner": set(), "rollout": set()}
    for worker in result["placement"]:
        by_role[worker["role"]].add(worker["node_id"])
    assert by_role == {"learner": nodes, "rollout": nodes}  # one of each on each node
    assert len(set(result["checksums"])) == 1  # the broadcast reached the rollout worker on the other node
