"""``ray start`` that survives a busy machine: ``python -m dapo.cluster.ray_start --head --port 6380 ...``.

The same command line as Ray's ``ray start`` (every argument passes through), with what a run's local Ray
gets (dapo.cluster.ray_cluster.start_local): the agents' start-up timeouts raised (START_TIMEOUTS) and the
raylet's registration awaited up to ``DAPO_RAY_NODE_WAIT_S`` (180 s) instead of Ray's fixed 30 s, after which
plain ``ray start`` fails with "The current node timed out during startup" on a saturated machine.
"""

from __future__ import annotations

import os
import sys

from dapo.cluster.ray_cluster import NODE_REGISTER_WAIT_S, START_TIMEOUTS, patient_node_registration


def main(argv: list[str] | None = None) -> int:
    for name, value in START_TIMEOUTS.items():
        os.environ.setdefault(name, value)
    from ray.scripts.scripts import cli

    with patient_node_registration(NODE_REGISTER_WAIT_S):
        try:
            cli.main(["start", *(sys.argv[1:] if argv is None else argv)], prog_name="ray")
        except SystemExit as done:
            return int(done.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
