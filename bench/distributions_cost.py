"""What recording a step's distributions costs (dapo.loop.distributions), at the sizes of a real step.

A step of ``--samples`` responses of ``--tokens`` tokens each (the paper's 512 x up to 20k; the default is
512 x 2,048 = 1M tokens): the learner's ratio sketch over every trained token (``ratio_sketch``) and the
controller's quantiles of rewards, lengths, advantages and per-token entropies (``step_distributions``),
each the median of ``--repeat`` runs on synthetic values. Also the extra work the learner does per
micro-batch (the masked exp of the log-ratio, copied to the CPU), measured as a whole over the step.

    .venv/bin/python bench/distributions_cost.py --samples 512 --tokens 2048
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dapo.loop.distributions import ratio_sketch, step_distributions  # noqa: E402


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (execution.torch_threads)")
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    rng = np.random.default_rng(0)
    rows = [
        SimpleNamespace(
            reward=float(rng.choice([-1.0, 1.0])),
            response_ids=[0] * a.tokens,
            advantage=float(rng.normal()),
            entropy=rng.random(a.tokens).tolist(),
        )
        for _ in range(a.samples)
    ]
    logp = torch.randn(a.micro_batch, a.tokens) * 0.01
    old = logp + torch.randn_like(logp) * 0.01
    mask = torch.ones_like(logp)

    def learner_side() -> None:
        parts = []
        for _ in range(a.samples // a.micro_batch):
            parts.append(torch.exp(torch.clamp(logp - old, -20, 20)[mask > 0].double()).cpu())
        ratio_sketch(torch.cat(parts).numpy())

    controller = timed(lambda: step_distributions(rows, rows, None), a.repeat)
    learner = timed(learner_side, a.repeat)
    tokens = a.samples * a.tokens
    print(f"{a.samples} samples x {a.tokens} tokens = {tokens:,} tokens")
    print(f"controller (reward, length, advantage, entropy quantiles): {1000 * controller:.1f} ms")
    print(f"learner (ratios of every trained token, sketch): {1000 * learner:.1f} ms")


if __name__ == "__main__":
    main()
