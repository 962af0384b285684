"""Command line: train headless, on one process or on a Ray cluster.

    python -m dapo.train --preset tiny_cpu --out var/runs/demo
    python -m dapo.train --config run.json --out var/runs/x --set optim.lr=1e-5 --set rollout.n=4
    python -m dapo.train --out var/runs/demo --resume          # continue from the newest checkpoint
    python -m dapo.train --list-presets | --describe           # presets / every config field with its help

Writes metrics.jsonl, samples.jsonl, events.jsonl, config.json and checkpoints/ under --out.
Exit status: 0 succeeded, 1 the run failed, 2 bad arguments or config, 130 cancelled.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from dapo.config import ConfigError, RunConfig, describe_fields
from dapo.presets import PRESETS, get_preset, preset_descriptions
from dapo.report import Sink


class _SignalStop(Sink):
    """Ctrl-C / SIGTERM asks the trainer to stop at the next step boundary (after a checkpoint)."""

    def __init__(self) -> None:
        self.stop = False
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.stop:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.stop = True
        print("\nstopping after this step (Ctrl-C again to abort now)", file=sys.stderr)

    def should_stop(self) -> bool:
        return self.stop


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m dapo.train", description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", choices=sorted(PRESETS), help="start from a named preset")
    src.add_argument("--config", type=Path, help="a run config JSON file (see --describe)")
    p.add_argument("--out", type=Path, help="run directory (metrics, samples, checkpoints)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a field, VALUE as JSON (e.g. optim.lr=1e-5, algorithm.clip_c=null)",
    )
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint under --out")
    p.add_argument("--list-presets", action="store_true", help="list presets and exit")
    p.add_argument("--describe", action="store_true", help="list every config field with its help and exit")
    p.add_argument("--print-config", action="store_true", help="print the resolved config JSON and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def resolve_config(args: argparse.Namespace) -> RunConfig:
    if args.config:
        try:
            config = RunConfig.load(args.config)
        except OSError as e:
            raise ConfigError({"--config": f"cannot read {args.config}: {e.strerror}"}) from None
    elif args.resume and args.out and (args.out / "config.json").is_file():
        config = RunConfig.load(args.out / "config.json")
    else:
        config = get_preset(args.preset or "tiny_cpu")
    overrides = {}
    for item in args.set:
        name, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError({"--set": f"expected FIELD=VALUE, got {item!r}"})
        try:
            overrides[name.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            overrides[name.strip()] = raw  # a bare string: --set model.path=/models/x
    return config.with_overrides(overrides) if overrides else config


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list_presets:
        for name, doc in preset_descriptions().items():
            print(f"{name:26s} {doc}")
        return 0
    if args.describe:
        for f in describe_fields():
            print(f"{f['name']:40s} {f['type']:7s} default {json.dumps(f['default'])}\n    {f['help']}")
        return 0
    try:
        config = resolve_config(args)
    except ConfigError as e:
        print("invalid config:", *(f"  {k}: {v}" for k, v in e.errors.items()), sep="\n", file=sys.stderr)
        return 2
    if args.print_config:
        print(config.to_json(indent=2))
        return 0
    if args.out is None:
        print("--out DIR is required to train", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from dapo.runner import run
    from dapo.sinks import ConsoleSink, JsonlSink

    sinks: list[Sink] = [JsonlSink(args.out), _SignalStop()]
    if not args.quiet:
        sinks.append(ConsoleSink())
    result = run(config, out_dir=args.out, sinks=sinks, resume=args.resume)
    print(json.dumps({"status": result.status, "last_step": result.last_step, "error": result.error}))
    return {"succeeded": 0, "cancelled": 130}.get(result.status, 1)


if __name__ == "__main__":
    sys.exit(main())
