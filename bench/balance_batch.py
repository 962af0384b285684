"""What verl's ``balance_batch`` would save: learners given rows of balanced length, not in arrival order.

    .venv/bin/python bench/balance_batch.py [--learners 2] [--steps 20] [--seed 0]

verl reorders each step's batch so that every data-parallel rank gets about the same number of tokens
(``balance_batch``: a Karmarkar-Karp partition of the sequence lengths into equal-size parts). We cut each
mini-batch into contiguous shards in arrival order (``dapo.cluster.ray_shards.shard_update``), or, now,
balanced ones under a token budget. Learners
meet at every micro-batch (each backward all-reduces gradients; ``split_to_count`` makes them run the same
number), so a mini-batch takes the sum over micro-batch index k of the slowest learner's k-th micro-batch.

Nothing runs on a model: each micro-batch is priced by a FLOP model of Qwen2.5-32B (the paper's model;
forward and backward, padded to the micro-batch's width): rows x (6 P width + 6 layers hidden width^2).
Lengths as bench/README.md's padding figures: the paper's batch (512 prompts x 16 samples, mini-batches
of 32 prompts), prompts uniform in 50-400 tokens, responses exponential with mean 4,000 capped at 20,480
("independent"); and a harder case where a prompt's 16 responses share a mean that itself varies,
exponential with mean 4,000 ("by prompt", as easy and hard problems do). Balanced shards come from
``dapo.cluster.ray_shards.balanced_split`` (what the Ray backend now uses under a token budget: longest
first, each row to the lightest learner with room, equal row counts, each learner's rows in arrival order,
so that only the split changes, not the padding within a shard).
Micro-batches: the token budget of ``verl_dapo_32b`` (22,528 tokens) and 16 rows (``paper_qwen32b``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dapo.cluster.ray_shards import balanced_split  # noqa: E402
from dapo.learner.microbatch import plan_micro_batches, split_to_count  # noqa: E402

PARAMS, LAYERS, HIDDEN = 32.8e9, 64, 5120  # Qwen2.5-32B
PROMPTS, SAMPLES, MINI = 512, 16, 32
PLANS = {"token budget 22,528": {"max_rows": 1 << 30, "max_tokens": 22_528}, "16 rows": {"max_rows": 16}}


def lengths(rng: random.Random, by_prompt: bool) -> list[tuple[int, int]]:
    """(prompt, response) tokens of one step's rows, the 16 samples of a prompt contiguous."""
    rows = []
    for _ in range(PROMPTS):
        prompt = rng.randint(50, 400)
        mean = rng.expovariate(1 / 4000) if by_prompt else 4000.0
        for _ in range(SAMPLES):
            rows.append((prompt, min(20_480, max(1, round(rng.expovariate(1 / max(mean, 1.0)))))))
    return rows


def cost(rows: list[tuple[int, int]]) -> float:
    """FLOPs of one padded micro-batch, forward and backward."""
    width = max(p for p, _ in rows) + max(r for _, r in rows)
    return len(rows) * (6 * PARAMS * width + 6 * LAYERS * HIDDEN * width * width)


def contiguous_parts(n: int, parts: int) -> list[list[int]]:
    """Arrival order: ``parts`` contiguous pieces, sizes within one (``split_evenly``)."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        size = base + (i < extra)
        out.append(list(range(start, start + size)))
        start += size
    return out


def minibatch_time(rows: list[tuple[int, int]], parts: list[list[int]], plan: dict[str, int]) -> float:
    """Sum over micro-batch index of the slowest learner's micro-batch (all run the same count)."""
    plans = []
    for part in parts:
        shard = [rows[i] for i in part]
        plans.append((shard, plan_micro_batches([p for p, _ in shard], [r for _, r in shard], **plan)))
    count = max(len(p) for _, p in plans)
    costs = [[cost([shard[i] for i in mb]) for mb in split_to_count(p, count)] for shard, p in plans]
    return sum(max(c[k] for c in costs) for k in range(count))


def step_times(rows: list[tuple[int, int]], learners: int, plan: dict[str, int]) -> tuple[float, float]:
    """(arrival order, balanced) update time of one step, in FLOPs of the slowest learner."""
    per_mb = MINI * SAMPLES
    arrival = balanced = 0.0
    for start in range(0, len(rows), per_mb):
        mb = rows[start : start + per_mb]
        arrival += minibatch_time(mb, contiguous_parts(len(mb), learners), plan)
        balanced += minibatch_time(
            mb, balanced_split(list(range(len(mb))), [p + r for p, r in mb], learners), plan
        )
    return arrival, balanced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learners", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"| lengths | micro-batches | arrival / balanced (median of {args.steps} steps) | min | max |")
    print("|---|---|---|---|---|")
    for by_prompt in (False, True):
        rng = random.Random(args.seed)
        steps = [lengths(rng, by_prompt) for _ in range(args.steps)]
        for name, plan in PLANS.items():
            ratios = [a / b for a, b in (step_times(rows, args.learners, plan) for rows in steps)]
            kind = "by prompt" if by_prompt else "independent"
            spread = f"{statistics.median(ratios):.3f} | {min(ratios):.3f} | {max(ratios):.3f}"
            print(f"| {kind} | {name} | {spread} |")


if __name__ == "__main__":
    main()
