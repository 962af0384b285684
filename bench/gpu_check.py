"""The Python steps of bench/gpu_check.sh (run it, not this); every step prints `RESULT {...}` lines.

    python bench/gpu_check.py env MODE                # versions; fails without CUDA (gpu) or a good vLLM
    python bench/gpu_check.py steps MODE OUT BACKEND  # DAPO steps, 25M Llama, hf engine (local | ray)
    python bench/gpu_check.py engines MODE OUT        # 0.5B shape: vLLM vs hf, same prompts; weight sync
    python bench/gpu_check.py real MODE OUT           # 0.5B shape: DAPO steps, vLLM colocated, FSDP

MODE is "gpu" or "cpu" (the dry run: tiny models, the hf engine in place of vLLM). A failure ends the step
with one line on stderr: "FAIL <step>: <reason>".
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from gpu_common import REAL_SHAPE, SMALL_SHAPE, TINY_SHAPE, build_model, problems_file, result

# Dense bf16 tensor-core peak, FLOP/s, by device name (for MFU); other devices print no MFU.
PEAK_BF16 = {"H200": 989e12, "H100 PCIe": 756e12, "H100": 989e12, "H800": 989e12, "A100": 312e12}


class GpuMemory:
    """Peak memory used on GPU 0 by every process (vLLM's workers included), sampled every 0.2 s."""

    def __init__(self) -> None:
        self.peak_gb, self._stop = 0.0, threading.Event()
        self._read = self._reader()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _reader() -> Any:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            return lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**30
        except Exception:
            return None

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak_gb = max(self.peak_gb, self._read())

    def __enter__(self) -> GpuMemory:
        if self._read is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


def env(mode: str) -> None:
    import importlib.util

    import torch

    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, cuda: {torch.cuda.is_available()}")
    if torch.cuda.is_available():
        print(f"device: {torch.cuda.get_device_name(0)}, bf16 supported: {torch.cuda.is_bf16_supported()}")
    for name in ("vllm", "ray", "transformers", "numpy"):
        spec = importlib.util.find_spec(name)
        print(f"{name}: {__import__(name).__version__ if spec else 'not installed'}")
    if mode == "gpu":
        if not torch.cuda.is_available():
            raise SystemExit("FAIL env: no CUDA device (run on a GPU machine, or use --cpu for a dry run)")
        if importlib.util.find_spec("vllm") is None:
            raise SystemExit("FAIL env: vLLM is not installed (pip install -r requirements-gpu.lock)")
        import vllm

        from dapo.rollout.vllm import check_version

        check_version(vllm.__version__)


def steps(mode: str, out: Path, backend: str) -> None:
    """DAPO steps with the hf engine on a ~25M-parameter Llama (the script's original check)."""
    gpu = mode == "gpu"
    shape = SMALL_SHAPE if gpu else dict(TINY_SHAPE, vocab_size=103)
    model_dir, _ = build_model(out, shape, "model-small")
    n, prompts, total = (8, 32, 4) if gpu else (2, 4, 2)
    rows = train(
        mode,
        out,
        model_dir,
        backend=backend,
        engine="hf",
        n=n,
        prompts=prompts,
        total=total,
        max_new=128 if gpu else 16,
    )
    summarise(rows, mode=mode, backend=backend, samples_per_step=prompts * n)


def train(
    mode: str,
    out: Path,
    model_dir: Path,
    *,
    backend: str,
    engine: str,
    n: int,
    prompts: int,
    total: int,
    max_new: int,
    **execution: Any,
) -> list[dict]:
    from dapo.loop.report import Sink
    from dapo.loop.trainer import Trainer
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

    gpu = mode == "gpu"

    class Figures(Sink):
        def __init__(self) -> None:
            self.rows: list[dict] = []

        def on_step(self, report: Any) -> None:
            m = report.metrics
            generated = m["train/response_length/mean"] * m["train/num_prompts_generated"] * n
            self.rows.append(
                {
                    "step": report.step,
                    "step_s": m["timing_s/step"] - m.get("timing_s/save_checkpoint", 0.0),
                    "rollout_tok_s": generated / max(m["timing_s/gen"], 1e-9),
                    "train_tok_s": m["perf/total_num_tokens"] / max(m["timing_s/update_actor"], 1e-9),
                    "logprob_tok_s": m["perf/total_num_tokens"] / max(m["timing_s/old_log_prob"], 1e-9),
                    "update_s": m["timing_s/update_actor"],
                    "tokens": m["perf/total_num_tokens"],
                    "max_memory_gb": m.get("perf/max_memory_allocated_gb", 0.0),
                }
            )

    config = RunConfig(
        model=ModelConfig(
            path=str(model_dir), dtype="bfloat16" if gpu else "float32", device="cuda" if gpu else "cpu"
        ),
        data=DataConfig(
            train_path=str(problems_file(out)),
            val_path="",
            max_prompt_length=64,
            train_batch_size=prompts,
            gen_batch_size=prompts,
        ),
        rollout=RolloutConfig(
            engine=engine,
            n=n,
            max_response_length=max_new,
            gpu_memory_utilization=0.3,
            enforce_eager=True,
        ),
        algorithm=AlgorithmConfig(dynamic_sampling=False, overlong_buffer_len=16 if gpu else 4),
        optim=OptimConfig(
            lr=1e-5,
            warmup_steps=0,
            mini_batch_size=max(1, prompts // 4),
            micro_batch_size=64,
            total_steps=total,
        ),
        validation=ValidationConfig(every_n_steps=0),
        checkpoint=CheckpointConfig(every_n_steps=0, keep_last=1),
        execution=ExecutionConfig(
            backend=backend,
            cpus_per_worker=1.0,
            gpus_per_worker=1.0 if gpu else 0.0,
            torch_threads=0 if gpu else 1,
            **execution,
        ),
        seed=0,
    )
    figures = Figures()
    run = Trainer(config, out / f"run-{backend}-{engine}", [figures]).fit()
    if run.status != "succeeded":
        raise SystemExit(f"FAIL {backend}/{engine} run: {run.error}")
    for row in figures.rows:
        print(
            f"step {row['step']}: {row['step_s']:.2f} s, rollout {row['rollout_tok_s']:.0f} tok/s, "
            f"training {row['train_tok_s']:.0f} tok/s, log-probs {row['logprob_tok_s']:.0f} tok/s",
            flush=True,
        )
    return figures.rows


def summarise(rows: list[dict], **labels: Any) -> dict:
    timed = rows[1:] or rows  # the first step warms up kernels and allocators
    summary = {k: sum(r[k] for r in timed) / len(timed) for k in timed[0] if k != "step"}
    result(**labels, **summary)
    return summary


def peak_flops() -> float | None:
    import torch

    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    return next((flops for key, flops in PEAK_BF16.items() if key in name), None)


def real(mode: str, out: Path) -> None:
    """A few DAPO steps on the real shape: Ray backend, one GPU, vLLM colocated with an FSDP learner."""
    gpu = mode == "gpu"
    model_dir, params = build_model(
        out, REAL_SHAPE if gpu else TINY_SHAPE, "model-real" if gpu else "model-tiny"
    )
    n, prompts, total = (8, 16, 3) if gpu else (2, 4, 2)
    with GpuMemory() as memory:
        rows = train(
            mode,
            out,
            model_dir,
            backend="ray",
            engine="vllm" if gpu else "hf",
            n=n,
            prompts=prompts,
            total=total,
            max_new=256 if gpu else 16,
            learner_strategy="fsdp",
            colocate=True,
        )
    peak = peak_flops()
    timed = rows[1:] or rows
    mfu = None
    if peak:  # 6 N FLOPs per trained token (forward + backward), attention's own FLOPs left out
        mfu = sum(6 * params * r["tokens"] / r["update_s"] for r in timed) / len(timed) / peak
    summarise(
        rows,
        mode=mode,
        step="real",
        parameters=params,
        samples_per_step=prompts * n,
        learner_mfu=mfu,
        peak_gpu_memory_gb=memory.peak_gb,
    )


def main(argv: list[str]) -> None:
    command, mode = argv[0], argv[1]
    try:
        if command == "env":
            env(mode)
        elif command == "steps":
            steps(mode, Path(argv[2]), argv[3])
        elif command == "engines":
            from gpu_engines import engines  # this folder is on sys.path when run as a script

            engines(mode, Path(argv[2]))
        elif command == "real":
            real(mode, Path(argv[2]))
        else:
            raise SystemExit(f"FAIL: unknown step {command!r}")
    except SystemExit:
        raise
    except BaseException as exc:  # one line for the summary; the traceback is in the step's log above it
        import traceback

        traceback.print_exc()
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise SystemExit(f"FAIL {command}: {type(exc).__name__}: {reason}"[:300]) from None


if __name__ == "__main__":
    main(sys.argv[1:])
