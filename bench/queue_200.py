"""Two hundred runs queued at once in front of one Celery worker: they must run in creation order, none
lost, and the cancelled ones (every 7th before the worker starts, one more while the queue drains) never
start. Prints how long the queue took to drain and the time per run.

    .venv/bin/python bench/queue_200.py [--runs 200]

The scenario is the one of tests/reliability/test_queue.py (which queues 20 in the default suite): a fresh
SQLite database under a temporary folder, a Redis queue of its own (BENCH_REDIS_URL, default
redis://127.0.0.1:6379/12; the worker uses database 13 of that server), one prefork worker with one pool
process as `make demo` starts it, and each run the real trainer at its smallest (one step of a one-layer
Llama built from a config). Exits 1 if an invariant fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

from page_load import REPO, setup_django


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    queue = f"bench-queue-{uuid.uuid4().hex[:8]}"
    os.environ.update(DAPO_QUEUE=queue, DAPO_CHANNEL_PREFIX=f"asgi-{queue}")
    with tempfile.TemporaryDirectory(prefix="dapo-bench-queue-") as tmp:
        var = Path(tmp)
        setup_django(var)
        sys.path.insert(0, str(REPO))
        from config.celery import app
        from django.conf import settings
        from django.contrib.auth import get_user_model

        from tests.platform.support import redis_test_url
        from tests.reliability import support
        from tests.reliability.queue_scenario import problems, run_queue

        app.conf.broker_url = redis_test_url()  # where the worker listens
        settings.DAPO_QUEUE = queue
        owner = get_user_model().objects.create_user("bench", password="bench-pass-123")
        config = support.tiny_config(support.build_tiny_assets(var / "assets"), steps=1)
        started = time.time()
        result = run_queue(owner, config, support.worker_env(var), var / "logs", args.runs)
        found = problems(result, var / "runs")
        trained = sum(1 for r in result.runs if r.status == "succeeded")
        print(f"{args.runs} runs queued ({len(result.cancelled_early) + 1} cancelled, {trained} trained)")
        total = time.time() - started
        print(f"drained in {result.seconds:.1f} s from the worker's start ({total:.1f} s in all)")
        print(f"{result.per_run_s:.2f} s per trained run, the first one's torch import included")
        print("\n".join(found) if found else "in creation order, none lost, no cancelled run started: ok")
        return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
