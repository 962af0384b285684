"""Overhead of the Ray backend: time per DAPO step on Ray (one colocated worker) against one process.

The demo task (``tiny_cpu`` preset on the demo model and data, built first if missing), the same config
on both backends, side by side: each round runs ``--warmup`` + ``--steps`` steps on each backend
(alternating which goes first), and the warm-up steps are dropped. Both backends restart from step 1
every round with the same seed, and a one-worker Ray run draws exactly the one-process samples, so both
do identical work in every round (the policy keeps training across rounds on both sides in lockstep).
Reported: the median seconds per step of each backend (checkpoint time excluded), median phase times,
and the ratio Ray / local. Use --threads 1 on a machine whose cores are busy with other work: torch's
threads then thrash, and the figures measure the contention rather than the backends.

    .venv/bin/python bench/ray_overhead.py                       # 3 rounds x (1 warm-up + 3 steps), 2 threads
    .venv/bin/python bench/ray_overhead.py --rounds 2 --steps 2 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dapo.loop.report import Sink, StepReport  # noqa: E402
from dapo.runconfig import RunConfig  # noqa: E402

PHASES = ("gen", "reward", "old_log_prob", "update_actor")


class StepTimes(Sink):
    """Collects each step's timings."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []

    def on_step(self, report: StepReport) -> None:
        m = report.metrics
        step = m["timing_s/step_train"]  # the step without validation and checkpoint time
        self.steps.append({"step": step, **{p: m.get(f"timing_s/{p}", 0.0) for p in PHASES}})


def default_demo_dir() -> Path:
    shipped = Path("assets/demo")
    return shipped if (shipped / "manifest.json").is_file() else Path("var/demo")


def demo_config(demo_dir: Path, threads: int, steps: int) -> RunConfig:
    """tiny_cpu on the demo, no validation, one checkpoint (the last step's, whose time is excluded)."""
    from dapo.runconfig.presets import tiny_cpu

    c = tiny_cpu()
    return replace(
        c,
        model=replace(c.model, path=str(demo_dir / "model")),
        data=replace(c.data, train_path=str(demo_dir / "data" / "train.parquet"), val_path=""),
        optim=replace(c.optim, total_steps=steps),
        validation=replace(c.validation, every_n_steps=0),
        checkpoint=replace(c.checkpoint, every_n_steps=0, keep_last=1),
        execution=replace(
            c.execution,
            backend="local",
            torch_threads=threads,
            cpus_per_worker=float(threads),
            num_learner_workers=1,
            num_rollout_workers=1,
            colocate=True,
        ),
    )


def run_round(config: RunConfig, backend: Any, out_dir: Path, warmup: int) -> list[dict[str, float]]:
    from dapo.loop.trainer import Trainer

    sink = StepTimes()
    result = Trainer(config, out_dir, [sink], backend=backend).fit()
    if result.status != "succeeded":
        raise RuntimeError(f"benchmark run failed: {result.error}")
    return sink.steps[warmup:]


def summarise(steps: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(s[key] for s in steps) for key in ("step", *PHASES)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--demo-dir",
        type=Path,
        default=default_demo_dir(),
        help="the demo (default: assets/demo if built, else var/demo, built when missing)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="steps dropped at the start of each round")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per backend per round")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (and Ray CPUs of the worker)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    from dapo.cluster.backends import LocalBackend
    from dapo.cluster.ray_backend import RayBackend
    from dapo.data.demo import ensure_demo

    demo = ensure_demo(args.demo_dir).resolve()
    local_config = demo_config(demo, args.threads, args.warmup + args.steps)
    ray_config = replace(local_config, execution=replace(local_config.execution, backend="ray"))
    backends = {
        "local": (local_config, LocalBackend(local_config)),
        "ray": (ray_config, RayBackend(ray_config)),
    }
    times: dict[str, list[dict[str, float]]] = {"local": [], "ray": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):
                order = ["local", "ray"] if r % 2 == 0 else ["ray", "local"]
                for name in order:
                    config, backend = backends[name]
                    times[name] += run_round(config, backend, Path(tmp) / f"{name}-{r}", args.warmup)
                    print(
                        f"round {r + 1}/{args.rounds} {name}: "
                        + " ".join(f"{s['step']:.2f}" for s in times[name][-args.steps :]),
                        flush=True,
                    )
    finally:
        backends["ray"][1].close()
    report(times, args)
    return 0


def report(times: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> None:
    """Medians per backend, the ratio of the medians, and the median of per-round ratios (each round's
    pair ran back to back, so this one is less exposed to other work on the machine)."""
    summary = {name: summarise(steps) for name, steps in times.items()}
    ratio = summary["ray"]["step"] / summary["local"]["step"]
    k = args.steps
    paired = statistics.median(
        statistics.median(s["step"] for s in times["ray"][i : i + k])
        / statistics.median(s["step"] for s in times["local"][i : i + k])
        for i in range(0, len(times["local"]), k)
    )
    print(f"\nmedian seconds per step over {len(times['local'])} steps each ({args.threads} threads):")
    print(f"{'backend':8} {'step':>7} " + " ".join(f"{p:>13}" for p in PHASES))
    for name, s in summary.items():
        print(f"{name:8} {s['step']:7.3f} " + " ".join(f"{s[p]:13.3f}" for p in PHASES))
    load = os.getloadavg()
    print(f"ray / local = {ratio:.3f} ({(ratio - 1) * 100:+.1f}%); median of per-round ratios {paired:.3f}")
    print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs")
    if args.json:
        out = {"summary": summary, "ratio": ratio, "paired_ratio": paired, "load": load, "steps": times}
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    raise SystemExit(main())
