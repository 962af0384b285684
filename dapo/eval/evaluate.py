"""Evaluation without training: n samples per problem of one or more datasets, scored and summarised.

    python -m dapo.eval.evaluate --model assets/demo/model --data assets/demo/data/test.parquet --n 4 \\
        --out DIR
    python -m dapo.eval.evaluate --model M --data aime-2024.parquet --data math-500.parquet --n 32 \\
        --out DIR --set validation.top_p=0.7 --set rollout.max_response_length=20480 --set rollout.engine=vllm
    python -m dapo.eval.evaluate --checkpoint var/runs/demo --step 40 --data test.parquet --n 8 --out DIR

Writes ``metrics.json`` (every metric of dapo.eval.metrics, per source and overall, named as validation names
them: ``val/<source>/acc/mean@n`` ...; docs/metrics.md) and ``samples.jsonl`` (one scored sample a line,
with its source). Sampling follows the ``validation`` section (temperature, top_p, ``n_samples`` = --n)
and ``rollout.max_response_length``; several files are labelled by file stem, one file by its
``data_source`` column (dapo.eval.validation). ``--checkpoint`` evaluates a run's checkpoint: the base model
of the run's config with the checkpoint's weights.

Exit status: 0 evaluated, 1 the evaluation failed, 2 bad arguments or config.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dapo.loop.report import RunInfo, RunResult, SampleRecord, Sink, StepReport
from dapo.runconfig import ConfigError, RunConfig
from dapo.runconfig.presets import PRESETS, get_preset
from dapo.train import with_sets

log = logging.getLogger(__name__)


@dataclass
class Evaluation:
    """What an evaluation produced: its metrics and scored samples, with each sample's source label."""

    metrics: dict[str, float]
    samples: list[SampleRecord]
    sources: list[str]
    """Source label of each sample (the n samples of a problem share it)."""


def evaluation_config(
    base: RunConfig, *, data: list[str], n: int, model: str | None = None, max_problems: int = 0
) -> RunConfig:
    """``base`` set up to evaluate: the data files as the validation sets, ``n`` samples per problem."""
    if not data:
        raise ConfigError({"data": "name at least one dataset file"})
    overrides: dict[str, Any] = {
        "data.train_path": data[0],  # never read; the field must name a file
        "data.val_path": data[0],
        "data.val_paths": list(data[1:]),
        "validation.n_samples": n,
        "validation.max_problems": max_problems,
    }
    if model is not None:
        overrides["model.path"] = model
    return base.with_overrides(overrides)


def evaluate(config: RunConfig, *, checkpoint: str | Path | None = None, backend: Any = None) -> Evaluation:
    """Sample, score and summarise the validation sets of ``config`` with its model (or ``checkpoint``'s
    weights on it). ``backend``: an already built backend (tests); else one is built and closed here."""
    from dapo.cluster.backends import make_backend
    from dapo.data.problems import encode_prompts
    from dapo.eval.validation import load_validation_sets, sample, summarise

    problems, sources = load_validation_sets(config)
    own = backend is None
    backend = backend or make_backend(config)
    try:
        if checkpoint is not None:
            backend.load_state_dict({"model": checkpoint_weights(Path(checkpoint))})
        tokenizer = backend.tokenizer
        prompts = encode_prompts(tokenizer, problems, config.data.max_prompt_length)
        rollouts = sample(backend, tokenizer, problems, prompts, config, step=0, seed=config.seed)
        n = config.validation.n_samples
        metrics = summarise(rollouts, sources, n)
        return Evaluation(
            metrics, [r.record(tokenizer) for r in rollouts], [s for s in sources for _ in range(n)]
        )
    finally:
        if own:
            backend.close()


def checkpoint_weights(path: Path) -> dict[str, Any]:
    """The model state of a checkpoint folder's ``state.pt``, memory-mapped (the optimiser is not read)."""
    import torch

    state = torch.load(path / "state.pt", map_location="cpu", weights_only=True, mmap=True)
    return state["model"]


def run(
    config: RunConfig, *, out_dir: str | Path, sinks: list[Sink], checkpoint: str | Path | None = None
) -> RunResult:
    """An evaluation as a run of no training step: the sinks get ``on_start``, one ``on_step`` of step 0
    (the metrics and the samples, as validation samples) and ``on_finish``; ``metrics.json`` and
    ``samples.jsonl`` are written to ``out_dir``. Never raises for a failed evaluation: the result and
    the sinks carry the error."""
    t0 = time.time()
    for sink in sinks:
        sink.on_start(
            RunInfo(
                run_dir=str(out_dir),
                total_steps=0,
                start_step=0,
                config=config.to_dict(),
                num_train_problems=0,
                num_val_problems=0,
            )
        )
    try:
        result = evaluate(config, checkpoint=checkpoint)
        write_outputs(Path(out_dir), result, config, checkpoint=checkpoint)
    except Exception as exc:  # the evaluation fails with its reason; the caller gets it in the result
        error = f"{type(exc).__name__}: {exc}"
        log.error("evaluation failed:\n%s", traceback.format_exc())
        for sink in sinks:
            sink.on_finish("failed", error)
        return RunResult(status="failed", last_step=0, error=error, metrics={})
    report = StepReport(
        step=0,
        metrics=result.metrics,
        val_samples=result.samples,
        wall_time=time.time(),
        elapsed_s=time.time() - t0,
    )
    for sink in sinks:
        sink.on_step(report)
        sink.on_finish("succeeded", None)
    return RunResult(status="succeeded", last_step=0, error=None, metrics=result.metrics)


def write_outputs(out: Path, result: Evaluation, config: RunConfig, *, checkpoint: str | Path | None) -> None:
    """``metrics.json`` (metrics and what was evaluated) and ``samples.jsonl`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    problems = Counter(result.sources[:: max(config.validation.n_samples, 1)])
    summary = {
        "metrics": result.metrics,
        "model": config.model.path,
        "checkpoint": str(checkpoint) if checkpoint is not None else None,
        "data": config.data.validation_files,
        "n": config.validation.n_samples,
        "problems_per_source": dict(problems),
        "config": config.to_dict(),
    }
    (out / "metrics.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    with open(out / "samples.jsonl", "w", encoding="utf-8") as f:
        for sample, source in zip(result.samples, result.sources, strict=True):
            f.write(json.dumps({**sample.to_dict(), "source": source}) + "\n")


# ---- command line ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m dapo.eval.evaluate", description=__doc__.split("\n\n")[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", help="a HuggingFace model folder")
    what.add_argument("--checkpoint", type=Path, help="a run directory (or one checkpoint folder in it)")
    p.add_argument("--step", type=int, help="with --checkpoint: the checkpoint's step (default: the newest)")
    p.add_argument("--data", action="append", required=True, help="a dataset file; repeat for several")
    p.add_argument("--n", type=int, default=4, help="samples per problem (default 4)")
    p.add_argument("--out", type=Path, required=True, help="folder for metrics.json and samples.jsonl")
    p.add_argument("--max-problems", type=int, default=0, help="the first N problems of each file (0: all)")
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--preset", choices=sorted(PRESETS), help="sampling settings from a preset (default tiny_cpu)"
    )
    src.add_argument("--config", type=Path, help="sampling settings from a run config JSON file")
    p.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="override a config field"
    )
    return p.parse_args(argv)


def build(args: argparse.Namespace) -> tuple[RunConfig, Path | None]:
    """The evaluation's config and the checkpoint folder (None for --model); ConfigError or ValueError."""
    checkpoint = None
    if args.checkpoint is not None:
        from dapo.learner.export import find_checkpoint, run_config

        folder = args.checkpoint
        checkpoint = folder if (folder / "state.pt").is_file() else find_checkpoint(folder, args.step)
        base = run_config(checkpoint)
    elif args.config is not None:
        base = RunConfig.load(args.config)
    else:
        base = get_preset(args.preset or "tiny_cpu")
    base = with_sets(base, args.set)
    config = evaluation_config(
        base, data=args.data, n=args.n, model=args.model, max_problems=args.max_problems
    )
    return config, checkpoint


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    args = parse_args(argv)
    try:
        config, checkpoint = build(args)
    except (ConfigError, ValueError, OSError) as e:
        print(f"bad arguments: {e}", file=sys.stderr)
        return 2
    result = run(config, out_dir=args.out, sinks=[], checkpoint=checkpoint)
    if result.status != "succeeded":
        print(f"evaluation failed: {result.error}", file=sys.stderr)
        return 1
    headline = {k: v for k, v in result.metrics.items() if k.count("/") == 2 and "@" in k and "/acc/" in k}
    print(json.dumps({"out": str(args.out), **headline}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
