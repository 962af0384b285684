"""`make test`'s groups hold: under ``--dist loadgroup`` a worker reports each grouped test with xdist's
``@group`` id, which is what xdist's scheduler reads to send a group's tests to one worker (pytest 9.2
and pytest-xdist 3.8 need a hook of ours for it: tests/conftest.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_worker_reports_grouped_tests_under_their_group_id() -> None:
    # test_ray_shards.py: a Ray module (the "clusters" group) whose tests are pure and take milliseconds
    argv = [sys.executable, "-m", "pytest", "tests/dapo/test_ray_shards.py", "-n", "1", "--dist", "loadgroup"]
    argv += ["-v", "-p", "no:cacheprovider"]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300).stdout
    ran = re.findall(r"\[(gw\d)\] .*PASSED (\S+)", out)
    assert len(ran) >= 5, out[-3000:]
    assert all(nodeid.endswith("@clusters") for _, nodeid in ran), ran
