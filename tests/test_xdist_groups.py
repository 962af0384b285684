"""`make test`'s groups hold: under ``--dist loadgroup`` a worker reports each grouped test with xdist's
``@group`` id, which is what xdist's scheduler reads to send a group's tests to one worker (pytest 9.2
and pytest-xdist 3.8 need a hook of ours for it: tests/conftest.py)."""

from __future__ import annotations

import os
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


LEAD_PLUGIN = """
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session):
    import tests.conftest

    tests.conftest.LEADING.clear()
    tests.conftest.LEADING.add("tests/test_public_modules.py")
"""


def test_a_leading_module_is_handed_out_first_after_the_groups(tmp_path: Path) -> None:
    """tests/conftest.py's LEADING, through a real worker: the group (7 tests) first, xdist's largest unit;
    then the leading module's test before a test that comes earlier in the collection."""
    (tmp_path / "lead_plugin.py").write_text(LEAD_PLUGIN)
    first = "tests/test_docs.py::test_every_cited_docs_page_exists"
    lead = "tests/test_public_modules.py::test_dapo_config_still_answers_the_field_documentation"
    argv = [sys.executable, "-m", "pytest", "tests/dapo/test_ray_shards.py", first, lead, "-n", "1"]
    argv += ["--dist", "loadgroup", "-v", "-p", "no:cacheprovider", "-p", "lead_plugin"]
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env).stdout
    ran = [nodeid for _, nodeid in re.findall(r"\[(gw\d)\] .*PASSED (\S+)", out)]
    assert len(ran) == 9, out[-3000:]
    assert all(nodeid.endswith("@clusters") for nodeid in ran[:7]), ran
    assert ran[7:] == [lead, first], ran


TIMEOUT_PLUGIN = """
def pytest_collection_finish(session):
    for item in session.items:
        mark = item.get_closest_marker("timeout")
        print("TIMEOUT", item.nodeid, mark.args[0] if mark else "default")
"""


def test_the_tests_on_the_sessions_ray_get_the_longer_hang_guard(tmp_path: Path) -> None:
    """tests/conftest.py's RAY_SESSION_TIMEOUT_S: the tests that use ``ray_session`` get it; the module's
    other tests (no Ray of the session) keep the default of pyproject.toml."""
    from tests.conftest import RAY_SESSION_TIMEOUT_S

    (tmp_path / "timeout_plugin.py").write_text(TIMEOUT_PLUGIN)
    argv = [sys.executable, "-m", "pytest", "tests/dapo/test_ray_state.py", "--collect-only", "-q"]
    argv += ["-p", "no:cacheprovider", "-p", "timeout_plugin", "-s"]
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env).stdout
    timeouts = dict(re.findall(r"^TIMEOUT (\S+) (\S+)$", out, flags=re.M))
    assert len(timeouts) >= 10, out[-3000:]
    on_session_ray = {n: t for n, t in timeouts.items() if "snapshot_shows" in n or "names_its_groups" in n}
    assert len(on_session_ray) == 2 and set(on_session_ray.values()) == {str(RAY_SESSION_TIMEOUT_S)}
    assert RAY_SESSION_TIMEOUT_S > 300
    assert {t for n, t in timeouts.items() if n not in on_session_ray} == {"default"}
