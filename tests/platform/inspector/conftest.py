"""What the inspector's curve and group tests share: a run with one group of four at steps 2, 4 and 8."""

from __future__ import annotations

import json
import re

import pytest
from runs.models import Run

from dapo.loop.report import StepReport
from tests.platform.support import sample

# one group of four: (sample_index, reward, length, response, tokens or None)
GROUP = [
    (
        0,
        1.0,
        9,
        "Let x = 2. So 2 + 2 = 4. Answer: 4",
        ["Let", " x", " =", " 2", ".", " So", " 2", " +", " 2"],
    ),
    (1, -1.0, 12, "Let x = 3. So 3 + 2 = 5. Answer: 5", ["Let", " x", " =", " 3", ".", " So", " 3"]),
    (2, 1.0, 5, "Let x = 2. So answer: 4", None),
    (3, -1.25, 20, "We guess. Answer: 7", None),
]


def record_group(run: Run, step: int, *, val: bool = False, metrics: dict | None = None) -> None:
    samples = [
        sample(
            step,
            i,
            group=0,
            problem_index=7,
            reward=r,
            score=r,
            acc=r > 0,
            length=n,
            response=text,
            advantage=r / 2,
            tokens=tokens,
            token_logprobs=[-0.5] * len(tokens) if tokens else None,
        )
        for i, r, n, text, tokens in GROUP
    ] + [sample(step, 4, group=1, problem_index=8)]
    val_samples = [sample(step, i, split="val", group=0) for i in range(2)] if val else []
    run.record_step(StepReport(step=step, metrics=metrics or {}, samples=samples, val_samples=val_samples))


@pytest.fixture
def run(alice_run: Run) -> Run:
    """Train samples at steps 2, 4 and 8, validation at 4; curves at every step 1-8."""
    for step in range(1, 9):
        metrics = {
            "critic/score/mean": step / 10,
            "train/acc/mean": step / 20,
            "response_length/mean": 10.0 + step,
        }
        if step % 4 == 0:
            metrics |= {"val/acc/mean@4": step / 8, "val/reward/mean@4": step / 9}
        if step in (2, 4, 8):
            record_group(alice_run, step, val=step == 4, metrics=metrics)
        else:
            alice_run.record_step(StepReport(step=step, metrics=metrics, samples=[]))
    return alice_run


def embedded(html: str, element_id: str):
    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', html, re.S)
    assert match, element_id
    return json.loads(match.group(1))
