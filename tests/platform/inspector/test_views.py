"""The rollout inspector: step pages, filters, groups and badges, the sample page and its token view, the
problem timeline, the exports, bad input, output rendered as text, and what list queries read."""

from __future__ import annotations

import csv
import io
import json
import math
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from inspector import exports
from inspector.sample_view import clip_flag, mark_answer
from inspector.views import sample_steps
from runs.csv_export import csv_cell
from runs.models import Run, Sample

from dapo.loop.report import StepReport
from dapo.runconfig.presets import get_preset
from tests.platform.support import sample

pytestmark = pytest.mark.django_db

G = 4
EVIL = "<script>alert(1)</script><b>x</b>"
# Per group of a step: (acc of its 4 samples, kept by dynamic sampling)
GROUPS = [
    ([True, False, True, False], True),
    ([True] * 4, False),
    ([False] * 4, False),
    ([False, True, False, False], True),
]


def _samples(step: int, *, split: str = "train", groups=GROUPS, token_rows: int = 2, **kw) -> list:
    out = []
    for g, (accs, kept) in enumerate(groups):
        for j, acc in enumerate(accs):
            i = g * G + j
            truncated = j == 3
            penalty = -0.25 if truncated else 0.0
            fields = {
                "split": split,
                "group": g,
                "problem_index": 100 + g,
                "kept": kept or split == "val",
                "prompt": f"Compute problem {100 + g}.",
                "ground_truth": str(g),
                "acc": acc,
                "pred": str(g) if acc else f"{g + 5}",
                "score": 1.0 if acc else -1.0,
                "reward": (1.0 if acc else -1.0) + penalty,
                "overlong_penalty": penalty,
                "advantage": 0.0 if not kept else (0.8 if acc else -0.8),
                "length": 5 + 3 * i + step,
                "truncated": truncated,
                "response": f"step {step} sample {i} thinks hard. The answer is {str(g) if acc else g + 5}.",
            }
            if i < token_rows and split == "train":
                fields.update(
                    tokens=["The", " answer", " is", "\n", "<b>x</b>"],
                    token_logprobs=[-0.1, -2.0, -0.01, -5.0, -0.5],
                    token_entropy=[0.2, 1.5, 0.1, 2.2, 0.7],
                    token_ratio=[1.0, 1.5, 0.5, 1.1, 20.0],
                )
            out.append(sample(step, i, **{**fields, **kw}))
    return out


def _record(run: Run, step: int, *, val: bool = False, **kw) -> None:
    val_samples = _samples(step, split="val", groups=GROUPS[:2]) if val else []
    run.record_step(
        StepReport(
            step=step,
            metrics={"critic/score/mean": 0.1},
            samples=_samples(step, **kw),
            val_samples=val_samples,
        )
    )


@pytest.fixture
def stepped(alice_run: Run) -> Run:
    """alice's run with training steps 1-3 and validation at step 2."""
    for step in (1, 2, 3):
        _record(alice_run, step, val=step == 2)
    return alice_run


def _data(client, run: Run, **params) -> dict:
    response = client.get(f"/runs/{run.pk}/samples/data/", params)
    assert response.status_code == 200, response.content
    return response.json()


def _indexes(data: dict) -> list[int]:
    if data["view"] == "list":
        return [s["sample_index"] for s in data["samples"]]
    return [s["sample_index"] for g in data["groups"] for s in g["samples"]]


def _embedded(html: str, element_id: str) -> dict:
    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', html, re.S)
    assert match, element_id
    return json.loads(match.group(1))


# ---- the step page ------------------------------------------------------------------------------


def test_the_inspector_opens_on_the_newest_step_with_its_groups(alice_client, stepped):
    response = alice_client.get(f"/runs/{stepped.pk}/samples/")
    assert response.status_code == 200
    data = _embedded(response.content.decode(), "inspector-data")
    assert (data["step"], data["steps"], data["split"]) == (3, [1, 2, 3], "train")
    assert data["other_split_has_samples"] is True
    assert [g["group"] for g in data["groups"]] == [0, 1, 2, 3]
    first = data["groups"][0]
    assert (first["prompt_text"], first["truth"], first["n"], first["correct"]) == (
        "Compute problem 100.",
        "0",
        4,
        2,
    )
    row = first["samples"][1]
    assert (row["pred"], row["acc"], row["reward"], row["length"], row["truncated"]) == (
        "5",
        False,
        -1.0,
        11,
        False,
    )
    assert row["advantage"] == -0.8 and row["preview"].startswith("step 3 sample 1")
    assert data["summary"] == {
        "samples": 16,
        "groups": 4,
        "correct": 7,
        "kept_groups": 2,
        "truncated": 4,
        "with_tokens": 2,
        "mean_reward": pytest.approx((7 - 9 - 4 * 0.25) / 16),
        "mean_length": pytest.approx(8 + 22.5),
    }


def test_the_slider_steps_and_the_validation_split(alice_client, stepped):
    assert _data(alice_client, stepped, step=1)["groups"][0]["samples"][0]["preview"].startswith("step 1 ")
    val = _data(alice_client, stepped, split="val")
    assert (val["steps"], val["step"], len(val["groups"])) == ([2], 2, 2)
    assert {s["split"] for g in val["groups"] for s in g["samples"]} == {"val"}
    steps = alice_client.get(f"/runs/{stepped.pk}/samples/steps/", {"split": "val"}).json()
    assert (steps["steps"], steps["run_step"]) == ([2], 3)


def test_sample_steps_lists_each_step_once_in_order(stepped):
    _record(stepped, 10)
    assert sample_steps(stepped, "train") == [1, 2, 3, 10]
    assert sample_steps(stepped, "val") == [2]
    other = Run.objects.create(owner=stepped.owner, name="empty", config=stepped.config)
    assert sample_steps(other, "train") == []


def test_a_run_without_samples_says_so(alice_client, alice_run):
    data = _embedded(alice_client.get(f"/runs/{alice_run.pk}/samples/").content.decode(), "inspector-data")
    assert (data["step"], data["steps"], data["groups"]) == (None, [], [])


def test_group_badges_come_from_acc_and_the_stored_kept_flag(alice_client, stepped):
    labels = [g["badge"]["label"] for g in _data(alice_client, stepped)["groups"]]
    assert labels == ["mixed · kept", "all correct · filtered", "all wrong · filtered", "mixed · kept"]
    # dynamic sampling off: an all-correct group is trained on, and says so
    _record(stepped, 4, groups=[([True] * 4, True)])
    assert _data(alice_client, stepped, step=4)["groups"][0]["badge"]["label"] == "all correct · kept"
    val = [g["badge"]["label"] for g in _data(alice_client, stepped, split="val")["groups"]]
    assert val == ["mixed", "all correct"]  # validation groups are never trained: no kept/filtered


def _stored(run: Run, step: int) -> list[Sample]:
    return list(Sample.objects.filter(run=run, split="train", step=step).order_by("sample_index"))


@pytest.mark.parametrize(
    ("params", "keep"),
    [
        ({"acc": "true"}, lambda s: s.acc),
        ({"acc": "false"}, lambda s: not s.acc),
        ({"kept": "false"}, lambda s: not s.kept),
        ({"truncated": "true"}, lambda s: s.truncated),
        ({"tokens": "true"}, lambda s: s.tokens is not None),
        ({"reward_min": "0", "reward_max": "0.9"}, lambda s: 0 <= s.reward <= 0.9),
        ({"reward_max": "-1.1"}, lambda s: s.reward <= -1.1),
        ({"length_min": "20", "length_max": "30"}, lambda s: 20 <= s.length <= 30),
        ({"q": "SAMPLE 7 "}, lambda s: "sample 7 " in s.response),
        ({"q": "problem 102"}, lambda s: s.group == 2),
        ({"problem": "101"}, lambda s: s.problem_index == 101),
        (
            {"acc": "true", "kept": "true", "truncated": "false"},
            lambda s: s.acc and s.kept and not s.truncated,
        ),
    ],
)
def test_filters_select_exactly_the_matching_samples(alice_client, stepped, params, keep):
    expected = [s.sample_index for s in _stored(stepped, 3) if keep(s)]
    assert expected, "the case must match something"
    for view in ("groups", "list"):
        data = _data(alice_client, stepped, step=3, view=view, **params)
        assert sorted(_indexes(data)) == expected
        assert data["matching"] == len(expected) and data["narrows"] is True


def test_sorts_and_top_k(alice_client, stepped):
    stored = _stored(stepped, 3)
    by_reward = sorted(stored, key=lambda s: (-s.reward, s.sample_index))
    data = _data(alice_client, stepped, step=3, view="list", sort="reward_desc")
    assert _indexes(data) == [s.sample_index for s in by_reward]
    top = _data(alice_client, stepped, step=3, rank="top", rank_by="length", k=3)
    assert top["view"] == "list" and _indexes(top) == [15, 14, 13]
    bottom = _data(alice_client, stepped, step=3, rank="bottom", k=2, acc="false")
    assert _indexes(bottom) == [3, 11]  # the lowest rewards (wrong and truncated), ties by index


def test_groups_rank_by_their_best_matching_sample_and_paginate(alice_client, stepped, monkeypatch):
    from inspector import views as inspect

    data = _data(alice_client, stepped, step=3, sort="length_desc")
    assert [g["group"] for g in data["groups"]] == [3, 2, 1, 0]
    assert [s["sample_index"] for s in data["groups"][0]["samples"]] == [15, 14, 13, 12]
    data = _data(alice_client, stepped, step=3, sort="reward_desc", truncated="false")
    assert [g["group"] for g in data["groups"]] == [0, 1, 3, 2]  # best rewards 1, 1, 1, -1; ties by group
    monkeypatch.setattr(inspect, "GROUPS_PER_PAGE", 3)
    first, second = _data(alice_client, stepped, step=3), _data(alice_client, stepped, step=3, page=2)
    assert (first["pages"], [g["group"] for g in first["groups"]]) == (2, [0, 1, 2])
    assert [g["group"] for g in second["groups"]] == [3]
    assert second["groups"][0]["n"] == 4  # group stats count every sample, not only the page's


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"step": "abc"}, "step"),
        ({"step": "99999999999999999999"}, "step"),
        ({"step": "-1"}, "step"),
        ({"reward_min": "nan"}, "reward_min"),
        ({"reward_max": "1e400"}, "reward_max"),
        ({"length_min": "-5"}, "length_min"),
        ({"q": "a\x00b"}, "q"),
        ({"q": "x" * 201}, "q"),
        ({"sort": "pk"}, "sort"),
        ({"k": "0"}, "k"),
        ({"k": "100000"}, "k"),
        ({"page": "0"}, "page"),
        ({"acc": "maybe"}, "acc"),
        ({"split": "test"}, "split"),
        ({"problem": "1" * 30}, "problem"),
    ],
)
def test_bad_parameters_answer_400_naming_the_parameter(alice_client, stepped, params, field):
    data = alice_client.get(f"/runs/{stepped.pk}/samples/data/", params)
    assert data.status_code == 400 and data.json()["error"].startswith(f"{field}:")
    page = alice_client.get(f"/runs/{stepped.pk}/samples/", params)
    assert page.status_code == 400 and f"{field}:" in page.content.decode()
    export = alice_client.get(f"/runs/{stepped.pk}/samples/export.csv", {"step": "3", **params})
    assert export.status_code == 400 and f"{field}:" in export.content.decode()


def test_a_step_without_samples_and_a_missing_sample_are_404(alice_client, stepped):
    response = alice_client.get(f"/runs/{stepped.pk}/samples/", {"step": "7"})
    assert response.status_code == 404 and "Step 7 has no train samples (steps with train samples: 1–3)" in (
        response.content.decode()
    )
    assert alice_client.get(f"/runs/{stepped.pk}/samples/data/", {"step": "7"}).status_code == 404
    assert alice_client.get(f"/runs/{stepped.pk}/samples/99999999/").status_code == 404
    assert alice_client.get(f"/runs/{stepped.pk}/samples/{'9' * 30}/").status_code == 404
    assert alice_client.get(f"/runs/{stepped.pk}/problems/{'9' * 30}/").status_code == 404
    assert alice_client.get(f"/runs/{stepped.pk}/problems/5000/").status_code == 404
    assert alice_client.get(f"/runs/{stepped.pk}/samples/export.xlsx", {"step": "3"}).status_code == 404


def test_a_sample_of_another_run_is_404_even_for_its_owner(alice_client, stepped, alice, paths, queued):
    other = Run.create_queued(owner=alice, name="other", config=get_preset("tiny_cpu").with_overrides(paths))
    pk = Sample.objects.filter(run=stepped).values_list("pk", flat=True).first()
    assert alice_client.get(f"/runs/{other.pk}/samples/{pk}/").status_code == 404


@pytest.mark.parametrize(
    "path",
    ["samples/", "samples/data/", "samples/steps/", "samples/export.jsonl?step=3", "problems/100/", "SAMPLE"],
)
def test_another_users_run_is_404_and_a_visitor_is_sent_to_log_in(bob_client, anon_client, stepped, path):
    if path == "SAMPLE":
        path = f"samples/{Sample.objects.filter(run=stepped).values_list('pk', flat=True).first()}/"
    assert bob_client.get(f"/runs/{stepped.pk}/{path}").status_code == 404
    response = anon_client.get(f"/runs/{stepped.pk}/{path}")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


# ---- one sample, its tokens -------------------------------------------------------------------------


def test_the_sample_page_shows_the_whole_trace_the_answer_and_links(alice_client, stepped):
    s = Sample.objects.get(run=stepped, split="train", step=2, sample_index=5)
    html = alice_client.get(f"/runs/{stepped.pk}/samples/{s.pk}/").content.decode()
    assert (
        '<mark class="pred" id="pred">1</mark>' in html
        and '<code class="truth" id="ground-truth">1</code>' in html
    )
    assert 'step 2 sample 5 thinks hard. The answer is <mark class="pred-mark">1</mark>.' in html
    assert f'href="/runs/{stepped.pk}/problems/101/?split=train"' in html
    assert f"/runs/{stepped.pk}/samples/?split=train&amp;step=2#group-1" in html
    neighbours = Sample.objects.filter(run=stepped, split="train", step=2, sample_index__in=[4, 6])
    for n in neighbours:
        assert f'href="/runs/{stepped.pk}/samples/{n.pk}/"' in html


def test_the_sample_page_counts_one_character_in_the_singular(alice_client, stepped):
    s = Sample.objects.get(run=stepped, split="train", step=2, sample_index=5)
    Sample.objects.filter(pk=s.pk).update(response="7")
    html = alice_client.get(f"/runs/{stepped.pk}/samples/{s.pk}/").content.decode()
    assert re.search(r"\b1 character(?!s)", html) and "1 characters" not in html
    Sample.objects.filter(pk=s.pk).update(response="42")
    assert "2 characters" in alice_client.get(f"/runs/{stepped.pk}/samples/{s.pk}/").content.decode()


def test_mark_answer_marks_the_last_occurrence_and_never_invalid():
    assert mark_answer("2 + 2 = 4, so 4", "4") == ("2 + 2 = 4, so ", "4", "")
    assert mark_answer("no answer", "[INVALID]") == ("no answer", "", "")
    assert mark_answer("text", "") == ("text", "", "")


def test_the_token_view_carries_values_and_clip_marks_from_the_runs_config(alice_client, stepped):
    s = Sample.objects.get(run=stepped, split="train", step=3, sample_index=0)  # acc, advantage +0.8
    html = alice_client.get(f"/runs/{stepped.pk}/samples/{s.pk}/").content.decode()
    tokens = _embedded(html, "token-data")
    assert tokens["tokens"] == ["The", " answer", " is", "\n", "<b>x</b>"]
    assert tokens["logprob"] == [-0.1, -2.0, -0.01, -5.0, -0.5] and tokens["entropy"][3] == 2.2
    assert (tokens["clip_low"], tokens["clip_high"]) == (0.2, 0.28)  # tiny_cpu's algorithm block
    assert tokens["clip"] == ["", "high", "", "", "high"]  # ratio 1.5 and 20 > 1.28 with A > 0
    assert tokens["counts"] == {"high": 2, "low": 0, "dual": 0} and 'id="colour-by"' not in html
    negative = Sample.objects.get(run=stepped, split="train", step=3, sample_index=1)  # wrong, advantage -0.8
    tokens = _embedded(
        alice_client.get(f"/runs/{stepped.pk}/samples/{negative.pk}/").content.decode(), "token-data"
    )
    assert tokens["clip"] == ["", "", "low", "", "dual"]  # 0.5 < 0.8; 20 > c = 10


def test_clip_bounds_are_read_from_the_stored_config(alice_client, stepped):
    stepped.config["algorithm"].update(clip_low=0.6, clip_high=0.6, clip_c=None)
    stepped.save(update_fields=["config"])
    negative = Sample.objects.get(run=stepped, split="train", step=3, sample_index=1)
    tokens = _embedded(
        alice_client.get(f"/runs/{stepped.pk}/samples/{negative.pk}/").content.decode(), "token-data"
    )
    assert tokens["clip"] == ["", "", "", "", ""] and tokens["clip_c"] is None  # 0.5 > 0.4; no dual clip


def test_a_sample_without_token_data_says_so_and_names_the_knob(alice_client, stepped):
    s = Sample.objects.get(run=stepped, split="train", step=3, sample_index=9)
    html = alice_client.get(f"/runs/{stepped.pk}/samples/{s.pk}/").content.decode()
    assert (
        'id="no-token-data"' in html
        and "<code>logging.token_data_samples_per_step</code> (this run: 8)" in html
    )
    assert "token_view.js" not in html


def test_clip_flags_match_the_dapo_loss_clip_fractions():
    """The marks agree with dapo.algo.loss.policy_loss's own pg_clipfrac and pg_clipfrac_lower, token by token
    (one token per call, so each fraction is 0 or 1)."""
    torch = pytest.importorskip("torch")
    from dapo.algo.loss import policy_loss

    generator = torch.Generator().manual_seed(0)
    for _ in range(300):
        log_ratio = float(torch.randn(1, generator=generator) * 1.5)
        advantage = float(torch.randn(1, generator=generator))
        ratio = math.exp(log_ratio)
        logp = torch.tensor([[log_ratio]], dtype=torch.float64)
        _, metrics = policy_loss(
            logp,
            torch.zeros_like(logp),
            torch.tensor([advantage], dtype=torch.float64),
            torch.ones_like(logp),
            clip_low=0.2,
            clip_high=0.28,
            clip_c=3.0,
        )
        flag = clip_flag(ratio, advantage, 0.2, 0.28, 3.0)
        assert metrics["actor/pg_clipfrac"] == float(flag in ("high", "low")), (ratio, advantage, flag)
        assert metrics["actor/pg_clipfrac_lower"] == float(flag == "dual"), (ratio, advantage, flag)


def test_clip_flag_hand_cases():
    assert clip_flag(1.29, 1.0, 0.2, 0.28, 10.0) == "high"
    assert clip_flag(1.27, 1.0, 0.2, 0.28, 10.0) == ""
    assert clip_flag(1.29, -1.0, 0.2, 0.28, 10.0) == ""  # A < 0: a high ratio is not clipped (below c)
    assert clip_flag(0.79, -1.0, 0.2, 0.28, 10.0) == "low"
    assert clip_flag(0.79, 1.0, 0.2, 0.28, 10.0) == ""
    assert clip_flag(10.5, -1.0, 0.2, 0.28, 10.0) == "dual"
    assert clip_flag(10.5, -1.0, 0.2, 0.28, None) == ""
    assert clip_flag(5.0, 0.0, 0.2, 0.28, 10.0) == "" and clip_flag(None, 1.0, 0.2, 0.28, 10.0) == ""


# ---- problem timeline ---------------------------------------------------------------------------------


def test_the_problem_timeline_spans_steps_splits_and_the_runs_on_the_same_data(
    alice_client, stepped, alice, bob, paths, queued
):
    config = get_preset("tiny_cpu").with_overrides(paths)
    same = Run.create_queued(owner=alice, name="same data", config=config)
    _record(same, 5, groups=[([False] * 4, False), ([True, True, True, False], True)])
    other_path = config.with_overrides({"data.train_path": paths["data.val_path"]})
    elsewhere = Run.create_queued(owner=alice, name="other data", config=other_path)
    _record(elsewhere, 1)
    bobs = Run.create_queued(owner=bob, name="bob's", config=config)
    _record(bobs, 1)

    response = alice_client.get(f"/runs/{stepped.pk}/problems/101/")
    html = response.content.decode()
    chart = _embedded(html, "problem-data")
    mine, theirs = chart["series"]
    assert (mine["this"], mine["split"], mine["steps"], mine["rates"]) == (
        True,
        "train",
        [1, 2, 3],
        [1.0] * 3,
    )
    assert (theirs["run"], theirs["steps"], theirs["rates"], theirs["n"]) == (same.pk, [5], [0.75], [4])
    assert "bob&#x27;s" not in html and "other data" not in html and len(chart["series"]) == 2
    assert 'id="problem-truth">1</code>' in html and "vendor/plotly-4.1.2.min.js" in html
    assert f"/runs/{stepped.pk}/samples/?split=train&amp;step=2&amp;problem=101" in html
    val = _embedded(
        alice_client.get(f"/runs/{stepped.pk}/problems/100/?split=val").content.decode(), "problem-data"
    )
    # "other data" trains on this run's validation file: its train problem 100 is this validation problem
    assert [(s["run"], s["split"], s["steps"], s["rates"]) for s in val["series"]] == [
        (stepped.pk, "val", [2], [0.5]),
        (elsewhere.pk, "train", [1], [0.5]),
    ]
    assert alice_client.get(f"/runs/{stepped.pk}/problems/100/?split=nope").status_code == 400


# ---- exports --------------------------------------------------------------------------------------------


def _export(client, run: Run, fmt: str, **params):
    response = client.get(f"/runs/{run.pk}/samples/export.{fmt}", params)
    assert response.status_code == 200, response.content
    return response, b"".join(response.streaming_content)


def test_exports_hold_the_filtered_samples_in_each_format(alice_client, stepped):
    import pyarrow.parquet as pq

    expected = [s.sample_index for s in _stored(stepped, 2) if s.acc]
    response, body = _export(alice_client, stepped, "jsonl", step=2, acc="true")
    assert (
        response["Content-Disposition"]
        == f'attachment; filename="run{stepped.pk}-train-step2-filtered.jsonl"'
    )
    rows = [json.loads(line) for line in body.decode().splitlines()]
    assert [r["sample_index"] for r in rows] == expected and rows[0]["token_logprobs"] == [
        -0.1,
        -2.0,
        -0.01,
        -5.0,
        -0.5,
    ]
    _, body = _export(alice_client, stepped, "csv", step=2, acc="true")
    table = list(csv.DictReader(io.StringIO(body.decode())))
    assert [int(r["sample_index"]) for r in table] == expected and table[0]["acc"] == "true"
    assert "tokens" not in table[0]
    _, body = _export(alice_client, stepped, "parquet", step=2, acc="true")
    frame = pq.read_table(io.BytesIO(body))
    assert (
        frame.column("sample_index").to_pylist() == expected and frame.column("tokens").to_pylist()[1] is None
    )
    _, body = _export(alice_client, stepped, "jsonl", step="all")
    steps = [json.loads(line)["step"] for line in body.decode().splitlines()]
    assert steps == [1] * 16 + [2] * 16 + [3] * 16
    _, body = _export(alice_client, stepped, "jsonl", step=3, rank="top", rank_by="length", k=2)
    assert [json.loads(line)["sample_index"] for line in body.decode().splitlines()] == [15, 14]


def test_exports_read_in_chunks_along_the_index(alice_client, stepped, monkeypatch):
    monkeypatch.setattr(exports, "CHUNK_ROWS", 5)
    with CaptureQueriesContext(connection) as queries:
        _, body = _export(alice_client, stepped, "csv", step="all", truncated="false")
    assert len(body.decode().splitlines()) == 1 + 36
    reads = [q["sql"] for q in queries if "LIMIT 5" in q["sql"]]
    assert len(reads) == 3 * 3 and all("token_logprobs" not in sql for sql in reads)  # 12 a step: 5, 5, 2


def test_an_export_too_large_is_refused_with_a_clear_message(alice_client, stepped, monkeypatch):
    monkeypatch.setattr(exports, "MAX_ROWS", 20)
    response = alice_client.get(f"/runs/{stepped.pk}/samples/export.jsonl", {"step": "all"})
    assert response.status_code == 400 and "More than 20 samples match" in response.content.decode()
    assert alice_client.get(f"/runs/{stepped.pk}/samples/export.jsonl", {"step": "3"}).status_code == 200
    missing = alice_client.get(f"/runs/{stepped.pk}/samples/export.jsonl")
    assert missing.status_code == 400 and "step: give a step number, or all" in missing.content.decode()


def test_csv_cells_that_could_be_formulas_are_quoted_and_other_formats_keep_text(alice_client, alice_run):
    dangerous = ['=HYPERLINK("http://x")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "plain = fine"]
    records = [sample(1, i, response=text, pred=text, prompt=text) for i, text in enumerate(dangerous)]
    alice_run.record_step(StepReport(step=1, metrics={}, samples=records))
    _, body = _export(alice_client, alice_run, "csv", step=1)
    table = list(csv.DictReader(io.StringIO(body.decode())))
    assert [r["response"] for r in table] == ["'" + t for t in dangerous[:5]] + ["plain = fine"]
    assert table[2]["pred"] == "'-2+3" and table[0]["reward"] == "1.0" and table[0]["advantage"] == "0.5"
    _, body = _export(alice_client, alice_run, "jsonl", step=1)
    assert [json.loads(line)["response"] for line in body.decode().splitlines()] == dangerous
    assert csv_cell(-1.5) == -1.5 and csv_cell(False) == "false"


# ---- model output is text everywhere ---------------------------------------------------------------------


def test_model_output_is_inert_text_on_every_page_and_in_exports(alice_client, alice_run):
    import pyarrow.parquet as pq

    evil = sample(
        1,
        0,
        prompt=EVIL,
        response=EVIL,
        pred=EVIL,
        ground_truth=EVIL,
        tokens=[EVIL, "<i>"],
        token_logprobs=[-1.0, -2.0],
        token_entropy=None,
        token_ratio=None,
    )
    alice_run.record_step(StepReport(step=1, metrics={}, samples=[evil, sample(1, 1)]))
    pk = Sample.objects.get(run=alice_run, sample_index=0).pk
    pages = [
        f"/runs/{alice_run.pk}/samples/",
        f"/runs/{alice_run.pk}/samples/?view=list",
        f"/runs/{alice_run.pk}/samples/{pk}/",
        f"/runs/{alice_run.pk}/problems/0/",
        f"/runs/{alice_run.pk}/",
    ]
    for url in pages:
        html = alice_client.get(url).content.decode()
        assert "<script>alert(1)" not in html and "<b>x</b>" not in html and "<i>" not in html, url
    sample_html = alice_client.get(pages[2]).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;b&gt;x&lt;/b&gt;" in sample_html  # shown, escaped
    data = _data(alice_client, alice_run)
    assert (
        data["groups"][0]["samples"][0]["preview"] == EVIL
    )  # JSON carries the text; the page sets textContent
    assert alice_client.get(f"/runs/{alice_run.pk}/samples/data/")["Content-Type"] == "application/json"
    _, body = _export(alice_client, alice_run, "jsonl", step=1)
    assert json.loads(body.decode().splitlines()[0])["response"] == EVIL
    _, body = _export(alice_client, alice_run, "csv", step=1)
    assert next(csv.DictReader(io.StringIO(body.decode())))["response"] == EVIL
    _, body = _export(alice_client, alice_run, "parquet", step=1)
    assert pq.read_table(io.BytesIO(body)).column("response").to_pylist()[0] == EVIL


# ---- what the page reads ---------------------------------------------------------------------------------


def test_list_queries_never_read_token_arrays_or_whole_texts(alice_client, stepped):
    with CaptureQueriesContext(connection) as queries:
        for params in ({}, {"view": "list"}, {"rank": "top", "k": "3"}, {"q": "answer", "acc": "true"}):
            _data(alice_client, stepped, step=3, **params)
    sql = " ".join(q["sql"] for q in queries)
    assert "token_logprobs" not in sql and "token_ratio" not in sql and "token_entropy" not in sql


def test_the_first_page_costs_a_fixed_number_of_queries(alice_client, stepped, django_assert_max_num_queries):
    for step in range(4, 30):
        _record(stepped, step)
    with django_assert_max_num_queries(14):  # session, user, run, steps, ... never one per step or group
        assert alice_client.get(f"/runs/{stepped.pk}/samples/").status_code == 200


def test_the_run_page_links_to_the_inspector(alice_client, alice_run):
    html = alice_client.get(f"/runs/{alice_run.pk}/").content.decode()
    assert f'href="/runs/{alice_run.pk}/samples/" id="samples-link"' in html


def test_under_asgi_an_export_streams_chunk_by_chunk(alice, stepped, monkeypatch):
    """Daphne serves through ASGI, where Django would read a sync stream whole before sending: the export
    hands it an async iterator that pulls one chunk at a time."""
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    monkeypatch.setattr(exports, "CHUNK_ROWS", 4)

    async def fetch() -> tuple[int, list[bytes]]:
        client = AsyncClient()
        await client.aforce_login(alice)
        response = await client.get(f"/runs/{stepped.pk}/samples/export.jsonl", {"step": "all"})
        assert response.is_async
        return response.status_code, [chunk async for chunk in response.streaming_content]

    status, chunks = async_to_sync(fetch)()
    assert status == 200 and len(chunks) == 3 * 16 // 4
    assert [json.loads(line)["sample_index"] for line in chunks[-1].decode().splitlines()] == [12, 13, 14, 15]


def test_links_back_to_a_group_open_the_page_that_holds_it(alice_client, stepped, monkeypatch):
    from inspector import views as inspect

    monkeypatch.setattr(inspect, "GROUPS_PER_PAGE", 2)
    s = Sample.objects.get(run=stepped, split="train", step=3, sample_index=13)  # group 3: the second page
    html = alice_client.get(f"/runs/{stepped.pk}/samples/{s.pk}/").content.decode()
    assert f"/runs/{stepped.pk}/samples/?split=train&amp;step=3&amp;page=2#group-3" in html
    data = _data(alice_client, stepped, step=3, page=2)
    assert (data["groups_per_page"], [g["group"] for g in data["groups"]]) == (2, [2, 3])
