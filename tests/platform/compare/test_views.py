"""Comparing runs: which runs (ids, group, permissions, bad input), the curves in one answer, the config
diff, the validation problem side by side, CSV exports, and the ablation ladder launched as one group."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from compare import metrics_csv
from compare import views as compare
from runs.models import MetricPoint, Run, Status

from dapo.loop.report import StepReport
from dapo.runconfig.presets import ABLATION_LADDER, ablation_ladder, get_preset
from tests.platform.support import sample

SLOTS = 2
"""DAPO_SCHEDULER_SLOTS's default: the scheduler (runs.scheduling) sends that many runs at once; the rest
wait in the platform's queue."""

pytestmark = pytest.mark.django_db

T0 = 1_700_000_000.0


def make_run(
    owner: Any, paths: dict[str, str], name: str, steps: int = 3, group: str = "", **changes: Any
) -> Run:
    """A run of ``steps`` recorded steps: reward, entropy, the generated-token metrics, and validation
    (metrics and two problems × two samples) at the last step."""
    config = get_preset("tiny_cpu").with_overrides({**paths, "optim.total_steps": steps, **changes})
    run = Run.create_queued(owner=owner, name=name, config=config, preset="tiny_cpu", group=group)
    for step in range(1, steps + 1):
        metrics = {
            "critic/score/mean": step / 10,
            "actor/entropy": 1.0 - step / 100,
            "train/response_length/mean": 10.0 * step,
            "train/num_prompts_generated": 2.0,
        }
        val = []
        if step == steps:
            metrics["val/acc/mean@2"] = 0.5
            val = [
                sample(step, i, split="val", response=f"{name} says {i}", acc=i % 2 == 0) for i in range(4)
            ]
        run.record_step(StepReport(step=step, metrics=metrics, val_samples=val, wall_time=T0 + 7 * step))
    return run


@pytest.fixture
def two(alice: Any, paths: dict[str, str], queued: list) -> list[Run]:
    low, high = {"optim.lr": 1e-5}, {"optim.lr": 2e-5, "seed": 7}
    return [make_run(alice, paths, "lr-low", **low), make_run(alice, paths, "lr-high", **high)]


def embedded(response: Any) -> dict[str, Any]:
    html = response.content.decode()
    return json.loads(html.split('id="compare-data" type="application/json">')[1].split("</script>")[0])


# ---- the page and its data ---------------------------------------------------------------------------


def test_the_page_embeds_every_runs_curves_of_the_default_metrics(alice_client, two):
    response = alice_client.get(f"/runs/compare/?ids={two[0].pk},{two[1].pk}")
    assert response.status_code == 200
    data = embedded(response)
    assert [r["id"] for r in data["runs"]] == [two[0].pk, two[1].pk]
    assert data["chosen"] == ["val/acc/mean@2", "critic/score/mean", "actor/entropy"]  # what exists
    reward = data["curves"]["metrics"]["critic/score/mean"]
    assert reward[str(two[0].pk)] == {"steps": [1, 2, 3], "values": [0.1, 0.2, 0.3]}
    assert set(reward) == {str(two[0].pk), str(two[1].pk)}
    assert (
        "train/num_prompts_generated" in data["names"] and "plotly-4.1.2.min.js" in response.content.decode()
    )


def test_the_data_answer_has_every_run_wall_time_and_generated_tokens(alice_client, two):
    ids = f"{two[0].pk},{two[1].pk}"
    response = alice_client.get(f"/runs/compare/data/?ids={ids}&metrics=actor/entropy&tokens=1")
    body = response.json()
    assert response.status_code == 200 and set(body["metrics"]) == {"actor/entropy"}
    assert body["metrics"]["actor/entropy"][str(two[1].pk)]["values"] == [0.99, 0.98, 0.97]
    assert body["clock"][str(two[0].pk)] == {"steps": [1, 2, 3], "wall": [0.0, 7.0, 14.0]}
    # generated tokens of a step: mean length × prompts generated × rollout.n (8 in tiny_cpu)
    assert body["tokens"][str(two[0].pk)] == {"steps": [1, 2, 3], "cum": [160, 480, 960]}
    assert "tokens" not in alice_client.get(f"/runs/compare/data/?ids={ids}&metrics=actor/entropy").json()


def test_the_data_answer_carries_the_runs_progress_and_on_request_the_names(alice_client, two):
    body = alice_client.get(f"/runs/compare/data/?ids={two[0].pk}&metrics=actor/entropy&names=1").json()
    assert body["runs"] == [{"id": two[0].pk, "status": "queued", "step": 3, "total_steps": 3}]
    assert body["names"] == compare.metric_names(two[0])


def test_runs_that_logged_nothing_yet_get_the_default_charts_to_fill(alice_client, alice_run):
    data = embedded(alice_client.get(f"/runs/compare/?ids={alice_run.pk}"))
    assert data["names"] == [] and data["chosen"] == ["val/acc/mean@4", *compare.DEFAULT_METRICS]
    assert data["curves"]["metrics"]["critic/score/mean"] == {}


def test_a_run_name_cannot_close_the_script_tag(alice_client, two):
    Run.objects.filter(pk=two[0].pk).update(name="</script><script>alert(1)</script>&")
    response = alice_client.get(f"/runs/compare/?ids={two[0].pk},{two[1].pk}")
    html = response.content.decode()
    assert "<script>alert(1)" not in html
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in html  # the config diff's header: escaped text
    assert embedded(response)["runs"][0]["name"] == "</script><script>alert(1)</script>&"


def test_metric_names_are_the_distinct_names_of_a_run(two):
    expected = sorted(set(MetricPoint.objects.filter(run=two[0]).values_list("name", flat=True)))
    assert compare.metric_names(two[0]) == expected and len(expected) == 5


def test_a_long_curve_is_thinned_but_keeps_its_ends(alice, paths, queued):
    run = make_run(alice, paths, "long", steps=1)
    MetricPoint.objects.bulk_create(
        [MetricPoint(run=run, step=s, name="x/y", value=float(s), wall_time=T0 + s) for s in range(1, 5001)]
    )
    series = compare.curves([run], ["x/y"], with_tokens=False)["metrics"]["x/y"][run.pk]
    assert (
        len(series["steps"]) <= compare.MAX_POINTS and series["steps"][0] == 1 and series["steps"][-1] == 5000
    )


def test_a_group_compares_its_runs_oldest_first_and_only_the_users(alice_client, alice, bob, paths, queued):
    first = make_run(alice, paths, "a", steps=1, group="sweep")
    second = make_run(alice, paths, "b", steps=1, group="sweep")
    make_run(bob, paths, "bob's", steps=1, group="sweep")
    make_run(alice, paths, "other", steps=1, group="other")
    data = embedded(alice_client.get("/runs/compare/?group=sweep"))
    assert [r["id"] for r in data["runs"]] == [first.pk, second.pk]


# ---- the config diff -------------------------------------------------------------------------------------


def test_the_config_diff_shows_exactly_the_differing_keys(alice_client, two):
    rows = compare.diff_rows(two)
    assert [r["key"] for r in rows] == ["optim.lr", "seed"]
    assert [c["text"] for c in rows[0]["cells"]] == ["1e-05", "2e-05"]
    html = alice_client.get(f"/runs/compare/?ids={two[0].pk},{two[1].pk}").content.decode()
    keys = [part.split('"')[0] for part in html.split('<tr data-key="')[1:]]
    assert keys == ["optim.lr", "seed"]


def test_identical_configs_have_an_empty_diff(alice_client, alice, paths, queued):
    runs = [make_run(alice, paths, "a", steps=1), make_run(alice, paths, "b", steps=1)]
    html = alice_client.get(f"/runs/compare/?ids={runs[0].pk},{runs[1].pk}").content.decode()
    assert 'id="diff-empty"' in html and "<tr data-key" not in html


def test_a_config_stored_by_an_older_version_is_diffed_as_stored(two):
    Run.objects.filter(pk=two[0].pk).update(config={**two[0].config, "retired_knob": 1})
    rows = compare.diff_rows(list(Run.objects.filter(pk__in=[r.pk for r in two]).order_by("pk")))
    assert [r["key"] for r in rows] == ["optim.lr", "retired_knob", "seed"]


# ---- which runs: bad input is a clear 400/404, never a 500, never a leak ----------------------------------


@pytest.mark.parametrize(
    "path",
    ["/runs/compare/", "/runs/compare/data/", "/runs/compare/validation/", "/runs/compare/metrics.csv"],
)
@pytest.mark.parametrize(
    "query,status,message",
    [
        ("ids=abc", 400, "is not one"),
        ("ids=", 400, "ids is empty"),
        ("ids=%2C%2C", 400, "ids is empty"),
        ("ids=" + ",".join(str(i) for i in range(1, 501)), 400, "at most 30 runs"),
        ("ids=1%002", 400, "NUL"),
        ("group=a%00b", 400, "NUL"),
        ("ids=%C2%B2", 400, "is not one"),  # "²" is a digit to str.isdigit, not to int()
        ("ids=-3", 400, "is not one"),
        ("", 400, "Choose the runs"),
        ("ids=999999", 404, "No run #999999"),
        (f"ids={10**30}", 404, "No run #"),
        ("group=nope", 404, "no runs in the group"),
    ],
)
def test_bad_run_choices_are_a_clear_error(alice_client, two, path, query, status, message):
    response = alice_client.get(f"{path}?{query}&metrics=actor/entropy")
    assert response.status_code == status
    assert message in response.content.decode()


def test_another_users_run_looks_missing(bob_client, two):
    mine, missing = (
        bob_client.get(f"/runs/compare/data/?ids={two[0].pk}&metrics=a"),
        bob_client.get("/runs/compare/data/?ids=999999&metrics=a"),
    )
    assert mine.status_code == missing.status_code == 404
    assert mine.json()["detail"] == f"No run #{two[0].pk} among your runs."  # the same words as a missing one
    assert bob_client.get(f"/runs/compare/?ids={two[0].pk}").status_code == 404
    assert bob_client.get(f"/runs/{two[0].pk}/metrics.csv").status_code == 404
    assert bob_client.get("/runs/compare/groups/").json() == {"groups": []}


def test_duplicate_ids_compare_once(alice_client, two):
    data = embedded(alice_client.get(f"/runs/compare/?ids={two[1].pk},{two[0].pk},{two[1].pk}"))
    assert [r["id"] for r in data["runs"]] == [two[1].pk, two[0].pk]


def test_runs_is_another_name_for_ids(alice_client, two):
    page = alice_client.get(f"/runs/compare/?runs={two[1].pk},{two[0].pk}")
    assert page.status_code == 200 and [r["id"] for r in embedded(page)["runs"]] == [two[1].pk, two[0].pk]
    data = alice_client.get(f"/runs/compare/data/?runs={two[0].pk}&metrics=critic/score/mean").json()
    assert [r["id"] for r in data["runs"]] == [two[0].pk]
    both = embedded(alice_client.get(f"/runs/compare/?ids={two[0].pk}&runs={two[1].pk}"))
    assert [r["id"] for r in both["runs"]] == [two[0].pk]  # ids wins
    bad = alice_client.get("/runs/compare/?runs=1,x")
    assert bad.status_code == 400 and "is not one" in bad.content.decode()


def test_an_empty_metric_set_is_a_400(alice_client, two):
    response = alice_client.get(f"/runs/compare/data/?ids={two[0].pk}&metrics=")
    assert response.status_code == 400 and "metrics is empty" in response.json()["detail"]


def test_the_pages_need_a_login(anon_client, two):
    for url in (f"/runs/compare/?ids={two[0].pk}", "/runs/compare/groups/", f"/runs/{two[0].pk}/metrics.csv"):
        response = anon_client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


# ---- the validation problem side by side ------------------------------------------------------------------


def test_validation_samples_of_one_problem_side_by_side(alice_client, alice, paths, queued):
    a, b = make_run(alice, paths, "a", steps=3), make_run(alice, paths, "b", steps=2)
    xss = sample(4, 0, split="val", response="<script>alert(1)</script>", pred="<b>7</b>")
    a.record_step(StepReport(step=4, metrics={}, val_samples=[xss], wall_time=T0))
    body = alice_client.get(f"/runs/compare/validation/?ids={a.pk},{b.pk}").json()
    assert body["steps"] == [2, 3, 4]
    assert (body["step"], body["problems"], body["problem"]) == (4, [0], 0)  # no shared step: the latest
    assert [s["response"] for s in body["samples"][str(a.pk)]] == ["<script>alert(1)</script>"]
    assert body["samples"][str(b.pk)] == []
    body = alice_client.get(f"/runs/compare/validation/?ids={a.pk},{b.pk}&step=2&problem=1").json()
    assert body["samples"][str(a.pk)] == [] and body["problem"] == 1
    assert [s["response"] for s in body["samples"][str(b.pk)]] == ["b says 2", "b says 3"]
    assert [s["acc"] for s in body["samples"][str(b.pk)]] == [True, False]
    assert body["prompt"] == "Compute 1+1." and body["ground_truth"] == "2"


def test_validation_defaults_to_the_latest_shared_step(alice_client, two):
    body = alice_client.get(f"/runs/compare/validation/?ids={two[0].pk},{two[1].pk}").json()
    assert (body["step"], body["problem"]) == (3, 0)
    assert [s["sample_index"] for s in body["samples"][str(two[1].pk)]] == [0, 1]


@pytest.mark.parametrize("query", ["step=abc", "problem=1.5", f"step={10**20}", "problem=%00", "step=--5"])
def test_a_bad_step_or_problem_is_a_400(alice_client, two, query):
    response = alice_client.get(f"/runs/compare/validation/?ids={two[0].pk}&{query}")
    assert response.status_code == 400 and "must be an integer" in response.json()["detail"]


# ---- CSV ------------------------------------------------------------------------------------------------


def read_csv(response: Any) -> list[list[str]]:
    """The streamed body (an async iterator: daphne serves it chunk by chunk)."""
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")

    async def body() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    return list(csv.reader(io.StringIO(async_to_sync(body)().decode())))


def test_a_runs_metrics_as_csv(alice_client, alice_run):
    alice_run.record_step(StepReport(step=1, metrics={"a/b": 0.5, "c": float("nan")}, wall_time=T0 + 0.25))
    alice_run.record_step(StepReport(step=2, metrics={"a/b": 1.5}, wall_time=T0 + 9))
    response = alice_client.get(f"/runs/{alice_run.pk}/metrics.csv")
    assert response["Content-Disposition"] == f'attachment; filename="run-{alice_run.pk}-metrics.csv"'
    rid = str(alice_run.pk)
    assert read_csv(response) == [
        ["run_id", "run_name", "step", "wall_time", "metric", "value"],
        [rid, "alice-demo", "1", "1700000000.25", "a/b", "0.5"],
        [rid, "alice-demo", "2", "1700000009.0", "a/b", "1.5"],
        [rid, "alice-demo", "1", "1700000000.25", "c", ""],  # NaN is stored as null: an empty cell
    ]


def test_a_comparison_as_long_csv_in_chunks(alice_client, two, monkeypatch):
    monkeypatch.setattr(metrics_csv, "CSV_CHUNK", 2)  # several keyset pages per run
    Run.objects.filter(pk=two[1].pk).update(name='lr "high", 7')
    ids = f"{two[0].pk},{two[1].pk}"
    rows = read_csv(
        alice_client.get(f"/runs/compare/metrics.csv?ids={ids}&metrics=critic/score/mean,actor/entropy")
    )
    assert rows[0] == metrics_csv.CSV_HEADER and len(rows) == 1 + 2 * 2 * 3
    assert [(r[0], r[4], r[2]) for r in rows[1:7]] == [
        (str(two[0].pk), m, str(s)) for m in ("actor/entropy", "critic/score/mean") for s in (1, 2, 3)
    ]
    assert rows[-1] == [str(two[1].pk), 'lr "high", 7', "3", str(T0 + 21), "critic/score/mean", "0.3"]
    everything = read_csv(alice_client.get(f"/runs/compare/metrics.csv?ids={ids}"))
    assert len(everything) == 1 + MetricPoint.objects.filter(run__in=two).count()


# ---- groups for the runs list ------------------------------------------------------------------------------


def test_the_groups_of_the_user_with_their_runs(alice_client, alice, paths, queued):
    a = make_run(alice, paths, "a", steps=1, group="sweep & co")
    b = make_run(alice, paths, "b", steps=1, group="sweep & co")
    make_run(alice, paths, "loner", steps=1)
    assert alice_client.get("/runs/compare/groups/").json() == {
        "groups": [
            {"name": "sweep & co", "runs": 2, "ids": [a.pk, b.pk], "url": "/runs/compare/?group=sweep+%26+co"}
        ]
    }


# ---- the ablation ladder ---------------------------------------------------------------------------------


def ladder_form(paths: dict[str, str], **changes: str) -> dict[str, str]:
    from runs.forms import presets_data

    values = {k: v for k, v in presets_data()["tiny_cpu"]["values"].items() if v is not False}
    values = {k: ("on" if v is True else v) for k, v in values.items()}
    return {**values, **paths, "name": "ladder", "preset": "tiny_cpu", "ladder_confirm": "yes", **changes}


def test_the_ladder_queues_six_runs_as_one_group(
    alice_client, paths, queued, django_capture_on_commit_callbacks
):
    form = ladder_form(paths, **{"optim.lr": "3e-5"})
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post("/runs/new/ladder/", form)
    runs = list(Run.objects.order_by("id"))
    assert response.status_code == 302 and response["Location"] == "/runs/compare/?group=ladder"
    assert [r.name for r in runs] == [f"ladder · {name}" for name, _, _ in ABLATION_LADDER]
    assert {r.group for r in runs} == {"ladder"} and {r.status for r in runs} == {Status.QUEUED}
    assert [r.preset for r in runs] == [name for name, _, _ in ABLATION_LADDER]
    base = get_preset("tiny_cpu").with_overrides({**paths, "optim.lr": 3e-5})
    expected = [config.to_dict() for _, config in ablation_ladder(base)]
    assert [r.config for r in runs] == expected and runs[0].config["optim"]["lr"] == 3e-5
    assert (
        runs[0].config["algorithm"]["dynamic_sampling"] is False
        and runs[-1].config["algorithm"]["dynamic_sampling"]
    )
    assert queued == [("launch_run", r.pk) for r in runs[:SLOTS]]  # the others wait in the queue
    # the same name again: a group of its own
    with django_capture_on_commit_callbacks(execute=True):
        again = alice_client.post("/runs/new/ladder/", form)
    assert again["Location"] == "/runs/compare/?group=ladder+%282%29" and Run.objects.count() == 12


def test_a_ladder_that_fails_validation_queues_nothing(
    alice_client, paths, queued, django_capture_on_commit_callbacks
):
    # clip_low 0.25 is valid for the base (clip_high 0.28), not for naive GRPO's symmetric clip at 0.2
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(
            "/runs/new/ladder/", ladder_form(paths, **{"algorithm.clip_low": "0.25"})
        )
    html = response.content.decode()
    assert response.status_code == 400 and "The ablation ladder was not queued" in html
    assert 'id="f-algorithm-clip_high-error"' in html and "in a rung of the ablation ladder" in html
    assert Run.objects.count() == 0 and queued == []
    response = alice_client.post("/runs/new/ladder/", ladder_form(paths, name="", **{"optim.lr": "fast"}))
    html = response.content.decode()
    assert response.status_code == 400 and "give the run a name" in html and "must be a number" in html
    response = alice_client.post("/runs/new/ladder/", ladder_form(paths, name="x" * 190))
    assert response.status_code == 400 and "too long for the ladder" in response.content.decode()
    assert Run.objects.count() == 0 and queued == []


def test_the_ladder_is_all_or_none(
    alice_client, paths, queued, monkeypatch, django_capture_on_commit_callbacks
):
    real = Run.create_queued.__func__
    calls = []

    def fail_at_the_fourth(cls, **kw):
        calls.append(kw["name"])
        if len(calls) == 4:
            raise RuntimeError("database went away")
        return real(cls, **kw)

    monkeypatch.setattr(Run, "create_queued", classmethod(fail_at_the_fourth))
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        alice_client.post("/runs/new/ladder/", ladder_form(paths))
    assert len(calls) == 4 and Run.objects.count() == 0 and queued == []


def test_the_ladder_takes_the_demo_setting_and_steps_per_rung(
    alice_client, paths, queued, django_capture_on_commit_callbacks
):
    form = ladder_form(paths, ladder_demo="on", ladder_steps="3")
    del form["ladder_confirm"]
    confirm = alice_client.post("/runs/new/ladder/", form).content.decode()
    assert "3 steps each, 18 in all" in confirm and "responses up to 27 tokens" in confirm
    assert "(the demo setting)" in confirm and Run.objects.count() == 0
    assert 'id="ladder-demo" checked' in confirm and 'id="ladder-steps" min="1" step="1" value="3"' in confirm
    with django_capture_on_commit_callbacks(execute=True):
        alice_client.post("/runs/new/ladder/", {**form, "ladder_confirm": "yes"})
    runs = list(Run.objects.order_by("id"))
    base = get_preset("tiny_cpu").with_overrides(paths)
    expected = [c.to_dict() for _, c in ablation_ladder(base, demo_setting=True, steps=3)]
    assert [r.config for r in runs] == expected and len(runs) == 6
    assert {r.config["optim"]["total_steps"] for r in runs} == {3}
    assert {r.config["rollout"]["max_response_length"] for r in runs} == {27}
    # off, and no cap: the form's own values
    Run.objects.all().delete()
    with django_capture_on_commit_callbacks(execute=True):
        alice_client.post("/runs/new/ladder/", ladder_form(paths, ladder_steps=""))
    assert {r.config["rollout"]["max_response_length"] for r in Run.objects.all()} == {48}
    assert {r.config["optim"]["total_steps"] for r in Run.objects.all()} == {60}


@pytest.mark.parametrize("steps", ["0", "-3", "two", "1.5", "99999999999"])
def test_a_bad_steps_per_rung_queues_nothing(alice_client, paths, queued, steps):
    response = alice_client.post("/runs/new/ladder/", ladder_form(paths, ladder_steps=steps))
    html = response.content.decode()
    assert response.status_code == 400 and 'id="ladder-steps-error"' in html and "must be an integer" in html
    assert Run.objects.count() == 0 and queued == []


def test_the_demo_setting_is_on_for_the_demo_preset_only(alice_client):
    assert 'id="ladder-demo" checked' in alice_client.get("/runs/new/").content.decode()
    page = alice_client.get("/runs/new/?preset=paper_qwen32b").content.decode()
    assert 'id="ladder-demo" aria-describedby' in page


def test_the_ladder_needs_a_post(alice_client):
    assert alice_client.get("/runs/new/ladder/").status_code == 405
