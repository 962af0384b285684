"""Run management and sharing through the API and the pages: PATCH and DELETE, the list's filter, sort and
columns, saved views, saved comparisons, read-only shares, and resume/fork markers."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from runs import access
from runs.models import Run, SavedComparison, SavedView
from runs.run_filter import FilterError, Term, parse
from runs.run_log import log_path
from runs.run_state import run_state

from dapo.loop.report import RunInfo
from dapo.runconfig.presets import get_preset
from tests.platform.support import report

pytestmark = pytest.mark.django_db


def _run(owner, paths, name, **overrides):
    config = get_preset("tiny_cpu").with_overrides({**paths, **overrides})
    return Run.create_queued(owner=owner, name=name, config=config, preset="tiny_cpu")


# ---- the filter language ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("optim.lrr < 1", "unknown field 'optim.lrr'"),
        ("lr < 1", "did you mean optim.lr"),
        ("optim.lr <", "expected a value"),
        ("optim.lr 3", "at character 10: expected an operator"),
        ("status = running nor name = x", "expected 'and' or 'or' between terms"),
        ("status = running and", "ends after 'and'"),
        ("status = running or", "ends after 'or'"),
        ("or status = running", "expected a field name, got 'or'"),
        ("= 3", "expected a field name"),
    ],
)
def test_a_filter_it_cannot_read_says_where_and_why(text, message):
    with pytest.raises(FilterError, match=message):
        parse(text)


def test_the_list_filters_sorts_and_shows_columns_by_config_and_metric(api, alice, paths, queued):
    slow = _run(alice, paths, "slow", **{"optim.lr": 1e-5})
    fast = _run(alice, paths, "fast", **{"optim.lr": 1e-3})
    mid = _run(alice, paths, "mid", **{"optim.lr": 5e-5})
    for run, acc in ((slow, 0.9), (fast, 0.5), (mid, 0.85)):
        run.record_step(report(1, **{"val__acc/mean@4": acc}))
    slow.tags = ["baseline"]
    slow.save()
    q = {
        "filter": "optim.lr < 1e-4 and val/acc/mean@4 > 0.8",
        "sort": "optim.lr",
        "columns": "optim.lr,val/acc/mean@4",
    }
    body = api.get("/api/runs/", q).json()
    assert [r["name"] for r in body["results"]] == ["slow", "mid"]
    assert body["results"][0]["columns"] == {"optim.lr": 1e-5, "val/acc/mean@4": 0.9}
    desc = api.get("/api/runs/", {"sort": "-val/acc/mean@4"}).json()["results"]
    assert [r["name"] for r in desc] == ["slow", "mid", "fast"]
    assert [r["name"] for r in api.get("/api/runs/", {"filter": "tags has baseline"}).json()["results"]] == [
        "slow"
    ]
    bad = api.get("/api/runs/", {"filter": "optim.lr <"})
    assert bad.status_code == 400 and "expected a value" in bad.json()["filter"]
    assert api.get("/api/runs/", {"sort": "nope"}).status_code == 400
    assert api.get("/api/runs/", {"archived": "maybe"}).status_code == 400


def test_or_joins_alternatives_and_and_binds_tighter(api, alice, paths, queued):
    slow = _run(alice, paths, "slow", **{"optim.lr": 1e-5})
    fast = _run(alice, paths, "fast", **{"optim.lr": 1e-3})
    mid = _run(alice, paths, "mid", **{"optim.lr": 5e-5})
    for run, acc in ((slow, 0.9), (fast, 0.5), (mid, 0.85)):
        run.record_step(report(1, **{"val__acc/mean@4": acc}))

    def names(text):
        response = api.get("/api/runs/", {"filter": text, "sort": "name"})
        assert response.status_code == 200, response.content
        return [r["name"] for r in response.json()["results"]]

    assert names("name = slow or name = fast") == ["fast", "slow"]
    assert names("name = fast OR optim.lr < 1e-4 and val/acc/mean@4 > 0.88") == ["fast", "slow"]
    assert names("optim.lr < 1e-4 and val/acc/mean@4 > 0.88 or name = fast") == ["fast", "slow"]
    assert names("name = nobody or name = mid") == ["mid"]
    assert parse("name = x or name = y and step > 1") == [
        [Term("name", "=", "x")],
        [Term("name", "=", "y"), Term("step", ">", 1.0)],
    ]


def test_an_unreadable_filter_shows_its_error_and_no_empty_list_message(alice_client, alice_run):
    response = alice_client.get("/runs/", {"filter": "optim.lr <"})
    html = response.content.decode()
    assert response.status_code == 400 and "filter: after optim.lr &lt;: expected a value" in html
    assert '<div class="msg msg-error" id="filter-error" role="alert" >' in html  # shown, not hidden
    assert '"error": {"field": "filter"' in html  # the script keeps "No runs match" hidden (runs_list.js)


def test_patch_validates_every_field_and_changes_nothing_on_an_error(api, alice_run):
    good = {
        "name": "renamed",
        "tags": ["baseline", " lr-sweep ", "baseline"],
        "notes": "**bold** <script>x</script>",
    }
    response = api.patch(f"/api/runs/{alice_run.pk}/", good, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["tags"] == ["baseline", "lr-sweep"] and response.json()["name"] == "renamed"
    for body in (
        {"name": ""},
        {"name": "x" * 201},
        {"tags": "a" * 41},
        {"tags": [1]},
        {"tags": [str(i) for i in range(21)]},
        {"notes": 5},
        {"notes": "x" * 20001},
        {"archived": "yes"},
        {"owner": 3},
        {"name": "ok", "tags": [None]},
        {"shared_users": ["nobody"]},
        {"shared_users": ["alice"]},
        {"shared_groups": ["no-such-group"]},
    ):
        response = api.patch(f"/api/runs/{alice_run.pk}/", body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert set(response.json()["errors"]) <= set(body) | {"body"}
    assert api.patch(f"/api/runs/{alice_run.pk}/", [1, 2], format="json").status_code == 400
    run = Run.objects.get(pk=alice_run.pk)
    assert (run.name, run.tags, run.archived) == ("renamed", ["baseline", "lr-sweep"], False)


def test_notes_render_markdown_without_raw_html(alice_client, alice_run):
    alice_run.notes = "# Finding\n**lr 1e-5** wins <img src=x onerror=alert(1)> [x](javascript:alert(1))"
    alice_run.save()
    html = alice_client.get(f"/runs/{alice_run.pk}/").content.decode()
    notes = html.split('id="run-notes"')[1].split("</section>")[0]
    assert "<strong>lr 1e-5</strong>" in notes and "<h1>Finding</h1>" in notes
    assert "<img" not in notes and "&lt;img" in notes and 'href="javascript' not in notes


def test_archive_hides_a_run_from_the_default_list_until_restored(api, alice_client, alice_run):
    assert api.patch(f"/api/runs/{alice_run.pk}/", {"archived": True}, format="json").status_code == 200
    assert api.get("/api/runs/").json()["count"] == 0
    assert api.get("/api/runs/", {"archived": "archived"}).json()["count"] == 1
    alice_client.post(f"/runs/{alice_run.pk}/archive/", {"archived": "false"})
    assert api.get("/api/runs/").json()["count"] == 1


@pytest.mark.django_db(transaction=True)
def test_delete_cancels_a_running_run_and_leaves_nothing(api, alice_run, settings):
    alice_run.claim("w1")
    alice_run.record_step(report(1))
    alice_run.record_checkpoint(1, str(settings.DAPO_RUNS_DIR / str(alice_run.pk) / "checkpoints" / "step_1"))
    folder = settings.DAPO_RUNS_DIR / str(alice_run.pk) / "checkpoints" / "step_1"
    folder.mkdir(parents=True)
    (folder / "state.pt").write_bytes(b"x" * 100)
    log_path(alice_run.pk).parent.mkdir(parents=True, exist_ok=True)
    log_path(alice_run.pk).write_text("log\n")
    response = api.delete(f"/api/runs/{alice_run.pk}/")
    assert response.status_code == 204
    assert api.get(f"/api/runs/{alice_run.pk}/").status_code == 404
    assert not (settings.DAPO_RUNS_DIR / str(alice_run.pk)).exists() and not log_path(alice_run.pk).exists()
    from runs.models import Checkpoint, MetricPoint, Sample

    assert not Run.objects.filter(pk=alice_run.pk).exists()
    assert not any(m.objects.filter(run_id=alice_run.pk).exists() for m in (MetricPoint, Sample, Checkpoint))
    # the worker's controller, still running, writes nothing more
    assert not alice_run.finish("succeeded", worker_id="w1")


def test_delete_page_asks_for_the_name_and_refuses_a_wrong_one(alice_client, alice_run):
    page = alice_client.get(f"/runs/{alice_run.pk}/delete/")
    assert page.status_code == 200 and b"cancelled first" in page.content
    assert alice_client.post(f"/runs/{alice_run.pk}/delete/", {"confirm": "nope"}).status_code == 400
    assert Run.objects.filter(pk=alice_run.pk).exists()
    response = alice_client.post(f"/runs/{alice_run.pk}/delete/", {"confirm": "alice-demo"})
    assert response.status_code == 302 and not Run.objects.filter(pk=alice_run.pk).exists()


@pytest.mark.parametrize("typed", ["{pk}", " #{pk} ", "ladder · naive_grpo"])
def test_a_run_is_deleted_by_typing_its_number_or_its_name(alice_client, alice_run, typed):
    Run.objects.filter(pk=alice_run.pk).update(name="ladder · naive_grpo")  # a generated name with a "·"
    page = alice_client.get(f"/runs/{alice_run.pk}/delete/").content.decode()
    assert f"Type the run's number, <code>{alice_run.pk}</code>, to confirm" in page
    wrong = alice_client.post(f"/runs/{alice_run.pk}/delete/", {"confirm": "ladder naive_grpo"})
    assert (
        wrong.status_code == 400
        and f"Type the run&#x27;s number, {alice_run.pk}, to confirm." in wrong.content.decode()
    )
    assert (
        alice_client.post(f"/runs/{alice_run.pk}/delete/", {"confirm": f"{alice_run.pk}0"}).status_code == 400
    )
    response = alice_client.post(f"/runs/{alice_run.pk}/delete/", {"confirm": typed.format(pk=alice_run.pk)})
    assert response.status_code == 302 and not Run.objects.filter(pk=alice_run.pk).exists()


# ---- sharing ---------------------------------------------------------------------------------------------


def test_a_shared_user_reads_but_cannot_change_the_run(api, bob_api, bob_client, bob, alice_run, team):
    assert bob_api.get(f"/api/runs/{alice_run.pk}/").status_code == 404
    assert (
        api.patch(f"/api/runs/{alice_run.pk}/", {"shared_users": ["bob"]}, format="json").status_code == 200
    )
    assert bob_api.get(f"/api/runs/{alice_run.pk}/").status_code == 200
    assert (
        "shared_users" not in bob_api.get(f"/api/runs/{alice_run.pk}/").json()
    )  # who else: the owner's business
    assert [r["id"] for r in bob_api.get("/api/runs/").json()["results"]] == [alice_run.pk]
    page = bob_client.get(f"/runs/{alice_run.pk}/").content.decode()
    assert (
        "shared with you read-only" in page
        and 'id="edit-form"' not in page
        and 'id="cancel-form"' not in page
    )
    for method, path, body in (
        ("patch", f"/api/runs/{alice_run.pk}/", {"name": "bob was here"}),
        ("delete", f"/api/runs/{alice_run.pk}/", None),
        ("post", f"/api/runs/{alice_run.pk}/cancel/", None),
    ):
        assert getattr(bob_api, method)(path, body, format="json").status_code == 403, (method, path)
    for path in ("edit/", "archive/", "share/", "delete/", "cancel/", "resume/", "export/"):
        assert (
            bob_client.post(
                f"/runs/{alice_run.pk}/{path}", {"name": "x", "confirm": "alice-demo"}
            ).status_code
            == 403
        )
    run = Run.objects.get(pk=alice_run.pk)
    assert (run.name, run.status, run.cancel_requested) == ("alice-demo", "queued", False)
    api.patch(f"/api/runs/{alice_run.pk}/", {"shared_users": []}, format="json")
    assert bob_api.get(f"/api/runs/{alice_run.pk}/").status_code == 404


def test_a_group_share_reaches_its_members_only(api, alice, bob_api, bob, alice_run):
    team = Group.objects.create(name="rl-team")
    alice.groups.add(team)  # one may share only with a group one is in (runs.access.shareable_groups)
    assert (
        api.patch(f"/api/runs/{alice_run.pk}/", {"shared_groups": ["rl-team"]}, format="json").status_code
        == 200
    )
    assert bob_api.get(f"/api/runs/{alice_run.pk}/").status_code == 404
    bob.groups.add(team)
    assert bob_api.get(f"/api/runs/{alice_run.pk}/").status_code == 200
    assert access.visible_runs(bob).count() == 1 and not access.writable_runs(bob).exists()


def test_a_shared_comparison_shows_its_owners_runs_only(
    alice, bob, alice_client, bob_client, paths, queued, team
):
    a1, a2 = _run(alice, paths, "a1"), _run(alice, paths, "a2")
    carol_run = _run(bob, paths, "bobs-own")  # another user's run alice cannot add
    response = alice_client.post(
        "/runs/compare/save/", {"name": "lr study", "ids": f"{a1.pk},{carol_run.pk}"}
    )
    assert response.status_code == 302 and not SavedComparison.objects.exists()
    response = alice_client.post(
        "/runs/compare/save/",
        {
            "name": "lr study",
            "ids": f"{a1.pk},{a2.pk}",
            "metrics": "critic/score/mean",
            "smooth": "0.3",
            "x": "wall",
            "by": "none",
        },
    )
    saved = SavedComparison.objects.get()
    assert response["Location"] == f"/runs/compare/saved/{saved.pk}/"
    assert bob_client.get(saved.get_absolute_url()).status_code == 404
    alice_client.post(f"/runs/compare/saved/{saved.pk}/share/", {"users": "bob"})
    page = bob_client.get(saved.get_absolute_url())
    assert page.status_code == 200 and b"lr study" in page.content and b"read-only" in page.content
    assert b'"smooth":"0.3"' in page.content and b'"x":"wall"' in page.content
    assert bob_client.get(f"/runs/{a1.pk}/").status_code == 200  # the curves' runs, read-only
    assert bob_client.post(f"/runs/{a1.pk}/cancel/").status_code == 403
    assert bob_client.post(f"/runs/compare/saved/{saved.pk}/delete/").status_code == 403
    assert bob_client.get(f"/runs/compare/data/?ids={a1.pk},{a2.pk}&metrics=x").status_code == 200


def test_saved_views_belong_to_their_owner(alice_client, bob_client, alice, alice_run):
    response = alice_client.post(
        "/runs/views/",
        {"name": "fast ones", "filter": "optim.lr > 1e-5", "sort": "-optim.lr", "columns": "optim.lr"},
    )
    view = SavedView.objects.get()
    assert (
        response.status_code == 302
        and "filter=optim.lr" in response["Location"]
        and view.columns == ["optim.lr"]
    )
    assert alice_client.post("/runs/views/", {"name": "bad", "filter": "optim.lr <"}).status_code == 302
    assert SavedView.objects.count() == 1
    assert (
        b"fast ones" in alice_client.get("/runs/").content
        and b"fast ones" not in bob_client.get("/runs/").content
    )
    bob_client.post(f"/runs/views/{view.pk}/delete/")
    assert SavedView.objects.count() == 1
    page = alice_client.get("/runs/?filter=optim.lr+%3C")
    assert page.status_code == 400 and b"expected a value" in page.content


def test_resumes_and_forks_are_markers_on_the_curves(alice_run, alice, paths):
    alice_run.start(_info(1))
    alice_run.start(_info(6))
    assert run_state(alice_run)["markers"] == [{"step": 5, "kind": "resume", "label": "resumed after step 5"}]
    fork = _run(alice, paths, "fork")
    fork.parent, fork.fork_step = alice_run, 4
    fork.start(_info(5))
    assert [m["kind"] for m in run_state(fork)["markers"]] == ["fork"] and run_state(fork)["markers"][0][
        "step"
    ] == 4


def _info(start_step: int) -> RunInfo:
    return RunInfo(run_dir="x", total_steps=10, start_step=start_step, config={})
