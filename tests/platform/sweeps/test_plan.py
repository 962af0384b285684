"""Sweeps (sweeps.plan, sweeps.form): a grid's product, a random sweep reproducible by its seed and inside
its ranges, the cap, the refusals of a bad sweep, run names that state their values, and the plan that
validates every run's config like a single run's (one bad combination refuses them all)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from compare.ladder import LADDER_SEP
from sweeps import plan as sweep_plan

from dapo.runconfig import RunConfig
from dapo.runconfig.presets import get_preset

pytestmark = pytest.mark.django_db


def parsed(raw: dict[str, Any]) -> sweep_plan.Sweep:
    sweep, errors = sweep_plan.parse(raw)
    assert errors == {} and sweep is not None
    return sweep


# ---- expansion ---------------------------------------------------------------------------------------------


def test_a_grid_is_the_product_of_its_lists_in_order():
    sweep = parsed(
        {
            "mode": "grid",
            "fields": {
                "optim.lr": [1e-5, 2e-5, 4e-5],
                "rollout.n": [4, 8],
                "algorithm.dynamic_sampling": [True, False],
            },
        }
    )
    combos = sweep_plan.expand(sweep)
    assert sweep.runs == 12 and len(combos) == 12
    expected = itertools.product([1e-5, 2e-5, 4e-5], [4, 8], [True, False])
    keys = ["optim.lr", "rollout.n", "algorithm.dynamic_sampling"]
    assert combos == [dict(zip(keys, c, strict=True)) for c in expected]
    assert sweep_plan.label(combos[1]) == "lr=1e-05, n=4, dynamic_sampling=false"


def test_a_random_sweep_is_reproducible_by_its_seed_and_stays_in_its_ranges():
    raw = {
        "mode": "random",
        "runs": 10,
        "seed": 3,
        "fields": {
            "optim.lr": {"low": 1e-6, "high": 1e-4, "scale": "log"},
            "rollout.temperature": {"low": 0.6, "high": 1.2},
            "rollout.n": {"low": 2, "high": 64, "scale": "log"},
            "algorithm.loss_agg_mode": ["token-mean", "seq-mean-token-mean"],
        },
    }
    first, again = sweep_plan.expand(parsed(raw)), sweep_plan.expand(parsed(raw))
    other = sweep_plan.expand(parsed({**raw, "seed": 4}))
    assert first == again and first != other and len(first) == 10
    assert len({repr(sorted(c.items())) for c in first}) == 10  # distinct runs
    for c in first:
        assert 1e-6 <= c["optim.lr"] <= 1e-4 and float(f"{c['optim.lr']:.3g}") == c["optim.lr"]
        assert 0.6 <= c["rollout.temperature"] <= 1.2
        assert isinstance(c["rollout.n"], int) and 2 <= c["rollout.n"] <= 64
        assert c["algorithm.loss_agg_mode"] in ("token-mean", "seq-mean-token-mean")
    # log-uniform: over many draws about half the learning rates lie below the geometric middle, 1e-5
    log_lr = {"optim.lr": {"low": 1e-6, "high": 1e-4, "scale": "log"}}
    many = sweep_plan.expand(parsed({"mode": "random", "runs": 30, "seed": 0, "cap": 30, "fields": log_lr}))
    below = sum(c["optim.lr"] < 1e-5 for c in many)
    assert 8 <= below <= 22, below


def test_random_draws_from_lists_never_repeat_a_run_and_too_few_combinations_are_refused():
    sweep = parsed({"mode": "random", "runs": 6, "fields": {"rollout.n": [4, 8, 16], "seed": [0, 1]}})
    combos = sweep_plan.expand(sweep)
    assert sorted(map(repr, combos)) == sorted(
        repr({"rollout.n": n, "seed": s}) for n, s in itertools.product([4, 8, 16], [0, 1])
    )
    sweep, errors = sweep_plan.parse(
        {"mode": "random", "runs": 7, "fields": {"rollout.n": [4, 8, 16], "seed": [0, 1]}}
    )
    assert sweep is None and "only 6 combinations" in errors["sweep.runs"]


def test_the_cap_refuses_a_larger_sweep_with_the_count():
    raw = {"mode": "grid", "cap": 5, "fields": {"optim.lr": [1e-5, 2e-5, 4e-5], "rollout.n": [4, 8]}}
    sweep, errors = sweep_plan.parse(raw)
    assert sweep is None
    assert errors["sweep.cap"] == (
        "the grid has 3 × 2 = 6 runs, more than the cap of 5: raise the cap (at most 30), "
        "or give fewer values"
    )
    assert parsed({**raw, "cap": 6}).runs == 6
    big = {"mode": "grid", "cap": 30, "fields": {"seed": list(range(8)), "rollout.n": [2, 4, 8, 16]}}
    assert "30 is the most one sweep queues" in sweep_plan.parse(big)[1]["sweep.cap"]
    drawn = {"mode": "random", "runs": 5, "cap": 4, "fields": {"seed": list(range(9))}}
    assert "more than its cap of 4" in sweep_plan.parse(drawn)[1]["sweep.cap"]
    assert sweep_plan.parse({"mode": "grid", "cap": 31, "fields": {"seed": [1]}})[1] == {
        "sweep.cap": "must be an integer between 1 and 30, got 31"
    }


@pytest.mark.parametrize(
    ("raw", "key", "words"),
    [
        ([], "sweep", "must be an object"),
        ({"mode": "bayes", "fields": {"seed": [1]}}, "sweep.mode", "grid or random"),
        ({"fields": {}}, "sweep.fields", "name the fields"),
        ({"fields": {"optim.nope": [1]}}, "f.optim.nope", "unknown field"),
        ({"fields": {"data.val_paths": [["a"]]}}, "f.data.val_paths", "list field cannot be swept"),
        ({"fields": {"optim.lr": "1e-5"}}, "f.optim.lr", "non-empty list"),
        ({"fields": {"optim.lr": ["fast"]}}, "f.optim.lr", "is not a number"),
        ({"fields": {"rollout.n": [4, 4.5]}}, "f.rollout.n", "is not an integer"),
        ({"fields": {"rollout.n": [4, 4]}}, "f.rollout.n", "lists 4 twice"),
        ({"fields": {"optim.lr": [None]}}, "f.optim.lr", "has no empty value"),
        ({"fields": {"algorithm.dynamic_sampling": [1]}}, "f.algorithm.dynamic_sampling", "true or false"),
        ({"fields": {"algorithm.loss_agg_mode": ["mean"]}}, "f.algorithm.loss_agg_mode", "is not one of"),
        ({"fields": {"optim.lr": {"low": 1e-6, "high": 1e-4}}}, "f.optim.lr", "a range is for random"),
        (
            {"mode": "random", "runs": 2, "fields": {"optim.lr": {"low": 0, "high": 1e-4, "scale": "log"}}},
            "f.optim.lr",
            "log scale needs low above 0",
        ),
        (
            {"mode": "random", "runs": 2, "fields": {"optim.lr": {"low": 2, "high": 1}}},
            "f.optim.lr",
            "must be below high",
        ),
        (
            {"mode": "random", "runs": 2, "fields": {"data.reward_fn": {"low": 1, "high": 2}}},
            "f.data.reward_fn",
            "needs a number field",
        ),
        ({"mode": "random", "fields": {"seed": [1, 2]}}, "sweep.runs", "must be an integer"),
        ({"mode": "grid", "runs": 3, "fields": {"seed": [1, 2]}}, "sweep.runs", "for random sweeps"),
        ({"fields": {f"optim.{k}": [1] for k in range(9)}}, "sweep.fields", "at most 8 fields"),
    ],
)
def test_a_bad_sweep_is_refused_with_a_message_for_its_key(raw, key, words):
    sweep, errors = sweep_plan.parse(raw)
    key = key.replace("f.", "sweep.fields.", 1) if key.startswith("f.") else key
    assert sweep is None and words in errors[key], errors


def test_the_separator_is_the_ladders():
    assert sweep_plan.SEP == LADDER_SEP


# ---- plan: every config validated like a single run ------------------------------------------------------


def test_one_invalid_combination_refuses_the_whole_sweep_naming_it(paths):
    from runs.configuring import build_config

    base = get_preset("tiny_cpu").with_overrides(paths).to_dict()
    sweep = parsed({"fields": {"algorithm.clip_high": [0.28, 0.1], "seed": [0, 1]}})

    def build(combo):
        return build_config(config=base, overrides=combo)

    planned, errors = sweep_plan.plan(sweep, "clip", build)
    assert planned == []
    assert set(errors) == {"algorithm.clip_high"}
    assert errors["algorithm.clip_high"].endswith("(in the sweep's run clip_high=0.1, seed=0, and 1 more)")
    planned, errors = sweep_plan.plan(
        parsed({"fields": {"algorithm.clip_high": [0.28, 0.3]}}), " clip ", build
    )
    assert errors == {} and [n for n, _, _ in planned] == ["clip · clip_high=0.28", "clip · clip_high=0.3"]
    assert all(isinstance(c, RunConfig) for _, _, c in planned)
    assert planned[1][2].algorithm.clip_high == 0.3
    # a problem of the base itself, alike in every run, comes back as it is
    _, errors = sweep_plan.plan(
        sweep, "x", lambda combo: build_config(config={**base, "seed": "zero"}, overrides={})
    )
    assert errors == {"seed": "must be an integer, got 'zero'"}
    _, errors = sweep_plan.plan(sweep, "x" * 190, build)
    assert errors["name"].startswith("is too long for the sweep's run names")


def test_a_runs_name_states_its_values_exactly_and_as_text():
    values = {
        "optim.lr": 3.14159265e-5,
        "rollout.temperature": 0.7,
        "validation.temperature": 1.0,
        "algorithm.clip_c": None,
        "data.reward_pattern": "x\ny",
        "algorithm.dynamic_sampling": False,
    }
    assert sweep_plan.label(values) == (
        "lr=3.14159265e-05, rollout.temperature=0.7, validation.temperature=1.0, clip_c=none, "
        "reward_pattern='x\\ny', dynamic_sampling=false"
    )
    long = parsed({"fields": {"data.reward_pattern": ["a" * 190, "b"]}})
    _, errors = sweep_plan.plan(long, "x", lambda combo: (None, {}))
    assert errors == {"sweep.fields": "the runs' values make names longer than 200 characters"}
