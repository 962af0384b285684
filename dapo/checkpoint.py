"""Resumable checkpoints: policy and optimiser state, the data order, and the step.

Layout: ``<run dir>/checkpoints/step_000010/{state.pt, trainer.json}``. A checkpoint is written into a
temporary folder and renamed into place, so a crash mid-write never leaves a checkpoint that looks whole.
Sampling seeds are a function of (seed, step, round), so a run resumed from step k draws the same
samples and follows the same curves as one that never stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from dapo.config import RunConfig

PREFIX = "step_"


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message says where and why."""


def check_writable(run_dir: Path) -> None:
    """Fail at start-up, not after an hour of training, when the run directory is not writable."""
    probe = run_dir / ".write-probe"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe.write_text("ok", encoding="ascii")
        probe.unlink()
    except OSError as e:
        raise CheckpointError(f"run directory {run_dir} is not writable: {e.strerror or e}") from None


def checkpoints(run_dir: Path) -> list[Path]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.startswith(PREFIX) and (p / "trainer.json").is_file()]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX) :]))


def latest(run_dir: Path) -> Path | None:
    found = checkpoints(run_dir)
    return found[-1] if found else None


def save(
    run_dir: Path,
    step: int,
    backend: Any,
    stream: Any,
    config: RunConfig,
    *,
    save_optimizer: bool = True,
    keep_last: int = 0,
) -> Path:
    root = Path(run_dir) / "checkpoints"
    final = root / f"{PREFIX}{step:06d}"
    tmp = root / f".tmp-{PREFIX}{step:06d}-{os.getpid()}"
    state = backend.state_dict()
    if not save_optimizer:
        state.pop("optimizer", None)
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        torch.save(state, tmp / "state.pt")
        meta = {
            "step": step,
            "stream": stream.state_dict(),
            "config": config.to_dict(),
            "saved_at": time.time(),
        }
        (tmp / "trainer.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except (OSError, RuntimeError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"could not write checkpoint {final}: {e}") from None
    _prune(root, keep_last)
    return final


def load(path: Path, backend: Any, stream: Any) -> int:
    """Restore a checkpoint into the backend and the data stream; returns its step."""
    path = Path(path)
    try:
        meta = json.loads((path / "trainer.json").read_text(encoding="utf-8"))
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
    except (OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"could not read checkpoint {path}: {e}") from None
    backend.load_state_dict(state)
    stream.load_state_dict(meta["stream"])
    return int(meta["step"])


def _prune(root: Path, keep_last: int) -> None:
    if keep_last <= 0:
        return
    for old in checkpoints(root.parent)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
