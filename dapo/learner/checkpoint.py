"""Resumable checkpoints: policy and optimiser state, the data order, and the step.

Layout: ``<run dir>/checkpoints/step_000010/{state.pt, trainer.json}``, and ``pending.pt`` when one-step
off-policy generation had the next step's batch ready (its samples, so a resumed run trains on them). A
checkpoint is written into a temporary folder and renamed into place, so a crash mid-write never leaves a
checkpoint that looks whole.
Sampling seeds are a function of (seed, step, round), so a run resumed from step k draws the same
samples and follows the same curves as one that never stopped.

A write that fails (disk full, a folder that became read-only) raises CheckpointError naming the path and
the errno, so the run fails with a reason a person can act on. torch is imported only to save or load.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from dapo.runconfig import RunConfig

if TYPE_CHECKING:  # dapo.algo.sampling imports torch, which this module loads only to save or load
    from dapo.algo.sampling import RoundSizer

PREFIX = "step_"


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message says where and why."""


def check_writable(run_dir: Path) -> None:
    """Fail at start-up, not after an hour of training, when the run directory or its checkpoint folder is
    not writable."""
    for what, folder in (
        ("run directory", Path(run_dir)),
        ("checkpoint folder", Path(run_dir) / "checkpoints"),
    ):
        probe = folder / ".write-probe"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            probe.write_text("ok", encoding="ascii")
            probe.unlink()
        except OSError as e:
            raise CheckpointError(f"{what} {folder} is not writable: {describe(e, probe)}") from None


def describe(error: BaseException, path: Path) -> str:
    """What went wrong writing ``path``: the OS error behind ``error`` (torch wraps a failed write in a
    RuntimeError) with its errno name, the file it hit, and the free space left when the disk is full."""
    os_error = _os_error(error)
    if os_error is None or os_error.errno is None:
        return f"{error} (writing {path}; {_free_space(path)})"
    code = os_error.errno
    reason = os_error.strerror or os.strerror(code)
    text = f"{reason} ({errno.errorcode.get(code, '?')}, errno {code}) at {os_error.filename or path}"
    return f"{text}; {_free_space(path)}" if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) else text


def _os_error(error: BaseException | None) -> OSError | None:
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, OSError):
            return error
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def _free_space(path: Path) -> str:
    for folder in (path, *path.parents):
        try:
            return f"{shutil.disk_usage(folder).free:,} bytes free there"
        except OSError:
            continue
    return "free space unknown"


def checkpoints(run_dir: Path) -> list[Path]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.startswith(PREFIX) and (p / "trainer.json").is_file()]
    return sorted(found, key=step_of)


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
    round_sizer: RoundSizer | None = None,
    save_optimizer: bool = True,
    keep_last: int = 0,
    pending: dict[str, Any] | None = None,
) -> Path:
    """Write the step's checkpoint; ``pending``: tensors and plain values of the next step's batch,
    sampled already (one-step off-policy generation), written as ``pending.pt``; ``round_sizer``: the
    dynamic sampling's kept-fraction estimate (``algorithm.adaptive_gen_batch``), when there is one."""
    import torch

    root = Path(run_dir) / "checkpoints"
    final = root / f"{PREFIX}{step:06d}"
    tmp = root / f".tmp-{PREFIX}{step:06d}-{os.getpid()}"
    state = backend.state_dict()
    if not save_optimizer:
        state.pop("optimizer", None)
    meta = {"step": step, "stream": stream.state_dict(), "config": config.to_dict(), "saved_at": time.time()}
    if round_sizer is not None:
        meta["round_sizer"] = round_sizer.state_dict()
    target = tmp
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        for target, fill in (
            (tmp / "state.pt", lambda f: torch.save(state, f)),
            (tmp / "trainer.json", lambda f: f.write(json.dumps(meta, indent=1).encode("utf-8"))),
        ):
            _write_durably(target, fill)
        if pending is not None:
            target = tmp / "pending.pt"
            _write_durably(target, lambda f: torch.save(pending, f))
        target = final
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except (OSError, RuntimeError) as e:
        reason = describe(e, target)  # before the clean-up frees the space
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"could not write checkpoint {final}: {reason}") from None
    _prune(root, keep_last)
    return final


def _write_durably(path: Path, fill: Callable[[IO[bytes]], Any]) -> None:
    """Write through a file object we own (torch given a path reports a full disk as "unexpected pos"),
    and fsync it: a full disk shows up here as ENOSPC, not as a checkpoint that later fails to load."""
    with path.open("wb") as f:
        fill(f)
        f.flush()
        os.fsync(f.fileno())


def load(path: Path, backend: Any, stream: Any, round_sizer: RoundSizer | None = None) -> int:
    """Restore a checkpoint into the backend, the data stream and (when both the run and the checkpoint
    have one) the round sizer of dynamic sampling; returns its step."""
    import torch

    path = Path(path)
    try:
        meta = json.loads((path / "trainer.json").read_text(encoding="utf-8"))
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
    except (OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"could not read checkpoint {path}: {e}") from None
    backend.load_state_dict(state)
    stream.load_state_dict(meta["stream"])
    if round_sizer is not None and "round_sizer" in meta:
        round_sizer.load_state_dict(meta["round_sizer"])
    return int(meta["step"])


def load_pending(path: Path) -> dict[str, Any] | None:
    """The next step's batch saved with a checkpoint (``save(pending=...)``), or None."""
    import torch

    file = Path(path) / "pending.pt"
    if not file.is_file():
        return None
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except (OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"could not read checkpoint {path}: {e}") from None


def step_of(path: Path) -> int:
    """The step of a checkpoint folder, from its name (``step_000010`` → 10)."""
    return int(Path(path).name[len(PREFIX) :])


def _prune(root: Path, keep_last: int) -> None:
    if keep_last <= 0:
        return
    for old in checkpoints(root.parent)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
