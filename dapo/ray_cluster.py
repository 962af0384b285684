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
      - token authentication stays on, but the token lives only in this process's environment
        (``RAY_AUTH_TOKEN``), so nothing is written to ``~/.ray/auth_token``.

Placement: each group of workers (the learners; the rollout workers in split mode) gets one placement
group with one bundle ``{CPU: cpus_per_worker, GPU: gpus_per_worker}`` per worker, so a worker's CPUs and
GPU come from one node. The strategy is ``PACK`` (fill a node first) unless the backend is given another
(``SPREAD``, ``STRICT_PACK``, ``STRICT_SPREAD``) or ``DAPO_RAY_PLACEMENT`` names one.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import tempfile
import time
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
    context = ray.init(
        num_cpus=os.cpu_count() or 1,
        include_dashboard=False,
        _temp_dir=str(temp),
        logging_level=logging.WARNING,
        _system_config={"gcs_rpc_server_reconnect_timeout_s": LOCAL_GCS_RECONNECT_TIMEOUT_S},
    )
    gcs = context.address_info["gcs_address"]  # type: ignore[attr-defined]
    log.info("started a local Ray at %s (temp dir %s)", gcs, temp)
    return RayConnection(gcs, started_local=True, owns_init=True)


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


def worker_bundle(cpus: float, gpus: float) -> dict[str, float]:
    """One worker's resources; a worker that asks for nothing still holds a sliver of a CPU (Ray needs one
    resource per bundle)."""
    bundle = {"CPU": cpus} if cpus > 0 else {}
    if gpus > 0:
        bundle["GPU"] = gpus
    return bundle or {"CPU": 0.01}


def reserve(count: int, bundle: dict[str, float], strategy: str, timeout_s: float) -> Any:
    """A ready placement group of ``count`` identical bundles; raises RuntimeError naming what is missing."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([dict(bundle) for _ in range(count)], strategy=strategy)
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        raise RuntimeError(
            f"Ray could not place {count} worker(s) of {bundle} ({strategy}) within {timeout_s:.0f} s; "
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
