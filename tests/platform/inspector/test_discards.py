"""The inspector's discarded rollouts, reward-part filter and objective explainer (inspector.discards,
inspector.reward_breakdown, inspector.explainer): counts per reason against the logged metrics, what a
capped step did not store, badges, filters and their bad input, and the explainer's numbers against
dapo.algo.loss."""

from __future__ import annotations

import json
import re

import pytest
import torch
from inspector.discards import step_discards
from runs.models import Run, Sample

from dapo.algo.loss import policy_loss
from dapo.loop.report import StepReport
from tests.platform.support import sample

pytestmark = pytest.mark.django_db

G = 2
# (reason of each group, acc of its two samples); group 1's second sample is overlong-filtered
GROUPS = [
    ("", [True, False]),
    ("", [True, False]),
    ("all_correct", [True, True]),
    ("all_wrong", [False, False]),
    ("surplus", [False, True]),
]
OLD = [-1.0, -2.0, -0.5]
NEW = [-1.0 + 0.4, -2.0 - 0.5, -0.5 + 0.05]  # ratios e^0.4 = 1.49 (clipped high), e^-0.5, e^0.05


METRICS = {
    "train/discarded_groups/all_correct": 1,
    "train/discarded_groups/all_wrong": 2,
    "train/discarded_groups/no_variance": 0,
    "train/discarded_groups/surplus": 1,
    "train/discarded_samples/overlong": 1,
    "train/num_prompts_generated": 6,
    "train/num_samples_trained": 4,
    "actor/pg_loss": 0.125,
}
"""What the trainer logged for that step: one all-wrong group and 2 samples more than are stored."""


def discard_samples() -> list:
    """One train step of the GROUPS above (also the browser test's rows)."""
    out = []
    for g, (reason, accs) in enumerate(GROUPS):
        for j, acc in enumerate(accs):
            i = g * G + j
            fields = {
                "group": g,
                "problem_index": g,
                "acc": acc,
                "kept": reason == "",
                "discard_reason": reason,
                "score": 1.0 if acc else -1.0,
                "reward": 1.0 if acc else -1.0,
                "advantage": 0.7 if acc else -0.7,
                "reward_scores": {"math_dapo": 1.0 if acc else -1.0, "regex": float(j)},
            }
            if g == 1 and j == 1:
                fields.update(discard_reason="overlong", truncated=True, overlong_penalty=-0.5, reward=-1.5)
            if reason == "":
                fields["update_info"] = {
                    "minibatch": g,
                    "minibatch_tokens": 7,
                    "minibatch_seqs": 2,
                    "in_loss": fields["discard_reason"] != "overlong",
                }
            if i == 0:
                fields.update(
                    tokens=["a", "b", "c"],
                    token_logprobs=OLD,
                    token_ratio=[1.49, 0.61, 1.05],
                    token_old_logprobs=OLD,
                    token_new_logprobs=NEW,
                    length=3,
                )
            out.append(sample(1, i, **fields))
    return out


@pytest.fixture
def discarding(alice_run: Run) -> Run:
    """A step of 5 groups whose trainer logged one more all-wrong group than is stored (a capped
    step), 12 generated samples of which 10 are stored."""
    configure(alice_run)
    alice_run.record_step(StepReport(step=1, metrics=METRICS, samples=discard_samples()))
    return alice_run


def configure(run: Run) -> None:
    """Groups of 2, two rewards weighted 1 and 0.25, at most 10 samples stored a step."""
    config = run.config
    config["rollout"]["n"] = G
    config["data"].update(reward_fn="math_dapo, regex", reward_weights="1, 0.25")
    config["logging"]["samples_per_step"] = 10
    run.save(update_fields=["config"])


def _data(client, run: Run, **params) -> dict:
    response = client.get(f"/runs/{run.pk}/samples/data/", {"step": 1, **params})
    assert response.status_code == 200, response.content
    return response.json()


def _indexes(data: dict) -> list[int]:
    return [s["sample_index"] for g in data["groups"] for s in g["samples"]]


def test_counts_per_reason_are_stored_against_logged_with_what_was_not_stored(alice_client, discarding):
    d = _data(alice_client, discarding)["discards"]
    rows = {r["reason"]: (r["stored"], r["logged"], r["not_stored"]) for r in d["rows"]}
    assert rows == {
        "trained": (2, 2, 0),
        "all_correct": (1, 1, 0),
        "all_wrong": (1, 2, 1),
        "no_variance": (0, 0, 0),
        "surplus": (1, 1, 0),
        "overlong": (1, 1, 0),
    }
    assert (d["stored_samples"], d["generated_samples"], d["not_stored"], d["cap"]) == (10, 12, 2, 10)
    assert step_discards(discarding, "val", 1, 0) is None  # validation groups are never trained


def test_groups_and_samples_carry_the_badge_of_their_reason(alice_client, discarding):
    groups = _data(alice_client, discarding)["groups"]
    assert [g["reason_badge"] and g["reason_badge"]["label"] for g in groups] == [
        None,
        None,
        "dropped: all correct",
        "dropped: all wrong",
        "surplus: batch full",
    ]
    assert [g["overlong_n"] for g in groups] == [0, 1, 0, 0, 0]
    overlong = Sample.objects.get(run=discarding, sample_index=3)
    html = alice_client.get(f"/runs/{discarding.pk}/samples/{overlong.pk}/").content.decode()
    assert 'data-reason="overlong" id="reason-badge"' in html and "overlong filtering masked it" in html


@pytest.mark.parametrize(
    ("params", "want"),
    [
        ({"reason": "trained"}, [0, 1, 2]),
        ({"reason": "discarded"}, [3, 4, 5, 6, 7, 8, 9]),
        ({"reason": "all_correct"}, [4, 5]),
        ({"reason": "surplus"}, [8, 9]),
        ({"reason": "overlong"}, [3]),
        ({"part": "overlong_penalty", "part_op": "lt", "part_value": "0"}, [3]),
        ({"part": "reward/regex", "part_value": "1"}, [1, 3, 5, 7, 9]),  # part_op defaults to =
        ({"part": "reward/regex", "part_op": "ne", "part_value": "1"}, [0, 2, 4, 6, 8]),
        ({"part": "reward/math_dapo", "part_op": "ge", "part_value": "0.5"}, [0, 2, 4, 5, 9]),
        ({"part": "score", "part_op": "le", "part_value": "-1"}, [1, 3, 6, 7, 8]),
        ({"part": "reward/nobody", "part_op": "lt", "part_value": "5"}, []),
        ({"part": "reward/math_dapo", "part_value": "1", "reason": "discarded"}, [4, 5, 9]),
    ],
)
def test_filters_by_reason_and_by_reward_part(alice_client, discarding, params, want):
    data = _data(alice_client, discarding, **params)
    assert sorted(_indexes(data)) == want
    assert data["narrows"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"reason": "bored"}, "reason"),
        ({"part_value": "1"}, "part"),
        ({"part": "reward"}, "part_value"),
        ({"part": "score", "part_value": "x"}, "part_value"),
        ({"part": "score", "part_op": "~", "part_value": "1"}, "part_op"),
        ({"part": "prompt", "part_value": "1"}, "part"),
        ({"part": "reward/", "part_value": "1"}, "part"),
        ({"part": "score", "part_value": "nan"}, "part_value"),
    ],
)
def test_bad_filter_values_are_400_naming_the_parameter(alice_client, discarding, params, field):
    response = alice_client.get(f"/runs/{discarding.pk}/samples/data/", {"step": 1, **params})
    assert response.status_code == 400
    assert response.json()["error"].startswith(f"{field}:")


def _explain(html: str) -> dict:
    match = re.search(r'<script id="explain-data" type="application/json">(.*?)</script>', html, re.S)
    assert match
    return json.loads(match.group(1))


def test_the_explainer_gives_dapo_losss_per_token_terms(alice_client, discarding):
    s = Sample.objects.get(run=discarding, sample_index=0)
    html = alice_client.get(f"/runs/{discarding.pk}/samples/{s.pk}/").content.decode()
    data = _explain(html)
    assert (data["mode"], data["minibatch_tokens"], data["minibatch_seqs"]) == ("token-mean", 7, 2)
    assert (data["clip_low"], data["clip_high"], data["clip_c"], data["pg_loss"]) == (0.2, 0.28, 10.0, 0.125)
    # dapo.algo.loss on this sample, as one sequence of a mini-batch of 7 tokens: each token's loss on its own
    # (one-hot mask, 1 token) and the gradient of the mini-batch loss on each log-prob
    logp = torch.tensor([NEW], dtype=torch.float64, requires_grad=True)
    old, adv = torch.tensor([OLD], dtype=torch.float64), torch.tensor([0.7], dtype=torch.float64)
    clip = {"clip_low": 0.2, "clip_high": 0.28, "clip_c": 10.0}
    loss, _ = policy_loss(logp, old, adv, torch.ones(1, 3), **clip, num_tokens=7)
    loss.backward()
    assert logp.grad is not None
    for t, term in enumerate(data["terms"]):
        one = torch.zeros(1, 3)
        one[0, t] = 1.0
        alone, m = policy_loss(logp.detach(), old, adv, one, **clip, num_tokens=1)
        assert term["loss"] == pytest.approx(alone.item(), rel=1e-12)
        assert term["clipped"] == (m["actor/pg_clipfrac"] == 1.0)
        assert term["weight"] == pytest.approx(1 / 7)
        assert term["gradient"] == pytest.approx(logp.grad[0, t].item(), abs=1e-12)
    assert [t["rule"] for t in data["terms"]] == ["high", "", ""]
    assert data["sample_share"] == pytest.approx(loss.item(), rel=1e-12)
    assert 'id="token-explain"' in html and "token_explain.js" in html


def test_a_sample_without_recorded_log_probs_has_no_explainer(alice_client, discarding):
    s = Sample.objects.get(run=discarding, sample_index=1)  # trained, no token data
    html = alice_client.get(f"/runs/{discarding.pk}/samples/{s.pk}/").content.decode()
    assert 'id="token-explain"' not in html and "token_explain.js" not in html


def test_non_finite_log_probs_are_stored_as_null(alice_run):
    record = sample(1, 0, token_old_logprobs=[-1.0, float("-inf")], token_new_logprobs=[float("nan"), -2.0])
    alice_run.record_step(StepReport(step=1, metrics={}, samples=[record]))
    s = Sample.objects.get(run=alice_run)
    assert (s.token_old_logprobs, s.token_new_logprobs) == ([-1.0, None], [None, -2.0])


@pytest.mark.parametrize("path", ["samples/data/?step=1&reason=surplus", "samples/{pk}/"])
def test_another_users_run_is_404(bob_client, discarding, path):
    pk = Sample.objects.filter(run=discarding).first().pk
    assert bob_client.get(f"/runs/{discarding.pk}/{path.format(pk=pk)}").status_code == 404


def test_the_api_lists_samples_with_their_reason_and_filters_by_it(api, bob_api, discarding):
    url = f"/api/runs/{discarding.pk}/samples/"
    body = api.get(url, {"reason": "discarded", "page_size": 50}).json()
    got = {row["sample_index"]: row["discard_reason"] for row in body["results"]}
    assert got == {
        3: "overlong",
        4: "all_correct",
        5: "all_correct",
        6: "all_wrong",
        7: "all_wrong",
        8: "surplus",
        9: "surplus",
    }
    bad = api.get(url, {"reason": "bored"})
    assert bad.status_code == 400 and "reason" in bad.json()
    assert bob_api.get(url, {"reason": "surplus"}).status_code == 404
