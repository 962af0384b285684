"""What the TRL and verl integration tests share: daphne on the test database."""

from __future__ import annotations

from typing import Any

import pytest

from tests.worker import stack


@pytest.fixture(scope="module")
def server(django_db_setup: Any, django_db_blocker: Any, redis_url: str, tmp_path_factory: Any) -> Any:
    """daphne on the test database (an external run needs no worker), for one test module."""
    var = tmp_path_factory.mktemp("integrations-var")
    env = stack.environment(var, DJANGO_ALLOWED_HOSTS="127.0.0.1")
    port = stack.free_port()
    with stack.daphne(env, var / "daphne.log", port):
        yield f"http://127.0.0.1:{port}"
    with django_db_blocker.unblock():
        stack.wait_for_other_sessions_to_leave()
