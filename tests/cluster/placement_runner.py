"""A stand-in trainer that holds a run's real Ray resources (``tests.cluster.placement_runner:run``).

The cluster tests need runs that occupy a Ray cluster exactly as real runs do, but step in a fraction of a
second on a 2-core machine. This runner places the run's bundles with the product's own code
(``dapo.cluster.resources.request_for`` and ``ray_cluster.reserve``, on nodes that declare GPUs they do not
have), in a placement group named as the Ray backend names it, starts one small actor in each bundle, and
then steps every ``PLACEMENT_STEP_S`` seconds (0.3): it pings every actor, and hands a StepReport and, every
``checkpoint.every_n_steps``, a checkpoint to the sinks, with the trainer's sink protocol (on_start, on_step,
on_checkpoint; should_stop at a step boundary saves a checkpoint and ends "cancelled"; on_finish).

A ping that fails is handled as the Ray backend handles a lost actor: the product's detection
(``dapo.cluster.state.lost_workers``) asks Ray whether the node died; Ray is given
``PLACEMENT_RUNNER_TIMEOUT_S`` (10 s) to place the group again; then the run ends with a ``NodeLost`` error
string, as the trainer writes it. Every attempt appends lines to out_dir/invocations.jsonl: its pid, first
step, the nodes it was placed on, when it asked Ray for its bundles, got them and released them.

Also a command line, a run without the platform (its sink prints one JSON line per event):

    RAY_ADDRESS=... python -m tests.cluster.placement_runner --out DIR --gpus 1 --steps 40 [--resume]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from pathlib import Path
from typing import Any

from dapo.cluster.ray_cluster import PlacementTimeout, connect, release, reserve
from dapo.cluster.resources import request_for
from dapo.cluster.state import NodeLost, bundle_nodes, describe_loss, group_name, lost_workers
from dapo.loop.report import RunInfo, RunResult, Sink, StepReport
from dapo.runconfig import RunConfig

STEP_S = float(os.environ.get("PLACEMENT_STEP_S", "0.3"))
PLACEMENT_TIMEOUT_S = float(os.environ.get("PLACEMENT_RUNNER_TIMEOUT_S", "10"))
NODE_DEATH_WAIT_S = 15.0


class Pinger:
    """The actor in each bundle: it says where it runs, and which GPU Ray gave it (a fake one here)."""

    def where(self) -> dict[str, Any]:
        import ray

        context = ray.get_runtime_context()
        return {
            "node_id": context.get_node_id(),
            "gpus": [str(g) for g in context.get_accelerator_ids()["GPU"]],
        }


class Placed:
    """A run's placement group ("learner" role: the request's bundles) and one Pinger per bundle."""

    def __init__(self, config: RunConfig, label: str) -> None:
        import ray

        self.ray = ray
        self.bundles = request_for(config).ray_bundles("learner")
        self.group = reserve(self.bundles, "PACK", PLACEMENT_TIMEOUT_S, group_name(label, "learner"))
        self.placed = {"learner": bundle_nodes(ray, self.group)}
        self.actors = [self._spawn(i) for i in range(len(self.bundles))]
        self.where = ray.get([a.where.remote() for a in self.actors], timeout=60)

    def _spawn(self, index: int) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = self.bundles[index]
        strategy = PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=index)
        options = {"num_cpus": bundle.get("CPU", 0.0), "num_gpus": bundle.get("GPU", 0.0)}
        return self.ray.remote(Pinger).options(**options, scheduling_strategy=strategy).remote()

    def ping(self, tries: int = 3) -> None:
        """Every actor answers, or the lost ones are placed again, or NodeLost says which node took them."""
        for attempt in range(tries):
            try:
                self.ray.get([a.where.remote() for a in self.actors], timeout=30)
                return
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError) as exc:
                if attempt == tries - 1:
                    raise
                self._recover(exc)

    def _recover(self, exc: BaseException) -> None:
        from ray.util.placement_group import placement_group_table

        deadline = time.monotonic() + PLACEMENT_TIMEOUT_S
        try:
            while placement_group_table(self.group)["state"] != "CREATED" or not self._placed_again():
                if time.monotonic() >= deadline:
                    raise PlacementTimeout(
                        f"Ray could not place the run again within {PLACEMENT_TIMEOUT_S} s"
                    )
                time.sleep(0.5)
        except PlacementTimeout as timeout:
            lost = lost_workers(self.ray, self.placed, NODE_DEATH_WAIT_S)
            if not lost:
                raise
            raise NodeLost(describe_loss("a step", lost, exc)) from timeout
        self.placed = {"learner": bundle_nodes(self.ray, self.group)}
        self.actors = [self._spawn(i) for i in range(len(self.bundles))]

    def _placed_again(self) -> bool:
        """The group stands on live nodes only (Ray reports CREATED until it notices the node died)."""
        return not lost_workers(self.ray, {"learner": bundle_nodes(self.ray, self.group)}, 0)

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor, no_restart=True)
        release(self.group)


def run(
    config: RunConfig,
    *,
    out_dir: str | Path,
    sinks: list[Sink],
    resume: bool = False,
    resume_from: str | Path | None = None,
) -> RunResult:
    out = Path(out_dir)
    step = _step_of(Path(resume_from)) if resume_from else _latest(out) if resume else 0
    total, every = config.optim.total_steps, config.checkpoint.every_n_steps
    status, error = "succeeded", None
    connection = connect()
    placed: Placed | None = None
    try:
        asked = time.time()
        placed = Placed(config, out.name)
        held = {"gpus": sum(b.get("GPU", 0.0) for b in placed.bundles), "placed_at": time.time()}
        _note(
            out,
            {"pid": os.getpid(), "start_step": step + 1, "where": placed.where, "asked_at": asked, **held},
        )
        info = RunInfo(run_dir=str(out), total_steps=total, start_step=step + 1, config=config.to_dict())
        _emit(sinks, "on_start", info)
        while step < total:
            if any(s.should_stop() for s in sinks):
                status = "cancelled"
                _save(out, step, sinks)
                break
            time.sleep(STEP_S)
            placed.ping()
            step += 1
            _emit(
                sinks, "on_step", StepReport(step, {"critic/score/mean": step / total}, wall_time=time.time())
            )
            if every and step % every == 0:
                _save(out, step, sinks)
    except Exception as exc:  # as the trainer: the run fails with "TypeName: message"
        status, error = "failed", f"{type(exc).__name__}: {exc}"
        _note(out, {"pid": os.getpid(), "error": error, "traceback": traceback.format_exc()})
    finally:
        if placed is not None:
            placed.close()
            _note(out, {"pid": os.getpid(), "released_at": time.time(), "last_step": step})
        connection.close()
    _emit(sinks, "on_finish", status, error)
    return RunResult(status=status, last_step=step, error=error)


def _emit(sinks: list[Sink], method: str, *args: Any) -> None:
    for sink in sinks:
        getattr(sink, method)(*args)


def _note(out: Path, record: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "invocations.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")


def _latest(out: Path) -> int:
    return max((_step_of(p) for p in (out / "checkpoints").glob("step_*")), default=0)


def _step_of(checkpoint: Path) -> int:
    return int(json.loads((checkpoint / "trainer.json").read_text())["step"])


def _save(out: Path, step: int, sinks: list[Sink]) -> None:
    path = out / "checkpoints" / f"step_{step:06d}"
    path.mkdir(parents=True, exist_ok=True)
    (path / "trainer.json").write_text(json.dumps({"step": step}))
    _emit(sinks, "on_checkpoint", step, str(path))


class PrintingSink(Sink):
    """Each event as a JSON line on stdout: what a test reads while the run goes on."""

    def on_start(self, info: RunInfo) -> None:
        _print({"event": "start", "start_step": info.start_step})

    def on_step(self, report: StepReport) -> None:
        _print({"event": "step", "step": report.step, "metrics": report.metrics})

    def on_checkpoint(self, step: int, path: str) -> None:
        _print({"event": "checkpoint", "step": step, "path": path})

    def on_finish(self, status: str, error: str | None = None) -> None:  # type: ignore[override]
        _print({"event": "finish", "status": status, "error": error})


def _print(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def config_for(gpus_per_run: int, steps: int, every: int = 2) -> RunConfig:
    """A run of ``gpus_per_run`` one-GPU learners (one bundle each, a tenth of a CPU beside its GPU)."""
    from dataclasses import replace

    base = RunConfig()
    execution = replace(
        base.execution,
        backend="ray",
        num_learner_workers=gpus_per_run,
        gpus_per_worker=1.0,
        cpus_per_worker=0.1,
    )
    optim = replace(base.optim, total_steps=steps)
    return replace(
        base, execution=execution, optim=optim, checkpoint=replace(base.checkpoint, every_n_steps=every)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    result = run(
        config_for(args.gpus, args.steps), out_dir=args.out, sinks=[PrintingSink()], resume=args.resume
    )
    return 0 if result.status == "succeeded" else 1


if __name__ == "__main__":
    raise SystemExit(main())
