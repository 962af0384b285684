"""dapo.learner.checkpoint's errors, in one process: a full disk (a write that lands in /dev/full gets the
kernel's ENOSPC) and a checkpoint folder that cannot be created are reported with the path and the errno, and
leave no partial checkpoint behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dapo.learner import checkpoint as ckpt
from dapo.runconfig.presets import get_preset


class Backend:
    def state_dict(self) -> dict:
        import torch

        return {"model": {"w": torch.zeros(50_000)}, "optimizer": {"state": {}}}


class Stream:
    def state_dict(self) -> dict:
        return {"epoch": 0, "position": 0}


def test_a_full_disk_is_reported_with_the_errno_and_the_file_and_leaves_no_checkpoint(tmp_path):
    tmp = tmp_path / "checkpoints" / f".tmp-step_000003-{os.getpid()}"
    tmp.mkdir(parents=True)
    (tmp / "state.pt").symlink_to("/dev/full")  # every write there fails with ENOSPC
    with pytest.raises(ckpt.CheckpointError) as failure:
        ckpt.save(tmp_path, 3, Backend(), Stream(), get_preset("tiny_cpu"))
    message = str(failure.value)
    assert message.startswith(f"could not write checkpoint {tmp_path}/checkpoints/step_000003: ")
    assert f"No space left on device (ENOSPC, errno 28) at {tmp}/state.pt" in message
    assert "bytes free there" in message
    assert ckpt.latest(tmp_path) is None and not tmp.exists()
    assert Path("/dev/full").is_char_device()  # the clean-up removed the link, not its target


def test_a_checkpoint_folder_that_cannot_be_created_fails_the_start_check(tmp_path):
    (tmp_path / "checkpoints").write_text("a file where the folder should be")
    with pytest.raises(ckpt.CheckpointError) as failure:
        ckpt.check_writable(tmp_path)
    assert f"checkpoint folder {tmp_path}/checkpoints is not writable: " in str(failure.value)
    assert "(EEXIST, errno 17)" in str(failure.value) or "(ENOTDIR, errno 20)" in str(failure.value)


def test_a_good_checkpoint_round_trips(tmp_path):
    path = ckpt.save(tmp_path, 2, Backend(), Stream(), get_preset("tiny_cpu"), keep_last=1)
    assert ckpt.latest(tmp_path) == path and ckpt.step_of(path) == 2
    assert sorted(p.name for p in path.iterdir()) == ["state.pt", "trainer.json"]
