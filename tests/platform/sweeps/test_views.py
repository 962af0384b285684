"""Sweeps launched (sweeps.views): the new-run form's sweep panel and POST /api/sweeps/ queue every
run as one group or none, refuse bad input with a 400 and a message, and the group page's data for the
parallel-coordinates chart respects who may see the runs."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import pytest
from runs.models import Run, Status
from sweeps import form as sweep_panel
from sweeps import plan as sweep_plan

from dapo.loop.report import StepReport
from dapo.runconfig.presets import get_preset
from tests.platform.sweeps.test_plan import parsed

SLOTS = 2
"""DAPO_SCHEDULER_SLOTS's default: the scheduler (runs.scheduling) sends that many runs at once; the rest
wait in the platform's queue."""

pytestmark = pytest.mark.django_db


# ---- the form ----------------------------------------------------------------------------------------------


def sweep_form(paths: dict[str, str], rows: list[dict[str, str]], **changes: str) -> dict[str, Any]:
    from runs.forms import presets_data

    values = {k: v for k, v in presets_data()["tiny_cpu"]["values"].items() if v is not False}
    values = {k: ("on" if v is True else v) for k, v in values.items()}
    columns = {f"sweep_{k}": [r.get(k, "") for r in rows] for k in sweep_panel.ROW_KEYS}
    return {
        **values,
        **paths,
        "name": "sw",
        "preset": "tiny_cpu",
        "sweep_mode": "grid",
        "sweep_cap": "20",
        "sweep_runs": "4",
        "sweep_seed": "0",
        **columns,
        **changes,
    }


def test_the_form_lists_the_runs_then_queues_them_as_one_group(
    alice_client, paths, queued, django_capture_on_commit_callbacks
):
    rows = [
        {"field": "optim.lr", "kind": "list", "values": "1e-5, 3e-5"},
        {"field": "algorithm.dynamic_sampling", "kind": "list", "values": "true, false"},
    ]
    form = sweep_form(paths, rows)
    response = alice_client.post("/runs/new/sweep/", form)
    html = response.content.decode()
    assert response.status_code == 200 and 'id="sweep-confirm"' in html and "Queue 4 runs" in html
    assert "sw · lr=1e-05, dynamic_sampling=true" in html and Run.objects.count() == 0 and queued == []
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post("/runs/new/sweep/", {**form, "sweep_confirm": "yes"})
    runs = list(Run.objects.order_by("id"))
    assert response.status_code == 302 and response["Location"] == "/runs/compare/?group=sw"
    assert [r.name for r in runs] == [
        "sw · lr=1e-05, dynamic_sampling=true",
        "sw · lr=1e-05, dynamic_sampling=false",
        "sw · lr=3e-05, dynamic_sampling=true",
        "sw · lr=3e-05, dynamic_sampling=false",
    ]
    assert {r.group for r in runs} == {"sw"} and {r.status for r in runs} == {Status.QUEUED}
    assert [(r.config["optim"]["lr"], r.config["algorithm"]["dynamic_sampling"]) for r in runs] == [
        (1e-5, True),
        (1e-5, False),
        (3e-5, True),
        (3e-5, False),
    ]
    base = get_preset("tiny_cpu").with_overrides(paths)
    assert (
        runs[0].config
        == base.with_overrides({"optim.lr": 1e-5, "algorithm.dynamic_sampling": True}).to_dict()
    )
    assert queued == [("launch_run", r.pk) for r in runs[:SLOTS]] and {r.preset for r in runs} == {"tiny_cpu"}
    # a random sweep from the form: a range on a log scale, drawn with the seed
    rows = [{"field": "optim.lr", "kind": "range", "low": "1e-6", "high": "1e-4", "scale": "log"}]
    form = sweep_form(paths, rows, sweep_mode="random", sweep_runs="3", sweep_seed="7", name="rnd")
    with django_capture_on_commit_callbacks(execute=True):
        alice_client.post("/runs/new/sweep/", {**form, "sweep_confirm": "yes"})
    drawn = [r.config["optim"]["lr"] for r in Run.objects.filter(group="rnd").order_by("id")]
    log_lr = {"optim.lr": {"low": 1e-6, "high": 1e-4, "scale": "log"}}
    expected = sweep_plan.expand(parsed({"mode": "random", "runs": 3, "seed": 7, "fields": log_lr}))
    assert drawn == [c["optim.lr"] for c in expected] and len(set(drawn)) == 3


def test_the_form_refuses_a_bad_sweep_and_queues_nothing(alice_client, paths, queued):
    big = [{"field": "seed", "values": "0, 1, 2, 3, 4, 5"}, {"field": "rollout.n", "values": "2, 4, 8, 16"}]
    cases = [
        (big, {}, "the grid has 6 × 4 = 24 runs, more than the cap of 20"),
        ([{"field": "optim.lr", "values": "1e-5, fast"}], {}, "&#x27;fast&#x27;: must be a number"),
        (
            [{"field": "algorithm.clip_high", "values": "0.28, 0.1"}],
            {"sweep_confirm": "yes"},
            "in the sweep&#x27;s run clip_high=0.1",
        ),
        ([], {}, "name the fields to vary"),
        (
            [{"field": "optim.lr", "kind": "range", "low": "1e-6", "high": ""}],
            {"sweep_mode": "random"},
            "give the range&#x27;s low and high as numbers",
        ),
        ([{"field": "seed", "values": "1, 2"}], {"optim.lr": "fast"}, "must be a number"),
        (
            [{"field": name, "values": "1"} for name in list(sweep_plan.field_types())[:20]],
            {},
            "vary at most 8 fields at once (got 9)",
        ),
    ]
    for rows, changes, words in cases:
        response = alice_client.post("/runs/new/sweep/", sweep_form(paths, rows, **changes))
        html = response.content.decode()
        assert response.status_code == 400 and "The sweep was not queued" in html, words
        assert words in html, (words, html[html.find("sweep-errors") - 200 :][:2000])
        assert 'id="sweep-panel" open' in html and 'id="sweep-confirm"' not in html
        assert html.count('class="sweep-row"') <= sweep_plan.MAX_FIELDS + 2  # and one blank row
    assert Run.objects.count() == 0 and queued == []


def test_the_new_run_page_offers_the_sweep_panel(alice_client):
    html = alice_client.get("/runs/new/").content.decode()
    assert 'id="sweep-panel"' in html and 'formaction="/runs/new/sweep/"' in html
    assert '<option value="optim.lr" data-type="float">' in html and 'value="data.val_paths"' not in html


# ---- the API ---------------------------------------------------------------------------------------------


def test_the_api_queues_a_sweep_as_one_group(api, paths, queued, django_capture_on_commit_callbacks):
    body = {
        "name": "api-sweep",
        "preset": "tiny_cpu",
        "overrides": {**paths, "optim.lr": 5e-5},
        "sweep": {"mode": "grid", "fields": {"rollout.n": [4, 8], "seed": [0, 1, 2]}},
    }
    preview = api.post("/api/sweeps/", {**body, "dry_run": True}, format="json")
    assert preview.status_code == 200 and preview.json()["count"] == 6 and preview.json()["queued"] is False
    assert preview.json()["runs"][1] == {
        "name": "api-sweep · n=4, seed=1",
        "values": {"rollout.n": 4, "seed": 1},
    }
    assert Run.objects.count() == 0
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/sweeps/", body, format="json")
    data = response.json()
    assert response.status_code == 201 and data["group"] == "api-sweep" and data["count"] == 6
    assert data["compare_url"] == "/runs/compare/?group=api-sweep"
    runs = list(Run.objects.order_by("id"))
    assert [r["id"] for r in data["runs"]] == [r.pk for r in runs] and len(queued) == SLOTS
    assert {r.config["optim"]["lr"] for r in runs} == {5e-5}
    assert [(r.config["rollout"]["n"], r.config["seed"]) for r in runs] == list(
        itertools.product([4, 8], [0, 1, 2])
    )


@pytest.mark.parametrize(
    ("change", "key", "words"),
    [
        ({"sweep": {"fields": {"algorithm.clip_high": [0.28, 0.1]}}}, "algorithm.clip_high", "clip_high=0.1"),
        ({"sweep": {"fields": {"seed": list(range(25))}}}, "sweep.cap", "25 runs, more than the cap of 20"),
        ({"sweep": None}, "sweep", "must be an object"),
        ({"name": ""}, "name", "give the run a name"),
        ({"overrides": [1]}, "overrides", "must be an object"),
        ({"dry_run": "yes"}, "dry_run", "true or false"),
        ({"colour": "red"}, "colour", "unknown field"),
        ({"overrides": {"data.train_path": "/etc/passwd"}}, "data.train_path", "dataset roots"),
    ],
)
def test_the_api_refuses_a_bad_sweep_and_queues_nothing(api, paths, queued, change, key, words):
    body = {"name": "s", "preset": "tiny_cpu", "overrides": paths, "sweep": {"fields": {"seed": [0, 1]}}}
    response = api.post("/api/sweeps/", {**body, **change}, format="json")
    assert response.status_code == 400 and words in response.json()["errors"][key], response.json()
    assert Run.objects.count() == 0 and queued == []


def test_the_api_needs_credentials(client):
    assert client.post("/api/sweeps/", {}, content_type="application/json").status_code in (401, 403)


# ---- the group page's data ---------------------------------------------------------------------------------


def test_the_group_page_gets_each_runs_values_and_the_metric(
    alice_client, bob_client, alice, paths, queued, django_capture_on_commit_callbacks
):
    from sweeps.views import queue

    sweep = parsed({"fields": {"optim.lr": [1e-5, 2e-5, 4e-5]}})
    base = get_preset("tiny_cpu").with_overrides(paths)
    planned = [(f"g · {sweep_plan.label(c)}", c, base.with_overrides(c)) for c in sweep_plan.expand(sweep)]
    group, runs = queue(alice, "g", planned)
    for k, run in enumerate(runs[:2]):
        for step, value in ((1, 0.2 + k), (2, 0.9 + k), (3, 0.5 + k), (4, math.nan)):
            run.record_step(StepReport(step=step, metrics={"val/acc/mean@4": value}, wall_time=1.0 + step))
    response = alice_client.get("/runs/compare/sweep/", {"group": group, "metric": "val/acc/mean@4"})
    data = response.json()
    assert response.status_code == 200 and data["metric"] == "val/acc/mean@4"
    assert data["fields"] == [{"name": "optim.lr", "values": [1e-5, 2e-5, 4e-5]}]
    got = [(r["id"], r["last"], r["last_step"], r["max"], r["min"]) for r in data["runs"]]
    assert got == [
        (runs[0].pk, None, 4, 0.9, 0.2),
        (runs[1].pk, None, 4, 1.9, 1.2),
        (runs[2].pk, None, None, None, None),
    ]
    runs[0].record_step(StepReport(step=5, metrics={"val/acc/mean@4": 0.7}, wall_time=9.0))
    data = alice_client.get("/runs/compare/sweep/", {"group": group, "metric": "val/acc/mean@4"}).json()
    assert data["runs"][0]["last"] == 0.7 and data["runs"][0]["last_step"] == 5
    page = alice_client.get("/runs/compare/", {"group": group}).content.decode()
    assert 'id="sweep"' in page and "js/compare_sweep.js" in page
    assert bob_client.get("/runs/compare/sweep/", {"group": group, "metric": "x"}).status_code == 404
    ids = f"{runs[0].pk},{runs[1].pk}"
    assert bob_client.get("/runs/compare/sweep/", {"ids": ids, "metric": "x"}).status_code == 404
    assert alice_client.get("/runs/compare/sweep/", {"group": group}).status_code == 400
    assert alice_client.get("/runs/compare/sweep/", {"group": group, "metric": "m\x00"}).status_code == 400


def test_a_sweep_is_queued_all_or_none(api, paths, queued, monkeypatch, django_capture_on_commit_callbacks):
    real = Run.create_queued.__func__
    calls = []

    def fail_at_the_third(cls, **kw):
        calls.append(kw["name"])
        if len(calls) == 3:
            raise RuntimeError("database went away")
        return real(cls, **kw)

    monkeypatch.setattr(Run, "create_queued", classmethod(fail_at_the_third))
    body = {
        "name": "s",
        "preset": "tiny_cpu",
        "overrides": paths,
        "sweep": {"fields": {"seed": [0, 1, 2, 3]}},
    }
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        api.post("/api/sweeps/", body, format="json")
    assert len(calls) == 3 and Run.objects.count() == 0 and queued == []


def test_the_api_reference_shows_the_sweep_endpoint(api, alice_client):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    assert "/api/sweeps/" in schema and "dry_run" in schema
    assert "/api/sweeps/" in alice_client.get("/api/docs/").content.decode()
    assert alice_client.get("/runs/new/sweep/").status_code == 405


@pytest.mark.parametrize(
    ("body", "key", "words"),
    [
        (
            '{"name": "s", "preset": "tiny_cpu", "sweep": {"fields": {"\\ud800": [1]}}}',
            "sweep.fields.\\ud800",
            "unknown field",
        ),
        ('{"name": "s", "\\ud800": 1}', "\\ud800", "unknown field"),
        (
            '{"name": "s", "preset": "tiny_cpu", "sweep": {"fields": '
            '{"data.reward_fn": ["math_dapo", "\\ud800"]}}}',
            "data.reward_fn",
            "(in the sweep's run reward_fn='\\ud800')",
        ),
        (
            '{"name": "s", "preset": "tiny_cpu", "sweep": {"fields": {"seed": [0, 1], "optim.lr": [1e999]}}}',
            "sweep.fields.optim.lr",
            "is not a finite number",
        ),
        ("[1]", "body", "must be a JSON object"),
    ],
)
def test_hostile_sweep_bodies_are_a_400_never_a_500(api, paths, queued, body, key, words):
    body = body.replace('"preset": "tiny_cpu"', '"preset": "tiny_cpu", "overrides": ' + json.dumps(paths))
    response = api.post("/api/sweeps/", body, content_type="application/json")
    assert response.status_code == 400 and words in response.json()["errors"][key], response.json()
    assert Run.objects.count() == 0 and queued == []
