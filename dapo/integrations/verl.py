"""verl on the platform: follow a running verl job's files into an external run, or send a finished one.

    python -m dapo.integrations.verl follow DIR --url http://platform:8000 --token TOKEN [--name NAME]
    python -m dapo.integrations.verl send DIR --url ... --token ...      # a finished run, once

DIR holds what verl writes (the formats: ``dapo.integrations.verl_files``), found by these names unless
given: ``rollout/`` (``trainer.rollout_data_dir``), ``validation/`` (``trainer.validation_data_dir``), the
metric records ``metrics.jsonl`` (the file backend: set ``VERL_FILE_LOGGER_PATH=DIR/metrics.jsonl``), else
the one ``*.jsonl`` in DIR, else ``*.log`` (the console backend's output, saved with ``| tee``), and the
config ``config.json``, ``config.yaml`` or ``.hydra/config.yaml``. ``follow`` reads every file as it grows
(complete lines only, a line being written waits for the next poll) and sends the new metric points and
samples; it ends when interrupted (Ctrl-C) or, with ``--idle-exit-s``, after that long without a new line,
and then marks the run succeeded. A lost server never stops it: records are buffered and retried
(``dapo.integrations.sender``). A finished run can also be imported on the server (``manage.py
import_run DIR --owner USER``) or uploaded in the browser (the runs list's "Import a verl run").
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dapo.client import Client
from dapo.integrations.sender import Sender
from dapo.integrations.verl_files import (
    DumpReader,
    VerlFormatError,
    dump_step,
    metric_points,
    read_config,
)

log = logging.getLogger("dapo.integrations")


@dataclass
class Layout:
    """Where a verl run's files are (None: not there)."""

    rollout: Path | None
    validation: Path | None
    metrics: Path | None
    config: Path | None

    @classmethod
    def find(cls, root: Path, **given: Path | None) -> Layout:
        def first(*candidates: Path) -> Path | None:
            return next((c for c in candidates if c.exists()), None)

        jsonl = sorted(root.glob("*.jsonl"))
        metrics = given.get("metrics") or first(root / "metrics.jsonl")
        if metrics is None and len(jsonl) == 1:
            metrics = jsonl[0]
        if metrics is None:
            metrics = next(iter(sorted(root.glob("*.log"))), root / "metrics.jsonl")  # a job yet to log
        return cls(  # folders a job has not made yet are read once they appear
            rollout=given.get("rollout") or root / "rollout",
            validation=given.get("validation") or root / "validation",
            metrics=metrics,
            config=given.get("config")
            or first(root / "config.json", root / "config.yaml", root / ".hydra" / "config.yaml"),
        )


@dataclass
class Follower:
    """Reads each of a layout's files from where it stopped: ``poll()`` returns the new points and samples."""

    layout: Layout
    offsets: dict[Path, int] = field(default_factory=dict)
    lines: dict[Path, int] = field(default_factory=dict)
    readers: dict[Path, DumpReader] = field(default_factory=dict)

    def poll(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        points: list[dict[str, Any]] = []
        if self.layout.metrics is not None and self.layout.metrics.is_file():
            new, first = self._new_lines(self.layout.metrics)
            points = metric_points(str(self.layout.metrics), new, first)
        samples: list[dict[str, Any]] = []
        for folder, split in ((self.layout.rollout, "train"), (self.layout.validation, "val")):
            if folder is None or not folder.is_dir():
                continue
            dumps = sorted(
                (p for p in folder.iterdir() if dump_step(p.name) is not None),
                key=lambda p: dump_step(p.name) or 0,
            )
            for path in dumps:
                new, _ = self._new_lines(path)
                if new:
                    reader = self.readers.setdefault(
                        path, DumpReader(str(path), dump_step(path.name) or 0, split)
                    )
                    samples += reader.samples(new)
        return points, samples

    def _new_lines(self, path: Path) -> tuple[list[str], int]:
        """The complete lines added to ``path`` since the last read, and the number of the first one."""
        offset = self.offsets.get(path, 0)
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next read
        lines = data[:end].decode("utf-8", errors="replace").splitlines()
        self.offsets[path] = offset + end
        first = self.lines.get(path, 0) + 1
        self.lines[path] = first - 1 + len(lines)
        return lines, first


def config_of(layout: Layout) -> dict[str, Any]:
    return read_config(layout.config) if layout.config is not None else {}


def total_steps(config: dict[str, Any]) -> int:
    trainer = config.get("trainer") if isinstance(config.get("trainer"), dict) else {}
    steps = (trainer or {}).get("total_training_steps")
    return steps if isinstance(steps, int) and steps > 0 else 0


def follow(
    root: Path,
    sender: Sender,
    *,
    name: str,
    layout: Layout,
    poll_s: float = 2.0,
    idle_exit_s: float = 0.0,
    once: bool = False,
) -> None:
    """Send ``root``'s records as they grow (``once``: what is there now), then mark the run succeeded."""
    follower = Follower(layout)
    config = config_of(layout)
    sender.start(name, "verl", config, total_steps(config))
    last_new = time.monotonic()
    try:
        while True:
            points, samples = follower.poll()
            for point in points:
                sender.metrics(point["step"], point["metrics"])
            sender.samples(samples)
            if points or samples:
                last_new = time.monotonic()
            if once or (idle_exit_s and time.monotonic() - last_new > idle_exit_s):
                break
            time.sleep(poll_s)
    except KeyboardInterrupt:
        log.info("dapo: interrupted; sending what was read")
    sender.finish("succeeded", timeout_s=60.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dapo.integrations.verl", description=__doc__.split("\n")[0]
    )
    parser.add_argument("command", choices=["follow", "send"], help="follow: as the files grow; send: once")
    parser.add_argument("dir", type=Path, help="the folder of the verl run's files")
    parser.add_argument("--url", help="the platform (default $DAPO_URL)")
    parser.add_argument("--token", help="your API token (default $DAPO_TOKEN)")
    parser.add_argument("--name", help="the run's name (default: the folder's)")
    parser.add_argument("--rollout-dir", type=Path, help="trainer.rollout_data_dir (default DIR/rollout)")
    parser.add_argument(
        "--validation-dir", type=Path, help="trainer.validation_data_dir (default DIR/validation)"
    )
    parser.add_argument("--metrics", type=Path, help="the file or console backend's records")
    parser.add_argument("--config", type=Path, help="verl's config, JSON or YAML")
    parser.add_argument("--poll-s", type=float, default=2.0, help="seconds between reads (follow)")
    parser.add_argument(
        "--idle-exit-s", type=float, default=0.0, help="stop after this long with nothing new"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not args.dir.is_dir():
        parser.error(f"{args.dir} is not a folder")
    layout = Layout.find(
        args.dir,
        rollout=args.rollout_dir,
        validation=args.validation_dir,
        metrics=args.metrics,
        config=args.config,
    )
    client = Client(args.url, args.token)
    sender = Sender(lambda: client)
    try:
        follow(
            args.dir,
            sender,
            name=args.name or args.dir.resolve().name,
            layout=layout,
            poll_s=args.poll_s,
            idle_exit_s=args.idle_exit_s,
            once=args.command == "send",
        )
    except VerlFormatError as e:
        sender.finish("failed", error=str(e), timeout_s=10.0)
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"run: {sender.run_url or 'not created (the server never answered)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
