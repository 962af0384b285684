"""Fill a PostgreSQL database with a platform at scale: 1,000,000 samples and 5,000,000 metric points.

    .venv/bin/python bench/scale_fill.py [--db dapo_scale_bench] [--samples 1000000] [--points 5000000]

Used by bench/inspect_scale.py (issue 6's scale target); runnable alone to poke at a big database. It drops
and recreates the database, migrates it, then writes with COPY (the ORM would take an hour):

- user ``bench`` (password ``bench-pass-123``);
- 10 "sample" runs of 500 steps x 200 training samples (1,000,000 samples in all; 8 per step with token
  data, as the default ``logging.token_data_samples_per_step``), texts shaped like the demo's;
- 5 "compare" runs of 2,000 steps x 50 metrics, and filler runs of the same shape up to ``--points``.

Rows are deterministic (seeded); values are smooth curves with noise, so charts look like real ones.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from page_load import django_on  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PG = "postgres://postgres@127.0.0.1:5432"
SAMPLE_RUNS, SAMPLE_STEPS, SAMPLES_PER_STEP, GROUP = 10, 500, 200, 8
METRIC_STEPS, METRICS_PER_RUN, COMPARE_RUNS = 2000, 50, 5
SAMPLE_COLUMNS = (
    "run_id",
    "step",
    "split",
    "sample_index",
    "group",
    "problem_index",
    "prompt",
    "response",
    "ground_truth",
    "pred",
    "score",
    "acc",
    "overlong_penalty",
    "reward",
    "advantage",
    "length",
    "truncated",
    "kept",
    "tokens",
    "token_logprobs",
    "token_entropy",
    "token_ratio",
)
METRIC_NAMES = [
    "val/acc/mean@4",
    "critic/score/mean",
    "response_length/mean",
    "actor/entropy",
    "actor/pg_clipfrac",
    "actor/pg_loss",
    "actor/ppo_kl",
    "actor/grad_norm",
    "actor/lr",
    "critic/advantages/mean",
    "train/num_prompts_kept",
    "train/frac_all_correct",
    "train/frac_all_wrong",
    "timing_s/step",
    "perf/total_num_tokens",
]


def setup(db: str, *, recreate: bool) -> dict[str, str]:
    """Point Django at ``db`` (dropped and recreated when ``recreate``), migrate it; the env for children."""
    if recreate:
        for sql in (f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)', f'CREATE DATABASE "{db}"'):
            subprocess.run(["psql", f"{PG}/postgres", "-qc", sql], check=True)
    return django_on(f"{PG}/{db}", REPO / "var" / "bench-scale")


def metric_names(count: int) -> list[str]:
    extra = [f"actor/extra_{i}" for i in range(max(0, count - len(METRIC_NAMES)))]
    return (METRIC_NAMES + extra)[:count]


def metric_value(name: str, step: int, seed: int, rng: random.Random) -> float:
    if name == "perf/total_num_tokens":
        return 4000.0 + 50 * math.sin(step / 30 + seed) + rng.random() * 100
    base = 0.4 + 0.4 * (1 - math.exp(-step / (300 + 40 * seed)))
    return base + 0.05 * math.sin(step / 25 + sum(map(ord, name)) % 7) + rng.gauss(0, 0.02)


def sample_row(run_id: int, step: int, index: int, rng: random.Random) -> tuple[Any, ...]:
    group, a, b, c = index // GROUP, rng.randint(0, 12), rng.randint(0, 12), rng.randint(0, 12)
    truth, correct = a + b - c, rng.random() < 0.45 + 0.3 * step / SAMPLE_STEPS
    pred = truth if correct else truth + rng.choice((-2, -1, 1, 2))
    response = f"{a}+{b}={a + b}, {a + b}-{c}={pred}\nAnswer: {pred}"
    length = len(response) + 1
    tokens = logprobs = entropy = ratio = None
    if index < 8:
        tokens = json.dumps(list(response) + ["</s>"])
        logprobs = json.dumps([round(-(rng.random() ** 3) * 3, 4) for _ in range(length)])
        entropy = json.dumps([round(rng.random() ** 2, 4) for _ in range(length)])
        ratio = json.dumps([round(1 + rng.gauss(0, 0.1), 4) for _ in range(length)])
    score = 1.0 if correct else -1.0
    return (
        run_id,
        step,
        "train",
        index,
        group,
        (step * 25 + group) % 2000,
        f"<s><|user|>Compute {a}+{b}-{c}.\n<|assistant|>",
        response,
        str(truth),
        str(pred),
        score,
        correct,
        0.0,
        score,
        rng.gauss(0, 1),
        length,
        False,
        rng.random() < 0.7,
        tokens,
        logprobs,
        entropy,
        ratio,
    )


def fill(samples: int, points: int) -> dict[str, list[int]]:
    """Write the runs and rows; returns {"sample_runs": [...], "compare_runs": [...]}."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from runs.models import Run, Status

    from dapo.runconfig.presets import get_preset

    user = get_user_model().objects.create_user("bench", password="bench-pass-123")
    config = get_preset("tiny_cpu").to_dict()
    make = lambda name, steps, **extra: Run.objects.create(  # noqa: E731
        owner=user, name=name, config=config, status=Status.SUCCEEDED, total_steps=steps, step=steps, **extra
    )
    sample_runs = [make(f"samples {i}", SAMPLE_STEPS, preset="tiny_cpu") for i in range(SAMPLE_RUNS)]
    compare_runs = [
        make(f"compare seed {i}", METRIC_STEPS, preset="tiny_cpu", group="scale-bench")
        for i in range(COMPARE_RUNS)
    ]
    per_run = METRIC_STEPS * METRICS_PER_RUN
    fillers = [make(f"filler {i}", METRIC_STEPS) for i in range(max(0, points // per_run - COMPARE_RUNS))]
    names = metric_names(METRICS_PER_RUN)
    with connection.cursor() as cursor:
        raw = cursor.cursor  # psycopg 3
        started = time.perf_counter()
        columns = ", ".join(f'"{c}"' for c in SAMPLE_COLUMNS)
        with raw.copy(f"COPY runs_sample ({columns}) FROM STDIN") as copy:
            rng, written = random.Random(0), 0
            for run in sample_runs:
                for step in range(1, SAMPLE_STEPS + 1):
                    for index in range(SAMPLES_PER_STEP):
                        if written == samples:
                            break
                        copy.write_row(sample_row(run.pk, step, index, rng))
                        written += 1
        print(f"[fill] {written:,} samples in {time.perf_counter() - started:.0f} s", flush=True)
        started = time.perf_counter()
        with raw.copy(
            'COPY runs_metricpoint ("run_id", "step", "name", "value", "wall_time") FROM STDIN'
        ) as copy:
            rng, written = random.Random(1), 0
            for seed, run in enumerate(compare_runs + fillers):
                t0 = 1.7e9 + seed * 1e5
                for step in range(1, METRIC_STEPS + 1):
                    wall = t0 + step * (6.0 + seed)
                    for name in names:
                        copy.write_row((run.pk, step, name, metric_value(name, step, seed, rng), wall))
                        written += 1
        print(f"[fill] {written:,} metric points in {time.perf_counter() - started:.0f} s", flush=True)
        cursor.execute("ANALYZE")
    return {"sample_runs": [r.pk for r in sample_runs], "compare_runs": [r.pk for r in compare_runs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="dapo_scale_bench")
    parser.add_argument("--samples", type=int, default=SAMPLE_RUNS * SAMPLE_STEPS * SAMPLES_PER_STEP)
    parser.add_argument("--points", type=int, default=5_000_000)
    args = parser.parse_args()
    setup(args.db, recreate=True)
    print(json.dumps(fill(args.samples, args.points)))


if __name__ == "__main__":
    main()
