"""Helpers of the reliability tests: a tiny real model, Celery workers started as production starts them
(prefork, one pool process), the processes under a worker, and waiting for runs."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from runs.models import MetricPoint, Run

from dapo.runconfig import RunConfig
from dapo.runconfig.presets import get_preset
from tests.worker import stack

LEASE_SECONDS = 4
REAPER_INTERVAL_S = 1
RECOVERY_BOUND_S = LEASE_SECONDS + REAPER_INTERVAL_S + 20
"""Lease + one reaper interval, plus what a loaded 2-core machine takes to fork a pool process, load
the model and resume (the run's first step on a fresh process imports torch)."""


def build_tiny_assets(root: Path) -> dict[str, str]:
    """A one-layer Llama of a few thousand parameters with the demo tokenizer, built from a config (no
    download), and 16 arithmetic problems. Returns the config overrides that point at them."""
    model_dir, data = root / "tiny-model", root / "tiny-train.parquet"
    if not (model_dir / "config.json").is_file():
        import torch
        from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

        from dapo.data.demo import build_tokenizer, make_arithmetic_problems
        from dapo.data.problems import write_parquet

        tokenizer = build_tokenizer()
        ids = {f"{n}_token_id": getattr(tokenizer, f"{n}_token_id") for n in ("bos", "eos", "pad")}
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=128,
            tie_word_embeddings=True,
            **ids,
        )
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
        model.generation_config = GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, **ids)
        model.save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        write_parquet(make_arithmetic_problems(16, seed=1), data)
    return {"model.path": str(model_dir), "data.train_path": str(data), "data.val_path": ""}


def tiny_config(assets: dict[str, str], *, steps: int, every: int = 0, **overrides: Any) -> RunConfig:
    """The real trainer at its smallest: 2 prompts x 2 samples, 6 new tokens, one optimiser step, no
    validation, no dynamic sampling (an untrained model never answers right), checkpoints every ``every``."""
    return get_preset("tiny_cpu").with_overrides(
        {
            **assets,
            "data.train_batch_size": 2,
            "data.gen_batch_size": 2,
            "rollout.n": 2,
            "rollout.max_response_length": 6,
            "algorithm.overlong_buffer_len": 2,
            "algorithm.dynamic_sampling": False,
            "optim.mini_batch_size": 2,
            "optim.micro_batch_size": 4,
            "optim.total_steps": steps,
            "optim.warmup_steps": 0,
            "validation.every_n_steps": 0,
            "checkpoint.every_n_steps": every,
            "checkpoint.keep_last": 2,
            "execution.torch_threads": 1,
            **overrides,
        }
    )


def worker_env(var: Path, **extra: str) -> dict[str, str]:
    defaults = {
        "DAPO_RUNNER": "tests.reliability.faulty_runner:run",
        "DAPO_LEASE_SECONDS": str(LEASE_SECONDS),
        "DAPO_REAPER_INTERVAL_S": str(REAPER_INTERVAL_S),
        # The tiny assets are built in a sibling of ``var`` (both under pytest's base temp folder; a short
        # var for Ray's socket paths lies under /tmp, which holds that folder too).
        "DAPO_MODEL_ROOTS": str(var.parent),
        "DAPO_DATASET_ROOTS": str(var.parent),
        "FAKE_STEP_SECONDS": "0.1",
    }
    env = stack.environment(var, **defaults)
    env.pop("RAY_ADDRESS", None)  # a run on the Ray backend starts a local Ray of its own, unless extra says
    return {**env, **extra}


def celery_argv(queue: str, name: str) -> list[str]:
    """The worker as `make demo` and docker-compose start it (prefork), with one pool process: each fault
    test kills or counts the one run a worker holds (two at once: tests/worker/test_concurrency.py)."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "worker.app",
        "worker",
        "-Q",
        queue,
        "--concurrency",
        "1",
        "-n",
        f"{name}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-l",
        "info",
    ]


class Workers:
    """Celery worker processes on the test queue; ``ensure(n)`` (re)starts them until n are alive."""

    def __init__(self, env: dict[str, str], log_dir: Path, prefix: list[str] | None = None) -> None:
        self.env, self.log_dir, self.prefix = env, log_dir, prefix or []
        self.procs: list[Any] = []
        self._stop = ExitStack()

    def ensure(self, count: int) -> list[Any]:
        self.procs = [p for p in self.procs if p.poll() is None]
        while len(self.procs) < count:
            name = f"w{len(list(self.log_dir.glob('worker-*.log')))}"
            argv = [*self.prefix, *celery_argv(stack.both_queues(self.env), name)]
            log = self.log_dir / f"worker-{name}.log"
            self.procs.append(self._stop.enter_context(stack.process(argv, self.env, log, ready="ready.")))
        return self.procs

    def holding(self, pid: int) -> Any:
        """The worker whose pool process (or which itself) is ``pid``."""
        return next(p for p in self.procs if pid == p.pid or pid in descendants(p.pid))

    def logs(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.log_dir.glob("worker-*.log")))

    def close(self) -> None:
        self._stop.close()


@contextmanager
def workers(
    env: dict[str, str], log_dir: Path, count: int = 1, prefix: list[str] | None = None
) -> Iterator[Workers]:
    pool = Workers(env, log_dir, prefix)
    try:
        pool.ensure(count)
        yield pool
    finally:
        pool.close()


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def descendants(pid: int) -> list[int]:
    found = []
    for child in children(pid):
        found += [child, *descendants(child)]
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kill_quietly(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def owner_pid(run: Run) -> int:
    """The pid of the process holding the run's lease (worker ids are host:pid:task)."""
    return int(run.lease_owner.split(":")[1])


def write_faults(var: Path, faults: dict[int, dict[str, Any]]) -> None:
    path = var / "faults.json"
    current = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**current, **{str(k): v for k, v in faults.items()}}))


def wait_run(pk: int, predicate: Any, timeout: float, what: str) -> Run:
    """The run once ``predicate(run)`` holds; fails at once if the run ends before."""

    def check() -> Run | None:
        run = Run.objects.get(pk=pk)
        if predicate(run):
            return run
        if run.is_final:
            raise AssertionError(f"run {pk} ended {run.status} ({run.error}) while waiting for {what}")
        return None

    return stack.wait_for(check, timeout, what, 0.05)


def final(pk: int, timeout: float = 120) -> Run:
    return wait_run(pk, lambda r: r.is_final, timeout, f"run {pk} to finish")


def steps_of(run: Run, name: str = "critic/score/mean") -> list[int]:
    return list(
        MetricPoint.objects.filter(run=run, name=name).order_by("step").values_list("step", flat=True)
    )


def elapsed_since(t0: float) -> float:
    return time.time() - t0
