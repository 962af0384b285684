"""Export a run's checkpoint as a HuggingFace model folder that transformers, vLLM or another run loads.

    python -m dapo.learner.export var/runs/demo --out var/models/demo-trained     # the newest checkpoint
    python -m dapo.learner.export var/runs/demo --step 40 --out DIR --max-shard-size 2GB

The folder is ``save_pretrained`` output: safetensors weights (sharded above ``max_shard_size``, with an
index), config.json, generation_config.json, the tokenizer files, and ``dapo_export.json`` saying where it
came from (run directory, step, checkpoint, base model). The weights are the checkpoint's ``state.pt``
model state: every learner strategy (one process, DDP, FSDP) saves the full state dict there.

Memory: the model is built on the meta device (no weights allocated) from the base model's config.json,
and the checkpoint is memory-mapped and assigned into it, so one copy of the weights is ever held (the
optimiser state in the same file is never read). The folder is written next to ``--out`` and renamed
into place, so a failed export never leaves a folder that looks whole.

Exit status: 0 exported, 2 bad arguments (no checkpoint, unknown step, output folder not empty).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dapo.learner import checkpoint as ckpt
from dapo.runconfig import ConfigError, RunConfig

PROVENANCE = "dapo_export.json"


class ExportError(ValueError):
    """The export cannot be done as asked; the message says why and what would work."""


@dataclass(frozen=True)
class ExportResult:
    out_dir: Path
    step: int
    checkpoint: Path
    source_model: Path
    parameters: int
    files: list[str]


def find_checkpoint(run_dir: str | Path, step: int | None = None) -> Path:
    """The checkpoint folder of ``step`` (None: the newest); ExportError listing the steps on disk."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ExportError(f"no run directory at {run_dir}")
    found = ckpt.checkpoints(run_dir)
    if not found:
        raise ExportError(
            f"run directory {run_dir} has no checkpoint (nothing under {run_dir / 'checkpoints'})"
        )
    if step is None:
        return found[-1]
    by_step = {ckpt.step_of(p): p for p in found}
    if step not in by_step:
        steps = ", ".join(str(s) for s in sorted(by_step))
        raise ExportError(
            f"run directory {run_dir} has no checkpoint of step {step} (never saved, or pruned by "
            f"checkpoint.keep_last); steps on disk: {steps}"
        )
    return by_step[step]


def run_config(checkpoint: Path) -> RunConfig:
    """The config the checkpoint was trained with: its trainer.json, else the run directory's config.json."""
    try:
        meta = json.loads((checkpoint / "trainer.json").read_text(encoding="utf-8"))
        if isinstance(meta.get("config"), dict):
            return RunConfig.from_dict(meta["config"])
        return RunConfig.load(checkpoint.parent.parent / "config.json")
    except (OSError, ValueError) as e:  # ConfigError is a ValueError
        raise ExportError(f"cannot read the run's config for {checkpoint}: {e}") from None


def check_out_dir(out_dir: Path) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ExportError(f"output folder {out_dir} exists and is not empty; choose a new folder")


def export(
    run_dir: str | Path,
    out_dir: str | Path,
    *,
    step: int | None = None,
    max_shard_size: str | int = "2GB",
    model_path: str | Path | None = None,
) -> ExportResult:
    """Write the checkpoint of ``step`` (None: the newest) of ``run_dir`` as a HuggingFace folder.

    ``model_path``: the base model folder (config, tokenizer); default the run config's ``model.path``.
    """
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    checkpoint = find_checkpoint(run_dir, step)
    check_out_dir(out_dir)
    base = Path(model_path) if model_path is not None else Path(run_config(checkpoint).model.path)
    if not (base / "config.json").is_file():
        raise ExportError(
            f"base model folder {base} has no config.json (moved since the run?); pass --model PATH"
        )
    tmp = out_dir.with_name(f".tmp-{out_dir.name}-{int(time.time() * 1000)}")
    try:
        tmp.mkdir(parents=True)
        parameters = _write(checkpoint, base, tmp, max_shard_size)
        _provenance(tmp, run_dir, checkpoint, base, parameters)
        if out_dir.exists():
            out_dir.rmdir()  # empty (checked above)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportResult(
        out_dir=out_dir,
        step=ckpt.step_of(checkpoint),
        checkpoint=checkpoint,
        source_model=base,
        parameters=parameters,
        files=sorted(p.name for p in out_dir.iterdir()),
    )


def _write(checkpoint: Path, base: Path, out: Path, max_shard_size: str | int) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    try:
        state = torch.load(checkpoint / "state.pt", map_location="cpu", mmap=True, weights_only=True)
    except (OSError, RuntimeError) as e:
        raise ExportError(f"cannot read {checkpoint / 'state.pt'}: {e}") from None
    weights = state.get("model") if isinstance(state, dict) else None
    if not isinstance(weights, dict) or not weights:
        raise ExportError(f"{checkpoint / 'state.pt'} holds no model state dict")
    dtype = next(iter(weights.values())).dtype
    config = AutoConfig.from_pretrained(base, local_files_only=True)
    config.dtype = dtype
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    try:
        model.load_state_dict(weights, strict=True, assign=True)
    except RuntimeError as e:
        raise ExportError(f"{checkpoint} does not fit the base model {base}: {e}") from None
    model.tie_weights()
    _materialise_buffers(model, config)
    model.save_pretrained(out, max_shard_size=max_shard_size)
    AutoTokenizer.from_pretrained(base, local_files_only=True).save_pretrained(out)
    try:
        generation = GenerationConfig.from_pretrained(base, local_files_only=True)
    except OSError:  # the base model has none: the one its config implies
        generation = GenerationConfig.from_model_config(config)
    generation.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def _materialise_buffers(model: Any, config: Any) -> None:
    """Buffers that are not in a state dict (rotary frequencies) stay on the meta device after the
    assignment; rebuild the modules that own them on the CPU so the model is complete (they are small)."""
    import torch

    for module in model.modules():
        meta = [b for b, t in module.named_buffers(recurse=False) if t is not None and t.is_meta]
        if not meta:
            continue
        try:
            with torch.device("cpu"):
                fresh = type(module)(config=config)
        except TypeError:  # not built from the config alone: save_pretrained does not need these buffers
            continue
        for b in meta:
            module.register_buffer(b, getattr(fresh, b), persistent=False)


def _provenance(out: Path, run_dir: Path, checkpoint: Path, base: Path, parameters: int) -> None:
    meta = json.loads((checkpoint / "trainer.json").read_text(encoding="utf-8"))
    info = {
        "run_dir": str(run_dir.resolve()),
        "step": ckpt.step_of(checkpoint),
        "checkpoint": str(checkpoint.resolve()),
        "source_model": str(base.resolve()),
        "parameters": parameters,
        "checkpoint_saved_at": meta.get("saved_at"),
        "exported_at": time.time(),
    }
    (out / PROVENANCE).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m dapo.learner.export", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path, help="the run directory (holds checkpoints/)")
    p.add_argument("--out", type=Path, required=True, help="the folder to write (new or empty)")
    p.add_argument("--step", type=int, help="the checkpoint's step (default: the newest)")
    p.add_argument("--max-shard-size", default="2GB", help='largest safetensors file (default "2GB")')
    p.add_argument("--model", type=Path, help="base model folder (default: the run config's model.path)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = export(
            args.run_dir, args.out, step=args.step, max_shard_size=args.max_shard_size, model_path=args.model
        )
    except (ExportError, ConfigError) as e:
        print(f"export failed: {e}", file=sys.stderr)
        return 2
    print(
        json.dumps(
            {
                "out": str(result.out_dir),
                "step": result.step,
                "parameters": result.parameters,
                "files": result.files,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
