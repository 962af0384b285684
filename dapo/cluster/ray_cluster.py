"""Connecting the controller to Ray, and asking Ray for room for the workers.

Where a run goes (docs/architecture.md, "What runs where"):
  * ``RAY_ADDRESS`` set   -> join that cluster (``ray.init(address=...)``); its nodes must be able to import
    ``dapo`` and read ``model.path`` (a shared file system or the same image). A head that does not
    answer within ``DAPO_RAY_CONNECT_TIMEOUT_S`` (30 s) fails the run with a ConnectionError naming it.
  * ``RAY_ADDRESS`` unset -> start a local Ray for this run, stopped again when the run ends:
      - its temp dir (sockets, logs, object spilling) is ``<DAPO_VAR_DIR or ./var>/ray``, or
        ``/tmp/dapo-ray-<uid>`` when that path is too long for Ray's unix sockets (~107 characters);
      - the GCS listens on a port the OS picks (never Redis's 6379), no dashboard;
      - CPUs: this machine's; GPUs: detected by Ray;
      - every port the OS's pick (the dashboard agent's too, whose default 52365 two Rays would share);
      - started with generous timeouts (a busy machine starts Ray's agents slowly), tried
        ``DAPO_RAY_START_ATTEMPTS`` times (3), what a failed try left killed, then a RuntimeError naming
        the fix (docs/troubleshooting.md, "The current node timed out during startup");
      - token authentication stays on, but the token lives only in this process's environment
        (``RAY_AUTH_TOKEN``), so nothing is written to ``~/.ray/auth_token``.

Placement: each group of workers (the learners; the rollout workers in split mode) gets one placement
group with one bundle ``{CPU: cpus_per_worker, GPU: gpus_per_worker}`` per worker, so a worker's CPUs and
GPU come from one node (the bundles: ``dapo.cluster.resources.request_for``). The strategy is ``PACK``
(fill a node first) unless the backend is given another (``SPREAD``, ``STRICT_PACK``, ``STRICT_SPREAD``)
or ``DAPO_RAY_PLACEMENT`` names one.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
SOCKET_PATH_LIMIT = 107
"""Longest unix socket path Linux accepts (sun_path is 108 bytes with the terminating NUL)."""
SESSION_SUFFIX = len("/session_2026-01-01_00-00-00_000000_4194304/sockets/plasma_store")
"""What Ray appends to its temp dir for its longest socket path."""
LOCAL_PLACEMENT_TIMEOUT_S = 60.0
"""A local Ray never grows: if the workers do not fit within this time, they never will."""
CLUSTER_PLACEMENT_TIMEOUT_S = 900.0
"""A cluster may autoscale: wait longer for its nodes."""
LOCAL_GCS_RECONNECT_TIMEOUT_S = 15
"""A local Ray's GCS that died does not come back (it keeps no state outside its process), so its driver,
the run's controller, gives up after this instead of Ray's 60 s; the run is then queued again and resumes."""
CLUSTER_CONNECT_TIMEOUT_S = float(os.environ.get("DAPO_RAY_CONNECT_TIMEOUT_S") or 30.0)
"""How long to wait for RAY_ADDRESS's head to accept a connection (a restarting head comes back within it)
before the run fails with the reason. ray.init alone would wait for minutes with the run "running"."""


START_ATTEMPTS = max(1, int(os.environ.get("DAPO_RAY_START_ATTEMPTS") or 3))
"""How many times a local Ray is started before the run fails (each try waits up to Ray's own 30 s for its
raylet, which on a saturated machine may not be enough once)."""
START_TIMEOUTS = {
    "RAY_agent_register_timeout_ms": "180000",  # the raylet's wait for its dashboard and runtime-env agents
    "RAY_worker_register_timeout_seconds": "180",  # a worker process's import of torch under load
}
"""Ray's startup timeouts for a local Ray, raised from defaults tuned for idle machines (the raylet gave up
on its agent after ~16 s with 8 busy processes on 2 cores). Values set in the environment win."""
NODE_REGISTER_WAIT_S = float(os.environ.get("DAPO_RAY_NODE_WAIT_S") or 180.0)
"""How long a local Ray's start waits for its raylet to register with the GCS. Ray's own wait is a fixed 30 s
(``raylet_start_wait_time_s`` in ray._private.node, not configurable), which a saturated machine exceeds:
CI saw the first registration query alone take 49 s. A retry would start the processes again from nothing;
waiting longer for the ones already starting is cheaper."""
START_FAILED = (
    "a local Ray did not start in {attempts} attempt(s) ({error}). The machine is probably too busy: free "
    "some CPU (or memory), raise DAPO_RAY_START_ATTEMPTS, or start a Ray head yourself (`ray start --head "
    "--port 6380`) and set RAY_ADDRESS to it; see docs/troubleshooting.md. Ray's logs: "
    "{temp}/session_latest/logs"
)


def var_dir() -> Path:
    """The project's runtime-state folder: ``$DAPO_VAR_DIR`` or ``./var``, as an absolute path."""
    return Path(os.environ.get("DAPO_VAR_DIR") or "var").resolve()


def ray_temp_dir() -> Path:
    """Temp dir of a local Ray: under var/ when its socket paths stay within the kernel's limit."""
    path = var_dir() / "ray"
    if len(str(path)) + SESSION_SUFFIX > SOCKET_PATH_LIMIT:
        path = Path(tempfile.gettempdir()) / f"dapo-ray-{os.getuid()}"
    return path


def free_port(host: str = "") -> int:
    """A TCP port that was free a moment ago (the OS's pick; never a well-known one such as 6379)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


LOCAL_AUTH_TOKEN = secrets.token_hex(32)
"""The token of every local Ray this process starts. One per process, not one per start: Ray reads the
token into the process once, so a second local Ray given a fresh token refuses the driver
(InvalidAuthToken)."""


def ensure_auth_token() -> None:
    """Give a local Ray a token in this process's environment, so Ray does not write ~/.ray/auth_token.

    Left alone when the user chose: RAY_AUTH_MODE, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH already set.
    """
    if any(os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")):
        return
    os.environ["RAY_AUTH_TOKEN"] = LOCAL_AUTH_TOKEN


@dataclass
class RayConnection:
    """This process's link to Ray; ``close()`` undoes exactly what ``connect()`` did."""

    address: str
    started_local: bool
    """True when connect() started a local Ray (it is stopped on close)."""
    owns_init: bool
    """True when connect() called ray.init (a caller who initialised Ray keeps it)."""

    @property
    def placement_timeout_s(self) -> float:
        return LOCAL_PLACEMENT_TIMEOUT_S if self.started_local else CLUSTER_PLACEMENT_TIMEOUT_S

    def close(self) -> None:
        import ray

        if self.owns_init and ray.is_initialized():
            ray.shutdown()


def loopback_only_local_ray() -> None:
    """Without RAY_ADDRESS (a local Ray), keep Ray's servers on loopback. Ray 2.60 turns 127.0.0.1 into the
    machine's address, so they listen on every interface, unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which
    it reads once, when ``ray`` is first imported: call this before any ``import ray`` of the process."""
    if not os.environ.get("RAY_ADDRESS", "").strip():
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def connect() -> RayConnection:
    """Join RAY_ADDRESS's cluster, or start a local Ray; reuse Ray when this process already joined one."""
    loopback_only_local_ray()
    import ray

    if ray.is_initialized():
        return RayConnection(ray.get_runtime_context().gcs_address, started_local=False, owns_init=False)
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if address:
        check_reachable(address)
        ray.init(address=address, logging_level=logging.WARNING)
        return RayConnection(address, started_local=False, owns_init=True)
    ensure_auth_token()
    temp = ray_temp_dir()
    temp.mkdir(parents=True, exist_ok=True)
    context = start_local(temp)
    gcs = context.address_info["gcs_address"]
    log.info("started a local Ray at %s (temp dir %s)", gcs, temp)
    return RayConnection(gcs, started_local=True, owns_init=True)


def start_local(temp: Path, attempts: int | None = None) -> Any:
    """``ray.init`` of a local Ray (module docstring), tried ``attempts`` times; raises RuntimeError with the
    fix when every try failed. A failed try's processes are killed before the next."""
    import ray

    for name, value in START_TIMEOUTS.items():
        os.environ.setdefault(name, value)  # read by the raylet and agents this process starts
    attempts = attempts or START_ATTEMPTS
    error: Exception | None = None
    for attempt in range(1, attempts + 1):
        before = set(descendants())
        try:
            with _agent_port_of_its_own(), patient_node_registration(NODE_REGISTER_WAIT_S):
                return ray.init(
                    num_cpus=os.cpu_count() or 1,
                    include_dashboard=False,
                    _temp_dir=str(temp),
                    logging_level=logging.WARNING,
                    _system_config={"gcs_rpc_server_reconnect_timeout_s": LOCAL_GCS_RECONNECT_TIMEOUT_S},
                )
        except Exception as e:  # Ray raises bare Exceptions ("The current node timed out during startup")
            error = e
            log.warning("local Ray, attempt %d of %d, did not start: %s", attempt, attempts, e)
            ray.shutdown()
            _kill([pid for pid in descendants() if pid not in before])
    raise RuntimeError(START_FAILED.format(attempts=attempts, error=error, temp=temp)) from error


@contextmanager
def _agent_port_of_its_own() -> Iterator[None]:
    """While ``ray.init`` builds its parameters: the dashboard agent's HTTP port picked by the OS. Ray fixes
    it at 52365, which a second Ray on the machine then waits for and retries (ray.init has no argument)."""
    from ray._private import parameter

    original = parameter.RayParams

    class OwnPorts(original):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("dashboard_agent_listen_port", 0)
            super().__init__(*args, **kwargs)

    setattr(parameter, "RayParams", OwnPorts)  # noqa: B010  (a class attribute mypy would refuse)
    try:
        yield
    finally:
        setattr(parameter, "RayParams", original)  # noqa: B010


@contextmanager
def patient_node_registration(wait_s: float) -> Iterator[None]:
    """While a local Ray starts: its node's registration with the GCS is awaited up to ``wait_s`` (module
    constant NODE_REGISTER_WAIT_S). Ray's Node.__init__ polls ``services.get_node`` and gives up 30 s after
    the first try; here each of its polls itself keeps asking until the node is there or ``wait_s`` ran
    out, so Ray's own 30 s only counts once ours is spent."""
    from ray._private import services

    original = services.get_node
    deadline = time.monotonic() + wait_s

    def get_node(gcs_address: str, node_id: str) -> Any:
        while True:
            try:
                return original(gcs_address, node_id)
            except RuntimeError:  # "not available yet" and an overloaded GCS's RPC deadline alike
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    setattr(services, "get_node", get_node)  # noqa: B010
    try:
        yield
    finally:
        setattr(services, "get_node", original)  # noqa: B010


def descendants(root: int | None = None) -> list[int]:
    """Every process below ``root`` (this one), from /proc; empty where there is no /proc."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def check_reachable(address: str, timeout_s: float | None = None) -> None:
    """Raise ConnectionError naming the address unless its head accepts a TCP connection within the timeout
    (``auto`` and other forms without a port are left to ray.init)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return
    timeout_s = CLUSTER_CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=min(5.0, timeout_s) or 1.0):
                return
        except OSError as e:
            if time.monotonic() >= deadline:
                reason = f"{e.strerror or e}, for {timeout_s:.0f} s"
                raise ConnectionError(
                    f"no Ray cluster answers at RAY_ADDRESS={address} ({reason}): start its head, or unset"
                    " RAY_ADDRESS to run on a local Ray"
                ) from None
            time.sleep(1.0)


def placement_strategy(requested: str | None = None) -> str:
    """The placement strategy: the argument, else $DAPO_RAY_PLACEMENT, else PACK."""
    name = (requested or os.environ.get("DAPO_RAY_PLACEMENT") or "PACK").upper()
    if name not in STRATEGIES:
        raise ValueError(f"unknown placement strategy {name!r}; valid: {', '.join(STRATEGIES)}")
    return name


class PlacementTimeout(RuntimeError):
    """Ray could not place a group of workers within the placement timeout."""


def reserve(bundles: list[dict[str, float]], strategy: str, timeout_s: float, name: str = "") -> Any:
    """A ready placement group of these bundles (one per worker), named ``name`` (dapo.cluster.state reads
    the run back from it); raises PlacementTimeout naming what is missing."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([dict(b) for b in bundles], strategy=strategy, name=name)
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        raise PlacementTimeout(
            f"Ray could not place {len(bundles)} worker(s) of {bundles[0]} ({strategy}) within "
            f"{timeout_s:.0f} s; "
            f"cluster resources: {ray.cluster_resources()}. Lower execution.cpus_per_worker / "
            "gpus_per_worker or the number of workers, or add nodes."
        )
    return group


def release(group: Any) -> None:
    """Remove a placement group (its actors must be gone or about to go)."""
    from ray.util.placement_group import remove_placement_group

    try:
        remove_placement_group(group)
    except Exception as exc:  # already removed, or Ray is shutting down: nothing left to free
        log.debug("placement group removal failed: %s", exc)
