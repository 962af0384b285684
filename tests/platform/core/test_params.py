"""core.params: the one way integers come out of requests, and the <id:...> path converter."""

from __future__ import annotations

import pytest
from core.params import DB_ID_MAX, BadInteger, DbIdConverter, int_or_none, int_param, to_int
from django.http import QueryDict


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("0", 0), ("42", 42), (" 7 ", 7), (7, 7), (str(DB_ID_MAX), DB_ID_MAX), ("-3", -3)],
)
def test_it_reads_ascii_digits_and_json_integers(raw, expected):
    assert to_int(raw, "n", low=-10) == expected


@pytest.mark.parametrize(
    "raw", ["", "x", "1.5", "²", "1_000", "+1", "--1", "1e3", True, 1.0, None, [1], "9" * 25]
)
def test_anything_else_is_a_bad_integer_naming_the_field(raw):
    with pytest.raises(BadInteger) as caught:
        to_int(raw, "step")
    assert caught.value.name == "step" and str(caught.value).startswith("step: must be an integer between 0")


def test_the_range_is_checked_and_said():
    with pytest.raises(BadInteger, match=r"^k: must be an integer between 1 and 5, got '6'$"):
        to_int("6", "k", low=1, high=5)
    with pytest.raises(BadInteger):
        to_int(str(DB_ID_MAX + 1), "id")


def test_int_param_reads_a_query_and_defaults_when_absent_or_empty():
    query = QueryDict("a=3&b=&c=x")
    assert int_param(query, "a") == 3
    assert int_param(query, "b", default=9) == 9
    assert int_param(query, "missing", default=None) is None
    with pytest.raises(BadInteger, match="^c:"):
        int_param(query, "c")
    assert int_param({"n": 4}, "n", low=1) == 4  # a JSON body


def test_int_or_none_is_lenient():
    assert int_or_none("12") == 12
    assert int_or_none("0") is None  # ids start at 1 by default
    assert int_or_none("0", low=0) == 0
    assert int_or_none("abc") is None and int_or_none(None) is None and int_or_none(str(10**30)) is None


def test_the_id_converter_takes_a_positive_bigint_only():
    converter = DbIdConverter()
    assert converter.to_python("1") == 1 and converter.to_python(str(DB_ID_MAX)) == DB_ID_MAX
    for bad in ("0", str(DB_ID_MAX + 1)):
        with pytest.raises(ValueError):
            converter.to_python(bad)
    assert converter.to_url(5) == "5"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path",
    [
        "/runs/0/",
        f"/runs/{DB_ID_MAX + 1}/",
        "/runs/1/samples/0/",
        f"/runs/{10**30}/metrics.csv",
        "/datasets/0/",
    ],
)
def test_an_id_outside_the_bigint_range_is_a_404_everywhere(alice_client, path):
    assert alice_client.get(path).status_code == 404
