"""Helpers of the Ray backend tests: a tiny model and dataset, a tiny run config, a recording sink, and a
real two-node Ray cluster on this machine that stops only what it started.

Also a command line, the controller of the two-node test (it runs in its own process, so its Ray
connection and authentication settings never mix with those of the test process):

    python -m tests.dapo.ray_helpers two-node --root DIR     # RAY_ADDRESS points at the cluster
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from dapo.loop.report import Sink, StepReport
from dapo.runconfig import (
    AlgorithmConfig,
    CheckpointConfig,
    DataConfig,
    ExecutionConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    RunConfig,
    ValidationConfig,
)

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))


def build_tiny_assets(root: Path) -> tuple[Path, Path]:
    """The demo's tokenizer and an untrained demo-shaped Llama (seed 0) under root/model, and 32 arithmetic
    problems under root/train.parquet. Returns (model dir, parquet path)."""
    from dapo.data.demo import build_model, build_tokenizer, make_arithmetic_problems
    from dapo.data.problems import write_parquet

    model_dir, data = root / "model", root / "train.parquet"
    if not (model_dir / "config.json").is_file():
        tokenizer = build_tokenizer()
        model = build_model(tokenizer, seed=0)
        model.save_pretrained(model_dir, safe_serialization=True)
        tokenizer.save_pretrained(model_dir)
        write_parquet(make_arithmetic_problems(32, seed=1), data)
    return model_dir, data


def tiny_config(root: Path, *, steps: int = 2, **execution: Any) -> RunConfig:
    """A run that takes seconds: 4 prompts x 4 samples per step, 16 new tokens, two mini-batches of 8 rows
    in micro-batches of 3 (uneven on purpose), no dynamic sampling (an untrained model never answers)."""
    model_dir, data = build_tiny_assets(root)
    defaults = {"backend": "ray", "cpus_per_worker": 0.5, "torch_threads": 1}
    return RunConfig(
        model=ModelConfig(path=str(model_dir), dtype="float32", device="cpu"),
        data=DataConfig(
            train_path=str(data), val_path="", max_prompt_length=64, train_batch_size=4, gen_batch_size=4
        ),
        rollout=RolloutConfig(engine="hf", n=4, max_response_length=16),
        algorithm=AlgorithmConfig(dynamic_sampling=False, overlong_buffer_len=4),
        optim=OptimConfig(lr=1e-3, warmup_steps=0, mini_batch_size=2, micro_batch_size=3, total_steps=steps),
        validation=ValidationConfig(every_n_steps=0),
        checkpoint=CheckpointConfig(every_n_steps=0, keep_last=1),
        execution=ExecutionConfig(**{**defaults, **execution}),
        seed=3,
    )


def local_twin(config: RunConfig) -> RunConfig:
    """The same run on the one-process backend."""
    return replace(config, execution=replace(config.execution, backend="local"))


class RecordingSink(Sink):
    """Keeps every step report; ``on_step_hook(report)`` runs after each (to kill an actor mid-run)."""

    def __init__(self, on_step_hook: Any = None) -> None:
        self.reports: list[StepReport] = []
        self.finished: tuple[str, str | None] | None = None
        self.on_step_hook = on_step_hook

    def on_step(self, report: StepReport) -> None:
        self.reports.append(report)
        if self.on_step_hook is not None:
            self.on_step_hook(report)

    def on_finish(self, status: str, error: str | None = None) -> None:  # type: ignore[override]
        self.finished = (status, error)


def worker_port_ranges() -> Iterator[int]:
    """The low ends of 20-port ranges for ``ray start --min-worker-port``, below the kernel's ephemeral
    range (32768-60999) where ``free_port()``'s picks for the other ports lie: a range inside it once held
    a node's dashboard-agent port, and Ray refused to start ("used by other components")."""
    from dapo.cluster.ray_cluster import free_port

    return iter(range(20000 + (free_port() % 300) * 20, 32760, 20))


NODE_PORT_FLAGS = (
    "--node-manager-port",
    "--object-manager-port",
    "--dashboard-agent-listen-port",
    "--metrics-export-port",
    "--runtime-env-agent-port",
)
"""The ports of a ``ray start`` node that default to fixed numbers or that two Rays on one machine share."""


def node_port_args(flags: tuple[str, ...], taken: tuple[int, ...] = ()) -> list[str]:
    """``flag port`` pairs for ``ray start``: ports free now, distinct, and none of ``taken`` (a port picked
    earlier and not bound yet, such as the head's GCS port). Picked together: picked one at a time, two
    flags once got the same port and Ray refused to start ("Ray component metrics_export is trying to use a
    port number ... that is used by other components")."""
    from scripts.stack import free_ports

    ports = [p for p in free_ports(len(flags) + len(taken), host="") if p not in taken]
    return [x for flag, port in zip(flags, ports, strict=False) for x in (flag, str(port))]


PORT_RACE = re.compile(r"is trying to use a port number \d+ that is used|[Aa]ddress already in use")


def lost_a_port_race(log: Path) -> bool:
    """Whether a ``ray start`` that exited did so because one of its ports was taken: by a collision of its
    own picks, or by another process between our pick and Ray's bind (the suite's other workers connect and
    listen all the time). Such a start is tried once more with fresh ports."""
    try:
        return bool(PORT_RACE.search(log.read_text(errors="replace")))
    except OSError:
        return False


def start_node(launch: Callable[[], subprocess.Popen], wait: Callable[[], None], log: Path) -> None:
    """``launch`` a ``ray start`` node (it writes to ``log``) and ``wait`` until it is up; once more with
    fresh ports if it exited on a port race (``lost_a_port_race``), its first log kept as ``NAME-try1.log``.
    Any other failure, or a second race, is raised."""
    for attempt in (1, 2):
        proc = launch()
        try:
            wait()
            return
        except RuntimeError:
            if attempt == 2 or proc.poll() is None or not lost_a_port_race(log):
                raise
            log.rename(log.with_name(f"{log.stem}-try1.log"))


class TwoNodeCluster:
    """``ray start --head`` plus a second ``ray start --address`` (custom resource ``node2``), each with
    its own free ports and 2 CPUs, in their own process groups; ``stop()`` kills exactly those groups
    (``ray stop`` would kill every Ray on the machine)."""

    def __init__(self, temp_dir: Path) -> None:
        import secrets

        from dapo.cluster.ray_cluster import free_port

        self.temp_dir = temp_dir
        self.ip = _node_ip()
        self.port = free_port()
        assert self.port != 6379
        self.env = {
            **os.environ,
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(16),
            "RAY_USAGE_STATS_ENABLED": "0",
            "PYTHONPATH": str(REPO),
        }
        self.env.pop("RAY_ADDRESS", None)
        # a local Ray of this process (dapo.cluster.ray_cluster.connect) keeps to loopback with this; a
        # cluster of two nodes must not
        self.env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
        self.nodes: dict[str, subprocess.Popen] = {}
        """The node of each name (the head is "head"): a start tried again replaces the one that exited."""
        self.procs: list[subprocess.Popen] = []
        """Every ``ray start``, failed ones too: stop() and leftover_pids() see them all."""
        self._worker_ports = worker_port_ranges()

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    def start(self) -> None:
        self._start_node("head", ["--head", "--port", str(self.port), "--include-dashboard", "false"])
        self._start_node("node2", ["--address", self.address, "--resources", '{"node2": 2}'])

    def _start_node(self, name: str, args: list[str]) -> None:
        log = self.temp_dir.parent / f"{name}.log"
        start_node(partial(self._launch, name, args), lambda: self._wait_for_nodes(len(self.nodes)), log)

    def _launch(self, name: str, args: list[str]) -> subprocess.Popen:
        low = next(self._worker_ports)
        flags = NODE_PORT_FLAGS + (("--dashboard-port",) if "--head" in args else ())
        cmd = [
            RAY,
            "start",
            "--block",
            *args,
            "--node-ip-address",
            self.ip,
            "--num-cpus",
            "2",
            "--temp-dir",
            str(self.temp_dir),
            "--disable-usage-stats",
            *node_port_args(flags, taken=(self.port,)),
            "--min-worker-port",
            str(low),
            "--max-worker-port",
            str(low + 19),
        ]
        log = open(self.temp_dir.parent / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        self.nodes[name] = subprocess.Popen(
            cmd, env=self.env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs.append(self.nodes[name])
        return self.nodes[name]

    def _wait_for_nodes(self, count: int, timeout_s: float = 60.0) -> None:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if any(p.poll() is not None for p in self.nodes.values()):
                raise RuntimeError(f"ray start exited; see the logs in {self.temp_dir.parent}")
            if self.alive_nodes() >= count:
                return
            time.sleep(1.0)
        raise TimeoutError(f"{count} Ray node(s) not up within {timeout_s} s")

    def alive_nodes(self) -> int:
        return alive_nodes(self.address, self.env)

    def stop(self) -> None:
        stop_groups(self.procs)

    def leftover_pids(self) -> list[int]:
        return leftover_pids(self.procs)


def _node_ip() -> str:
    # Ray rewrites 127.0.0.1 in an address to the machine's routable IP, so the nodes must use that one.
    from ray.util import get_node_ip_address

    return get_node_ip_address()


def alive_nodes(address: str, env: dict[str, str]) -> int:
    """Active nodes, from ``ray status`` (which reads the GCS; ``ray list`` would need a dashboard)."""
    out = subprocess.run([RAY, "status", "--address", address], env=env, capture_output=True, text=True)
    active = out.stdout.split("Active:")[-1].split("Pending:")[0] if "Active:" in out.stdout else ""
    return sum(int(m) for m in re.findall(r"^\s*(\d+) node_", active, flags=re.MULTILINE))


def stop_groups(procs: list[subprocess.Popen]) -> None:
    """SIGTERM the process group of each of ``procs`` (``ray start`` with a session of its own), SIGKILL what
    is left after 3 s, then reap them."""
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        for p in procs:
            kill_group(p.pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(_group_alive(p.pid) for p in procs):
            time.sleep(0.2)
    for p in procs:
        p.wait(timeout=5)


def leftover_pids(procs: list[subprocess.Popen]) -> list[int]:
    return [p.pid for p in procs if _group_alive(p.pid)]


def kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def two_node_controller(root: Path) -> dict[str, Any]:
    """Two DAPO steps on RAY_ADDRESS's cluster, two learners and two rollout workers spread over the nodes;
    returns where each worker ran and the run's outcome."""
    from dapo.cluster.ray_backend import RayBackend
    from dapo.loop.trainer import Trainer

    config = tiny_config(root, num_learner_workers=2, num_rollout_workers=2, colocate=False)
    backend = RayBackend(config, placement="STRICT_SPREAD")
    try:
        import ray

        sink = RecordingSink()
        result = Trainer(config, root / "run", [sink], backend=backend).fit()
        return {
            "status": result.status,
            "error": result.error,
            "steps": [r.step for r in sink.reports],
            "losses": [r.metrics.get("actor/pg_loss") for r in sink.reports],
            "placement": backend.placement(),
            "nodes": [n["NodeID"] for n in ray.nodes() if n["Alive"]],
            "checksums": ray.get([a.weights_checksum.remote() for a in backend.learners + backend.rollouts]),
        }
    finally:
        backend.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["two-node"])
    parser.add_argument("--root", type=Path, required=True)
    args = parser.parse_args(argv)
    print("RESULT " + json.dumps(two_node_controller(args.root)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
