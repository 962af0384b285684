"""A group's completions side by side (inspector.group_view): which completions, their order, where two
first part, bad input and visibility."""

from __future__ import annotations

import random
import re

import pytest
from inspector.group_view import common_prefix, default_pair, first_divergence, group_columns

from tests.platform.inspector.conftest import GROUP, embedded

pytestmark = pytest.mark.django_db

# ---- a group side by side ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sort", "order"),
    [
        ("index", [0, 1, 2, 3]),
        ("reward_desc", [0, 2, 1, 3]),
        ("reward_asc", [3, 1, 0, 2]),
        ("length_desc", [3, 1, 0, 2]),
        ("length_asc", [2, 0, 1, 3]),
    ],
)
def test_a_groups_columns_are_its_completions_in_the_chosen_order(run, sort, order):
    data = group_columns(run, "train", 8, 0, sort)
    assert [c["sample_index"] for c in data["columns"]] == order  # group 1's sample never joins
    assert data["prompt"] == "Compute 1+1." and data["correct"] == 2
    assert [c["has_tokens"] for c in sorted(data["columns"], key=lambda c: c["sample_index"])] == [
        True,
        True,
        False,
        False,
    ]


def test_the_first_pair_is_the_best_and_the_worst_reward():
    cols = [{"sample_index": i, "reward": r} for i, r, *_ in GROUP]
    assert default_pair(cols) == (0, 3)
    assert default_pair([{"sample_index": 5, "reward": 1.0}, {"sample_index": 2, "reward": 1.0}]) == (2, 5)
    assert default_pair(cols[:1]) is None


def test_divergence_is_counted_in_tokens_where_both_have_them_else_in_characters():
    by_index = {i: {"response": text, "tokens": tokens} for i, _, _, text, tokens in GROUP}
    # tokens: "Let x =" then " 2" against " 3": token 3, at character 7 of both
    assert first_divergence(by_index[0], by_index[1]) == {
        "level": "token",
        "index": 3,
        "identical": False,
        "char_a": 7,
        "char_b": 7,
        "span_a": 2,
        "span_b": 2,
    }
    # sample 2 has no token data: characters, "Let x = 2. So " shared
    assert first_divergence(by_index[0], by_index[2]) == {
        "level": "char",
        "index": 14,
        "identical": False,
        "char_a": 14,
        "char_b": 14,
        "span_a": 1,
        "span_b": 1,
    }
    same = {"response": "abc", "tokens": ["a", "bc"]}
    assert first_divergence(same, dict(same))["identical"] is True
    # tokens that do not spell the text (sentencepiece's ▁ for a space): the text's own offset
    odd = first_divergence(
        {"response": "ab c", "tokens": ["▁ab", "▁c"]}, {"response": "ab d", "tokens": ["▁ab", "▁d"]}
    )
    assert (odd["level"], odd["index"], odd["char_a"], odd["span_a"]) == ("token", 1, 3, 1)


def test_common_prefix_agrees_with_a_loop():
    rng = random.Random(0)
    for _ in range(300):
        a = "".join(rng.choice("ab") for _ in range(rng.randint(0, 12)))
        b = "".join(rng.choice("ab") for _ in range(rng.randint(0, 12)))
        slow = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        assert common_prefix(a, b) == slow == common_prefix(list(a), list(b))


def test_the_group_page_shows_the_columns_and_the_first_pair(alice_client, run):
    response = alice_client.get(f"/runs/{run.pk}/samples/step/8/group/0/", {"sort": "reward_desc"})
    assert response.status_code == 200
    html = response.content.decode()
    assert re.findall(r'id="column-(\d+)"', html) == ["0", "2", "1", "3"]
    meta = embedded(html, "group-data")
    assert meta["indexes"] == [0, 2, 1, 3]
    assert (meta["pair"]["a"], meta["pair"]["b"], meta["pair"]["level"], meta["pair"]["index"]) == (
        0,
        3,
        "char",
        0,
    )
    chosen = embedded(
        alice_client.get(f"/runs/{run.pk}/samples/step/8/group/0/", {"a": 1, "b": 0}).content.decode(),
        "group-data",
    )["pair"]
    assert (chosen["a"], chosen["b"], chosen["level"], chosen["index"]) == (1, 0, "token", 3)


def test_the_divergence_endpoint_answers_for_a_chosen_pair(alice_client, run):
    url = f"/runs/{run.pk}/samples/step/8/group/0/diverge/"
    body = alice_client.get(url, {"a": 0, "b": 2}).json()
    assert (body["a"], body["b"], body["level"], body["index"]) == (0, 2, "char", 14)
    assert alice_client.get(url, {"a": 0}).status_code == 400
    assert alice_client.get(url, {"a": 0, "b": "x"}).status_code == 400
    missing = alice_client.get(url, {"a": 0, "b": 4})  # sample 4 is in group 1
    assert missing.status_code == 404 and "Sample 4" in missing.json()["error"]


def test_bad_group_requests_are_clear_errors(alice_client, run):
    base = f"/runs/{run.pk}/samples/step"
    assert alice_client.get(f"{base}/8/group/9/").status_code == 404
    assert alice_client.get(f"{base}/3/group/0/").status_code == 404  # no samples at step 3
    assert alice_client.get(f"{base}/8/group/0/", {"sort": "nope"}).status_code == 400
    assert alice_client.get(f"{base}/8/group/0/", {"split": "test"}).status_code == 400
    assert alice_client.get(f"{base}/8/group/0/", {"a": 1}).status_code == 400
    assert alice_client.get(f"{base}/8/group/{2**40}/").status_code == 404
    assert alice_client.get(f"{base}/4/group/0/", {"split": "val"}).status_code == 200


def test_another_users_group_is_a_404(bob_client, run):
    assert bob_client.get(f"/runs/{run.pk}/samples/step/8/group/0/").status_code == 404
    assert (
        bob_client.get(f"/runs/{run.pk}/samples/step/8/group/0/diverge/", {"a": 0, "b": 1}).status_code == 404
    )
