"""An evaluation run's own page (runs.evaluation_views): a table per dataset under the catalog dataset's
name, counts read from the stored samples, links into the inspector, the JSON of the same, and two
evaluations side by side."""

from __future__ import annotations

import pytest
from runs.models import Kind, Run, Status

from dapo.eval.metrics import PromptSamples, validation_metrics
from dapo.loop.report import StepReport
from tests.platform.support import sample

N = 4
# (file stem, per-problem correct samples of N): two files, so each reports under its stem
FILES = {"aime-2024": [3, 0], "math": [4, 1, 2]}


def make_evaluation(owner, name: str, shift: int = 0) -> Run:
    """An evaluation of two files whose samples and metrics are those dapo.eval would report; ``shift``
    makes one more answer of each problem correct (the model after training)."""
    config = {
        "data": {"val_path": "/data/aime-2024.parquet", "val_paths": ["/data/math.parquet"]},
        "validation": {"n_samples": N},
    }
    aime = {"id": 7, "name": "aime", "version": 2, "split": "val", "owner": "alice"}
    record = [{"field": "data.val_path", "path": "/data/aime-2024.parquet", "dataset": aime}]
    run = Run.objects.create(
        owner=owner,
        name=name,
        kind=Kind.EVALUATION,
        status=Status.SUCCEEDED,
        config=config,
        data_files=record,
    )
    prompts, samples, group = [], [], 0
    for stem, corrects in FILES.items():
        for problem, correct in enumerate(corrects):
            accs = [i < min(correct + shift, N) for i in range(N)]
            preds = ["7" if a else str(i) for i, a in enumerate(accs)]
            prompts.append(
                PromptSamples(
                    stem,
                    [float(a) for a in accs],
                    [1.0 if a else -1.0 for a in accs],
                    [1.0 if a else -1.0 for a in accs],
                    preds,
                    [10] * N,
                )
            )
            for i, a in enumerate(accs):
                samples.append(
                    sample(
                        0,
                        group * N + i,
                        split="val",
                        group=group,
                        problem_index=problem,
                        acc=a,
                        pred=preds[i],
                        score=1.0 if a else -1.0,
                    )
                )
            group += 1
    run.record_step(StepReport(step=0, metrics=validation_metrics(prompts), val_samples=samples))
    return run


@pytest.fixture
def evaluation(alice):
    return make_evaluation(alice, "base")


def test_the_api_gives_a_table_per_dataset_under_its_catalog_name(api, evaluation):
    body = api.get(f"/api/runs/{evaluation.pk}/evaluation/").json()
    overall, aime, math = body["datasets"]
    assert [d["dataset"] for d in body["datasets"]] == ["every dataset", "aime v2", "math"]
    assert [d["metric_prefix"] for d in body["datasets"]] == ["val/", "val/aime-2024/", "val/math/"]
    assert aime["counts"] == {"problems": 2, "samples": 8, "correct": 3}
    assert math["counts"] == {"problems": 3, "samples": 12, "correct": 7}
    assert overall["counts"] == {"problems": 5, "samples": 20, "correct": 10}
    assert aime["acc_mean"] == pytest.approx(3 / 8) and math["n"] == N
    assert [row["k"] for row in aime["k"]] == [1, 2, 4]
    # pass@4 of a problem with one correct of four is 1; of none 0: their mean
    assert aime["k"][2]["pass"] == pytest.approx(0.5)
    assert aime["k"][0].get("maj") is None and aime["k"][1]["maj"] is not None
    assert (aime["groups"], math["groups"]) == ([0, 1], [2, 4])


def test_the_page_shows_the_tables_and_links_into_the_samples(alice_client, evaluation):
    page = alice_client.get(f"/runs/{evaluation.pk}/evaluation/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "<h2>aime v2</h2>" in html and "<h2>math</h2>" in html and "<h2>Every dataset</h2>" in html
    assert html.count('class="table eval-table"') == 3 and 'data-k="4"' in html
    assert "2 problems, 8 samples, 3 correct" in html
    assert f'href="/runs/{evaluation.pk}/samples/?split=val&amp;step=0"' in html
    assert f'href="/runs/{evaluation.pk}/samples/step/0/group/2/?split=val"' in html  # math: group 2


def test_the_run_page_of_an_evaluation_leads_to_its_results(alice_client, evaluation):
    response = alice_client.get(f"/runs/{evaluation.pk}/")
    assert response.status_code == 302 and response["Location"] == f"/runs/{evaluation.pk}/evaluation/"
    assert alice_client.get(f"/runs/{evaluation.pk}/?view=run").status_code == 200


def test_a_queued_evaluation_says_so_and_reloads(alice_client, alice):
    run = Run.objects.create(owner=alice, name="later", kind=Kind.EVALUATION, config={})
    html = alice_client.get(f"/runs/{run.pk}/evaluation/").content.decode()
    assert 'id="eval-pending"' in html and 'http-equiv="refresh"' in html


def test_two_evaluations_side_by_side_with_the_difference(alice_client, alice, evaluation):
    after = make_evaluation(alice, "trained", shift=1)
    page = alice_client.get(f"/runs/evaluations/compare/?runs={evaluation.pk},{after.pk}")
    html = page.content.decode()
    assert page.status_code == 200 and "<h2>aime v2</h2>" in html
    # aime acc mean@4: 3/8 before, (4 + 1)/8 after
    assert "0.3750" in html and "0.6250" in html and "Δ +0.2500" in html
    from runs.evaluation_results import evaluation_rows

    tables = {t["source"]: t for t in evaluation_rows([evaluation, after])}
    line = next(x for x in tables["math"]["lines"] if x["metric"] == "pass@1")
    assert line["values"][1]["delta"] == pytest.approx(2 / 12)  # one more correct of 4 where not all were
    form = alice_client.get(f"/runs/{evaluation.pk}/evaluation/").content.decode()
    assert f'<option value="{after.pk}">' in form  # the page offers the other evaluation


@pytest.mark.parametrize("query", ["", "?runs=1", "?runs=1,x", "?runs=" + ",".join(map(str, range(1, 11)))])
def test_a_bad_comparison_is_a_clear_400(alice_client, evaluation, query):
    response = alice_client.get(f"/runs/evaluations/compare/{query}")
    assert response.status_code == 400 and 'id="compare-error"' in response.content.decode()


def test_another_users_evaluation_is_not_found(bob_client, bob_api, evaluation):
    assert bob_client.get(f"/runs/{evaluation.pk}/evaluation/").status_code == 404
    assert bob_api.get(f"/api/runs/{evaluation.pk}/evaluation/").status_code == 404
    mine = make_evaluation(evaluation.owner.__class__.objects.get(username="bob"), "bob's")
    assert bob_client.get(f"/runs/evaluations/compare/?runs={mine.pk},{evaluation.pk}").status_code == 404
