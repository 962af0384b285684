"""The demo task: deterministic disjoint arithmetic data, a round-tripping tokenizer, a loadable model."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from dapo.data import demo
from dapo.data.problems import load_problems, render_prompt

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "demo"


def _expression_value(prompt: str) -> int:
    """Evaluate 'Compute 12+7-3.' independently of dapo.data.demo."""
    match = re.fullmatch(r"Compute (\d+(?:[+-]\d+){1,2})\.", prompt)
    assert match, prompt
    tokens = re.findall(r"[+-]?\d+", match.group(1))
    return sum(int(t) for t in tokens)


# ------------------------------------------------------------------------------------------- data


def test_problems_are_deterministic_for_a_seed_and_differ_across_seeds() -> None:
    first = demo.make_arithmetic_problems(50, seed=3)
    again = demo.make_arithmetic_problems(50, seed=3)
    other = demo.make_arithmetic_problems(50, seed=4)
    assert first == again
    assert [p.prompt_text for p in first] != [p.prompt_text for p in other]
    assert [p.index for p in first] == list(range(50))


def test_answers_are_correct_and_prompts_are_short() -> None:
    problems = demo.make_arithmetic_problems(300, seed=0)
    assert len({p.prompt_text for p in problems}) == 300
    for p in problems:
        assert p.ground_truth == str(_expression_value(p.prompt_text))
        assert len(p.prompt_text) <= 20 and p.data_source == "math_dapo"
    assert {len(re.findall(r"\d+", p.prompt_text)) for p in problems} == {2, 3}


def test_exclude_skips_the_given_prompts() -> None:
    excluded = {"Compute 1+1.", "Compute 2+2."} | {
        p.prompt_text for p in demo.make_arithmetic_problems(100, seed=1)
    }
    problems = demo.make_arithmetic_problems(500, seed=1, exclude=excluded)
    assert len(problems) == 500 and not {p.prompt_text for p in problems} & excluded


def test_splits_are_disjoint_deterministic_and_indexed_from_zero() -> None:
    train, test = demo.make_splits(0, 2000, 200)
    assert (len(train), len(test)) == (2000, 200)
    assert not {p.prompt_text for p in train} & {p.prompt_text for p in test}
    assert [p.index for p in test] == list(range(200))
    assert demo.make_splits(0, 2000, 200) == (train, test)
    assert demo.make_splits(1, 2000, 200)[1] != test


def test_partial_results_are_never_negative() -> None:
    rng = random.Random(0)
    for _ in range(500):
        assert min(demo.partial_results(demo.random_expression(rng))) >= 0


def test_worked_solution_ends_with_the_answer_line_and_noise_carries_through() -> None:
    from dapo.rewards import math_dapo_score

    expression = ((12, 7, 3), ("+", "-"))
    assert demo.worked_solution(expression) == "12+7=19, 19-3=16\nAnswer: 16"
    assert demo.worked_solution(expression, error=2, error_step=0) == "12+7=21, 21-3=18\nAnswer: 18"
    assert math_dapo_score(demo.worked_solution(expression), "16").acc


# -------------------------------------------------------------------------------------- tokenizer


def test_tokenizer_ids_round_trip_through_auto_tokenizer(tmp_path: Path) -> None:
    from transformers import AutoTokenizer, LlamaConfig

    tokenizer = demo.build_tokenizer()
    tokenizer.save_pretrained(tmp_path)
    LlamaConfig(vocab_size=len(tokenizer)).save_pretrained(tmp_path)  # AutoTokenizer consults the model type
    loaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)

    problem = demo.make_arithmetic_problems(1, seed=0)[0]
    text = render_prompt(tokenizer, problem) + "12+7=19, 19-3=16\nAnswer: 16</s>"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert loaded.encode(text, add_special_tokens=False) == ids
    assert render_prompt(loaded, problem) == render_prompt(tokenizer, problem)
    assert ids[:2] == [tokenizer.bos_token_id, tokenizer.convert_tokens_to_ids("<|user|>")]
    assert loaded.decode(ids) == text
    assert (loaded.bos_token_id, loaded.eos_token_id, loaded.pad_token_id) == (1, 2, 0)
    assert len(loaded) == len(tokenizer) == 103


# ------------------------------------------------------------------------------------------ build


@pytest.fixture(scope="module")
def tiny_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("demo")
    manifest = demo.build_demo(
        out, seed=0, pretrain_steps=2, train_size=40, test_size=4, threads=1, progress=False
    )
    return out, manifest


def test_tiny_build_writes_a_loadable_model_and_dapo_parquet(tiny_build: tuple[Path, dict]) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, manifest = tiny_build
    model = AutoModelForCausalLM.from_pretrained(out / "model", local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(out / "model", local_files_only=True)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert 1_000_000 < manifest["params"] == sum(p.numel() for p in model.parameters()) < 3_000_000
    ids = torch.tensor([tokenizer.encode("<s><|user|>Compute 1+2.\n<|assistant|>", add_special_tokens=False)])
    assert model(ids).logits.shape == (1, ids.shape[1], 103)
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id

    train, test = load_problems(out / "data" / "train.parquet"), load_problems(out / "data" / "test.parquet")
    assert (len(train), len(test)) == (manifest["train_size"], manifest["test_size"]) == (40, 4)
    assert not {p.prompt_text for p in train} & {p.prompt_text for p in test}
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert 0.0 <= manifest["base_accuracy"] <= 1.0 and manifest["build_seconds"] > 0


def test_ensure_demo_keeps_a_finished_build(tiny_build: tuple[Path, dict]) -> None:
    out, _ = tiny_build
    before = (out / "model" / "model.safetensors").stat().st_mtime_ns
    assert demo.ensure_demo(out) == out
    assert (out / "model" / "model.safetensors").stat().st_mtime_ns == before


# ----------------------------------------------------------------------------------------- assets


def test_shipped_demo_loads_and_its_base_accuracy_leaves_room_to_learn() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    manifest = json.loads((ASSETS / "manifest.json").read_text())
    assert 0.1 < manifest["base_accuracy"] < 0.9
    model = AutoModelForCausalLM.from_pretrained(ASSETS / "model", local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(ASSETS / "model", local_files_only=True)
    assert sum(p.numel() for p in model.parameters()) == manifest["params"]
    assert tokenizer.encode("Answer: 16", add_special_tokens=False) == demo.build_tokenizer().encode(
        "Answer: 16", add_special_tokens=False
    )
    test = load_problems(ASSETS / "data" / "test.parquet")
    train = load_problems(ASSETS / "data" / "train.parquet")
    assert (len(train), len(test)) == (manifest["train_size"], manifest["test_size"])
    assert all(p.ground_truth == str(_expression_value(p.prompt_text)) for p in test)
    assert sum(f.stat().st_size for f in ASSETS.rglob("*") if f.is_file()) < 20 * 2**20
