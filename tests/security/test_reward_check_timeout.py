"""One upload could hold the dataset page for a minute (issue #25, item 5).

``?reward=math_verify`` on a dataset of 3 rows whose answers nest 40 parentheses took 61 s: Math-Verify has
no timeout off the main thread (Daphne runs views in a thread pool), and the page's 3 s deadline was only
checked between rows. Every verifier call of the page now runs in a worker process killed when the call
passes its limit, under a budget for the whole page, and the page names the rows not scored in time.
"""

from __future__ import annotations

import io
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from catalog.models import Dataset

pytestmark = pytest.mark.django_db(transaction=True)  # the page is served from another thread, as Daphne does

NESTED = "(" * 40 + "1" + ")" * 40


def _dataset(client: Any, name: str, answers: list[str]) -> Dataset:
    rows = "".join(json.dumps({"prompt": f"Problem {i}", "answer": a}) + "\n" for i, a in enumerate(answers))
    f = io.BytesIO(rows.encode())
    f.name = f"{name}.jsonl"
    assert client.post("/datasets/upload/", {"name": name, "description": "", "train": f}).status_code == 302
    return Dataset.objects.get(name=name)


def _page_off_the_main_thread(client: Any, url: str) -> tuple[float, str]:
    """The page as Daphne serves it (a worker thread, where SIGALRM timeouts cannot work); its time."""
    start = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        response = pool.submit(client.get, url).result(timeout=600)
    assert response.status_code == 200
    return time.monotonic() - start, response.content.decode()


def _not_scored(html: str) -> tuple[str, int | None]:
    """The paragraph naming the rows whose check was stopped, and the first row not reached (or None)."""
    stopped = html.split('id="reward-not-scored"')[1].split("</p>")[0] if "reward-not-scored" in html else ""
    unreached = re.search(r'id="reward-unreached">[^<]*<a href="[^"]*row=(\d+)"', html)
    return stopped, int(unreached.group(1)) if unreached else None


def test_nested_answers_cannot_hold_the_page_and_are_named_as_not_scored(alice_client):
    plain = _dataset(alice_client, "plain", ["2", "\\frac{1}{2}"])
    _page_off_the_main_thread(alice_client, f"/datasets/{plain.pk}/?reward=math_verify")  # starts the checker
    hostile = _dataset(alice_client, "hostile", ["3", "x^2", NESTED, NESTED + " ", " " + NESTED])
    seconds, html = _page_off_the_main_thread(alice_client, f"/datasets/{hostile.pk}/?reward=math_verify")
    assert seconds < 8, f"the page took {seconds:.1f} s"
    assert '<strong id="reward-judged">2 of 2</strong>' in html  # the plain answers before them were judged
    stopped, first_unreached = _not_scored(html)
    assert "row=2" in stopped  # its check was stopped after CALL_SECONDS
    for index in (3, 4):  # stopped too, or not reached within the page's budget
        assert f"row={index}" in stopped or (first_unreached is not None and first_unreached <= index)


def test_rows_past_the_pages_budget_are_named_as_not_checked(alice_client, monkeypatch):
    from catalog import detail

    hostile = _dataset(alice_client, "slow", ["1", NESTED, "2"])
    monkeypatch.setattr(detail, "CALL_SECONDS", 30.0)  # the call limit alone would wait for the row
    monkeypatch.setattr(detail, "COVERAGE_SECONDS", 1.0)
    seconds, html = _page_off_the_main_thread(alice_client, f"/datasets/{hostile.pk}/?reward=math_verify")
    assert seconds < 8, f"the page took {seconds:.1f} s"
    assert _not_scored(html) == ("", 1)  # nothing stopped by the call limit; from row 1 on, not reached
    assert "2 rows from" in html and '<strong id="reward-judged">1 of 1</strong>' in html
