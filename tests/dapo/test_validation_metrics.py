"""Validation metrics (dapo.eval.metrics): hand-computed values, and equality with verl's formulas on fixed
inputs (a slow reference written here the way verl's process_validation_metrics computes them)."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest

from dapo.eval.metrics import (
    PromptSamples,
    bootstrap_indices,
    ks_for,
    majority_pick,
    pass_at_k,
    prompt_metrics,
    source_label,
    validation_metrics,
)


def samples(source: str, acc: list[int], preds: list[str] | None = None, lengths=None) -> PromptSamples:
    score = [1.0 if a else -1.0 for a in acc]
    return PromptSamples(
        source=source,
        acc=[float(a) for a in acc],
        score=score,
        reward=score,
        pred=preds or [str(a) for a in acc],
        length=lengths or [10] * len(acc),
    )


def test_ks_are_powers_of_two_below_n_then_n():
    assert ks_for(1) == []
    assert ks_for(2) == [2]
    assert ks_for(5) == [2, 4, 5]
    assert ks_for(32) == [2, 4, 8, 16, 32]


def test_unbiased_pass_at_k_by_hand():
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)  # 1 - C(2,2)/C(4,2)
    assert pass_at_k(5, 1, 1) == pytest.approx(0.2)
    assert pass_at_k(10, 3, 4) == pytest.approx(1 - 35 / 210)  # C(7,4)=35, C(10,4)=210
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0 and pass_at_k(4, 3, 2) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 2)


def test_unbiased_pass_at_k_equals_enumerating_every_subset():
    """The estimator is the share of the C(n, k) k-subsets holding a correct sample."""
    from itertools import combinations

    acc = [1, 0, 0, 1, 0, 0]
    for k in range(1, 7):
        subsets = list(combinations(range(6), k))
        share = sum(any(acc[i] for i in s) for s in subsets) / len(subsets)
        assert pass_at_k(6, 2, k) == pytest.approx(share)


def test_majority_pick_breaks_ties_by_first_occurrence_in_the_resample():
    codes = np.array([0, 1, 1, 0, 2])  # answers a b b a c
    idx = np.array([[0, 1, 2, 3], [1, 0, 3, 2], [2, 2, 0, 4], [4, 0, 1, 2], [4, 3, 1, 0]])
    # row 0: a,b,b,a tie -> a met first at sample 0; row 1: b,a,a,b tie -> b first, sample 1;
    # row 2: b,b,a,c -> b wins, first b is sample 2; row 3: c,a,b,b -> b wins, first at sample 1;
    # row 4: c,a,b,a -> a wins, first a is sample 3
    assert majority_pick(codes, idx).tolist() == [0, 1, 2, 1, 3]


def test_bootstrap_indices_are_verls_seeded_stream():
    np.random.seed(42)
    want = [np.random.choice(5, size=3, replace=True) for _ in range(1000)]
    assert np.array_equal(bootstrap_indices(5, 3), np.stack(want))


def test_prompt_metrics_by_hand():
    """Mean, std and pass@k by hand; bootstrap metrics of constant samples are the constant."""
    m = prompt_metrics(samples("s", [1, 1, 0, 0]))
    assert m["acc"]["mean@4"] == 0.5 and m["acc"]["std@4"] == 0.5
    assert m["score"]["mean@4"] == 0.0 and m["score"]["std@4"] == 1.0
    assert (
        m["acc"]["pass@1"] == 0.5 and m["acc"]["pass@2"] == pytest.approx(5 / 6) and m["acc"]["pass@4"] == 1.0
    )
    assert set(m["acc"]) >= {"best@2/mean", "worst@4/std", "maj@4/mean", "maj@2/std"}
    # best@4 of [1,1,0,0]: a resample of 4 misses both correct samples with chance (1/2)^4
    assert m["acc"]["best@4/mean"] == pytest.approx(1 - 1 / 16, abs=0.02)
    assert m["acc"]["worst@4/mean"] == pytest.approx(1 / 16, abs=0.02)
    constant = prompt_metrics(samples("s", [0, 0, 0]))
    for var, value in (("acc", 0.0), ("score", -1.0)):
        for name in ("best@2/mean", "worst@3/mean", "maj@2/mean", "maj@3/mean"):
            assert constant[var][name] == value
        assert constant[var]["best@3/std"] == 0.0
    single = prompt_metrics(samples("s", [1]))
    assert single["acc"] == {"mean@1": 1.0, "pass@1": 1.0}  # no std/best/worst/maj for n = 1, as verl


def test_maj_votes_on_the_extracted_answer_not_on_correctness():
    """Three wrong samples agreeing on "7" outvote two correct ones: maj@5 is 0 in every resample that
    draws 3+ sevens; with the answers all different the vote goes to the first drawn."""
    m = prompt_metrics(samples("s", [1, 1, 0, 0, 0], preds=["5", "5", "7", "7", "7"]))
    assert m["acc"]["maj@5/mean"] < m["acc"]["mean@5"] == 0.4
    split = prompt_metrics(samples("s", [1, 0, 0, 0], preds=["1", "2", "3", "4"]))
    # every answer is unique in the pool; a resample's winner is the first drawn answer with the most
    # copies, so maj@k is not the plain mean but is bounded by best@k and worst@k
    for k in (2, 4):
        assert (
            split["acc"][f"worst@{k}/mean"] <= split["acc"][f"maj@{k}/mean"] <= split["acc"][f"best@{k}/mean"]
        )


def test_validation_metrics_by_source_and_overall_by_hand():
    prompts = [
        samples("aime", [1, 1, 0, 0]),
        samples("aime", [0, 0, 0, 0], lengths=[20] * 4),
        samples("math 500", [1, 1, 1, 1]),
    ]
    m = validation_metrics(prompts)
    assert m["val/aime/acc/mean@4"] == 0.25  # (0.5 + 0) / 2
    assert m["val/aime/acc/std@4"] == 0.25  # (0.5 + 0) / 2
    assert m["val/aime/acc/pass@2"] == pytest.approx(5 / 12)  # (5/6 + 0) / 2
    assert m["val/aime/acc/pass@4"] == 0.5
    assert m["val/aime/score/mean@4"] == -0.5 and m["val/aime/score/std@4"] == 0.5
    assert m["val/aime/response_length/mean"] == 15.0
    assert m["val/math_500/acc/mean@4"] == 1.0 and m["val/math_500/acc/worst@4/mean"] == 1.0
    assert m["val/acc/mean@4"] == 0.5  # every prompt: (0.5 + 0 + 1) / 3
    assert m["val/acc/pass@4"] == pytest.approx(2 / 3)
    assert m["val/reward/mean@4"] == 0.0
    # the overall best@4 is the prompt average of the per-source values
    assert m["val/acc/best@4/mean"] == pytest.approx((2 * m["val/aime/acc/best@4/mean"] + 1.0) / 3)


def test_source_labels_are_safe_metric_name_parts():
    assert source_label("math_dapo") == "math_dapo"
    assert source_label("AIME 2024/v2") == "AIME_2024_v2"
    assert source_label("  ") == "unnamed"


# ---- equality with verl's formulas -------------------------------------------------------------


def verl_reference(sources, prompt_ids, infos, seed=42):
    """verl's validation metrics written out step by step: group by source and prompt, then per value
    mean@n, std@n and, for each k, a bootstrap (global NumPy generator re-seeded per call, 1000 draws of
    k indices with replacement) of max, min and the majority vote on pred; then average over prompts."""

    def bootstrap(data, k, fn):
        np.random.seed(seed)
        got = [fn([data[i] for i in np.random.choice(len(data), size=k, replace=True)]) for _ in range(1000)]
        return float(np.mean(got)), float(np.std(got))

    def vote(rows):
        by_answer = defaultdict(list)
        for row in rows:
            by_answer[row["pred"]].append(row["val"])
        counts = {a: len(v) for a, v in by_answer.items()}
        return by_answer[max(counts, key=counts.get)][0]

    groups = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for i, (source, pid) in enumerate(zip(sources, prompt_ids, strict=True)):
        for var, vals in infos.items():
            groups[source][pid][var].append(vals[i])
    out = defaultdict(list)
    for source, by_prompt in groups.items():
        for var2vals in by_prompt.values():
            for var, vals in var2vals.items():
                if isinstance(vals[0], str):
                    continue
                n = len(vals)
                out[f"{source}/{var}/mean@{n}"].append(float(np.mean(vals)))
                out[f"{source}/{var}/std@{n}"].append(float(np.std(vals)))
                ks, k = [], 2
                while k < n:
                    ks.append(k)
                    k *= 2
                for k in [*ks, n]:
                    for name, fn in (("best", np.max), ("worst", np.min)):
                        mean, std = bootstrap(vals, k, fn)
                        out[f"{source}/{var}/{name}@{k}/mean"].append(mean)
                        out[f"{source}/{var}/{name}@{k}/std"].append(std)
                    rows = [{"val": v, "pred": p} for v, p in zip(vals, var2vals["pred"], strict=True)]
                    mean, std = bootstrap(rows, k, vote)
                    out[f"{source}/{var}/maj@{k}/mean"].append(mean)
                    out[f"{source}/{var}/maj@{k}/std"].append(std)
    return {name: float(np.mean(v)) for name, v in out.items()}


def test_our_metrics_equal_verls_formulas_on_fixed_inputs():
    rng = np.random.default_rng(7)
    n, prompts = 6, []
    sources, prompt_ids, infos = [], [], {"acc": [], "score": [], "pred": []}
    for p in range(5):
        acc = rng.integers(0, 2, size=n).tolist()
        preds = [str(x) for x in rng.integers(0, 3, size=n)]
        source = "aime" if p < 3 else "gsm8k"
        prompts.append(samples(source, acc, preds=preds))
        for a, pred in zip(acc, preds, strict=True):
            sources.append(source)
            prompt_ids.append(p)
            infos["acc"].append(float(a))
            infos["score"].append(1.0 if a else -1.0)
            infos["pred"].append(pred)
    ours = validation_metrics(prompts)
    theirs = verl_reference(sources, prompt_ids, infos)
    assert len(theirs) == 2 * 2 * (2 + 6 * len(ks_for(n)))
    for name, value in theirs.items():
        assert ours[f"val/{name}"] == pytest.approx(value, abs=1e-12), name
    assert not math.isnan(ours["val/acc/maj@6/mean"])
