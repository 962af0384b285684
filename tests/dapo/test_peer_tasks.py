"""The tasks of the side-by-side against TRL (bench/peer_trl.py): each is what its docstring says, so a
figure measured on it means what the bench README says it means.

For every task: the worked solution of a problem is scored correct by the reward both trainers use, a
solution with one step off is scored wrong, the tokenizer reads back every prompt and solution exactly with
no unknown token, prompts and solutions fit the lengths both trainers are given, and the splits do not
overlap. The tokenizer of the BPE task is trained from text here (about a second).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def peer() -> Iterator[ModuleType]:
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(ROOT / "bench"))
        import peer_trl

        yield peer_trl


@pytest.mark.parametrize("name", ["digitsum", "long", "bpe"])
def test_a_task_scores_its_own_solutions_and_fits_its_lengths(peer: ModuleType, name: str) -> None:
    from dapo.data.problems import render_prompt
    from dapo.rewards import build_reward
    from dapo.runconfig import DataConfig

    task = peer.TASKS[name]
    train, test = task.splits(400, 40)
    assert len(set(train)) == 400 and len(set(test)) == 40 and not set(train) & set(test)
    rng = random.Random(0)
    corpus = [f"{task.question(i)}\n{task.worked(i, rng, 1 / 3)}" for i in train]
    tok = task.tokenizer(corpus)
    scorer = build_reward(DataConfig())
    right = [task.worked(i) for i in test]
    wrong = [task.worked(i, random.Random(i), noise=1.0) for i in test]  # one step off, always
    truths = [task.truth(i) for i in test]
    assert all(r.acc for r in scorer.score_batch([""] * len(test), right, truths))
    assert not any(r.acc for r in scorer.score_batch([""] * len(test), wrong, truths))
    for item, solution in zip(test, right, strict=True):
        prompt = render_prompt(tok, task.problem(0, item))
        prompt_ids = tok.encode(prompt, add_special_tokens=False)
        solution_ids = tok.encode(solution, add_special_tokens=False)
        assert tok.unk_token_id not in prompt_ids + solution_ids
        assert tok.decode(solution_ids) == solution
        assert len(prompt_ids) <= task.max_prompt
        assert len(solution_ids) + 1 <= task.max_new  # and the end-of-sequence token


def test_the_long_task_is_long(peer: ModuleType) -> None:
    """Prompts of about 200 tokens and solutions of about 180: what the task exists to measure."""
    task = peer.TASKS["long"]
    tok = task.tokenizer([])
    from dapo.data.problems import render_prompt

    items = task.splits(50, 0)[0]

    def length(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False))

    prompts = [length(render_prompt(tok, task.problem(0, i))) for i in items]
    solutions = [length(task.worked(i)) for i in items]
    assert 190 <= min(prompts) and max(prompts) <= 256
    assert 150 <= min(solutions) and max(solutions) < 256


def test_the_table_gives_each_kept_run_its_rates_ratio_and_accuracy(peer: ModuleType, tmp_path: Path) -> None:
    def side(steps: int, trained: float, wall: float, ends: list[float]) -> dict:
        return {"steps": steps, "trained": trained, "wall": wall, "ends": ends}

    result = {
        "runs": {
            "trl": side(3, 192.0, 200.0, [10.0, 80.0, 150.0]),
            "ours": side(5, 320.0, 160.0, [5, 9, 15, 20, 30]),
        },
        "acc": {"trl": {"acc_t1": 0.25, "acc_greedy": 0.5}, "ours": {"acc_t1": 0.3, "acc_greedy": 0.75}},
        "base": {"acc_t1": 0.125, "acc_greedy": 0.25},
        "load": [0.5, 5.25],
        "busy": 4,
        "task": "long",
        "eval_problems": 64,
    }
    (tmp_path / "peer-long").mkdir()
    (tmp_path / "peer-long" / "result-load4.json").write_text(json.dumps(result))
    (tmp_path / "peer-long" / "result.json").write_text(json.dumps(result | {"busy": 0}))  # not a kept run
    rows = peer.table(tmp_path).splitlines()
    assert len(rows) == 3
    # TRL 192 / 200 s = 0.96/s; ours 320 / 160 s = 2.0/s; step p50: 70 s and 5 s (nearest rank)
    assert rows[2] == (
        "| long | 4 | 0.5 -> 5.2 | 3 / 5 | 1.0 | 2.0 | 2.08x | 0.125 / 0.250 / 0.300 (4 x 64) "
        "| 0.250 / 0.500 / 0.750 | 70.00 / 5.00 |"
    )
