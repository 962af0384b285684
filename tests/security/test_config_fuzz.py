"""Property-based tests of run configs sent by users: the API (``POST /api/runs/``) and the new-run form
(``POST /runs/new/``) answer any input with either a 4xx that names the fields at fault, changing nothing,
or a queued run whose stored config validates again. Never a 500, never a queued run with a bad config.

Inputs start from a valid config and mutate a few fields (wrong types, out-of-range and huge numbers,
NaN/inf strings, NUL, lone surrogates, very long strings, lists where objects go, unknown keys), or are
arbitrary JSON. Examples are bounded so the module runs in well under a minute.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from runs.configuring import check_paths
from runs.forms import display
from runs.models import Run

from dapo.runconfig import SECTIONS, RunConfig, describe_fields, flatten
from dapo.runconfig.presets import PRESETS, get_preset

pytestmark = pytest.mark.django_db

FIELDS = {f["name"]: f for f in describe_fields()}
BODY_KEYS = {"name", "preset", "config", "overrides", "base_model", "dataset"}
KNOWN_NAMES = set(FIELDS) | set(SECTIONS) | BODY_KEYS
FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,  # the same examples every run: a failure here is reproducible, never flaky
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(autouse=True)
def no_quota(settings: Any) -> None:  # pytest-django's settings (the module's is hypothesis')
    """These tests probe config validation with many runs, some of 10,000,000 steps: the per-user quotas
    (test_quotas.py) would refuse those for another reason."""
    settings.DAPO_QUOTA_RUNS = settings.DAPO_QUOTA_STEPS = 0


NASTY_STRINGS = [
    "",
    " ",
    "NaN",
    "nan",
    "inf",
    "-Infinity",
    "1e400",
    "-1e400",
    "1e-400",
    "0x10",
    "1_000",
    "٣",
    "²",
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "x" * 5000,
    "../../etc/passwd",
    "/etc/passwd",
    "~nobody-here/model",
    "a" * 300,
    "/" + "a/" * 2100,
    "<script>alert(1)</script>",
    "true",
    "null",
]
NASTY_NUMBERS = [
    0,
    -1,
    1,
    2,
    2**31,
    -(2**31),
    2**63 - 1,
    2**63,
    2**64,
    10**30,
    1e308,
    -1e308,
    1e-320,
    0.5,
    -0.0,
    1.5,
    1e9,
    10**9 + 1,
]

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(NASTY_NUMBERS),
    st.sampled_from(NASTY_STRINGS),
    st.text(max_size=12),
)
json_values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(sorted(KNOWN_NAMES)) | st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
field_values = st.one_of(st.sampled_from(NASTY_NUMBERS), st.sampled_from(NASTY_STRINGS), json_values)
any_key = st.one_of(
    st.sampled_from(sorted(FIELDS)),
    st.sampled_from(sorted(SECTIONS)),
    st.text(max_size=10),
    st.sampled_from(["optim.lr.x", "seed.x", "", ".", "optim.", ".lr", "nope.lr", "optim.l\x00r"]),
)


def _valid_config(paths: dict[str, str]) -> dict[str, Any]:
    return get_preset("tiny_cpu").with_overrides({**paths, "optim.total_steps": 5}).to_dict()


def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    section, _, key = dotted.partition(".")
    if key and isinstance(config.get(section), dict):
        config[section][key] = value
    else:
        config[dotted] = value


def _clearly_wrong_type(value: Any, type_name: str) -> bool:
    """A JSON value that no field of this type accepts, whatever its range."""
    if isinstance(value, dict) or (isinstance(value, list) and type_name != "pair"):
        return True
    if type_name in ("int", "float"):
        return isinstance(value, str | bool)
    if type_name in ("str", "choice"):
        return not isinstance(value, str) and value is not None
    if type_name == "bool":
        return not isinstance(value, bool)
    return False


def _post_json(client: Client, body: Any) -> Any:
    return client.post("/api/runs/", json.dumps(body), content_type="application/json")


def _check_created(run_id: int, paths_ok: bool = True) -> None:
    run = Run.objects.get(pk=run_id)
    assert run.status == "queued"
    config = RunConfig.from_dict(run.config)  # raises on an invalid stored config
    assert config.to_dict() == run.config
    assert check_paths(config) == {}
    assert "\x00" not in json.dumps(run.config) and "\x00" not in run.name


def _check_refused(response: Any, runs_before: int, body: Any, must_name: set[str]) -> None:
    assert 400 <= response.status_code < 500, response.content[:500]
    assert Run.objects.count() == runs_before, "a refused request must change nothing"
    data = response.json()
    errors = data.get("errors")
    assert isinstance(errors, dict) and errors, data
    assert all(isinstance(m, str) and m.strip() for m in errors.values()), errors
    # A key that is no field of ours is the unknown key the user sent (cut when huge), said to be unknown.
    unnamed = {k for k in set(errors) - KNOWN_NAMES if not errors[k].startswith("unknown")}
    assert not unnamed, f"errors name no field: {unnamed}"
    assert all(len(k) <= 100 for k in errors), "an unknown key is echoed cut"
    assert must_name <= set(errors), f"{must_name - set(errors)} not named in {errors}"
    assert all(len(m) < 2000 for m in errors.values()), "a message must not echo a huge value"


@st.composite
def mutated_configs(draw: st.DrawFn, base: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """A valid config with 1-3 fields replaced; and the fields whose new value has a wrong JSON type."""
    config = json.loads(json.dumps(base))
    changed: dict[str, Any] = {}
    for _ in range(draw(st.integers(1, 3))):
        key, value = draw(any_key), draw(field_values)
        _set(config, key, value)
        changed[key] = value
    flat = flatten({k: v for k, v in config.items() if k in SECTIONS and isinstance(v, dict)})
    wrong = {
        name
        for name, value in changed.items()
        if name in FIELDS
        and flat.get(name, config.get(name)) is value
        and _clearly_wrong_type(value, FIELDS[name]["type"])
    }
    return config, wrong


names = st.one_of(st.just("fuzz run"), st.sampled_from(NASTY_STRINGS), json_values)


def test_api_config_fuzz(api, paths, queued):
    base = _valid_config(paths)

    @FUZZ
    @given(mutated_configs(base), names)
    def check(mutated: tuple[dict[str, Any], set[str]], name: Any) -> None:
        config, wrong = mutated
        body = {"name": name, "config": config}
        before = Run.objects.count()
        response = _post_json(api, body)
        if response.status_code == 201:
            assert not wrong
            _check_created(response.json()["id"])
        else:
            _check_refused(response, before, body, wrong)

    check()


def test_api_overrides_fuzz(api, paths, queued):
    @FUZZ
    @given(
        st.dictionaries(any_key, field_values, max_size=3),
        st.sampled_from([*PRESETS, "", "no_such_preset"]) | json_values,
        names,
        st.fixed_dictionaries({}, optional={"base_model": json_values, "dataset": json_values}),
    )
    def check(overrides: dict[str, Any], preset: Any, name: Any, picks: dict[str, Any]) -> None:
        body = {"name": name, "preset": preset, "overrides": {**paths, **overrides}, **picks}
        before = Run.objects.count()
        response = _post_json(api, body)
        if response.status_code == 201:
            _check_created(response.json()["id"])
        else:
            _check_refused(response, before, body, set())

    check()


def test_api_arbitrary_bodies(api, queued):
    @FUZZ
    @given(json_values | st.dictionaries(st.sampled_from(sorted(BODY_KEYS)), json_values, max_size=6))
    def check(body: Any) -> None:
        before = Run.objects.count()
        response = _post_json(api, body)
        assert response.status_code == 400, response.content[:300]
        assert Run.objects.count() == before

    check()


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "x", "preset": "tiny_cpu", "overrides": {"optim.lr": NaN}}',
        '{"name": "x", "preset": "tiny_cpu", "overrides": {"optim.lr": Infinity}}',
        '{"name": "x", "preset": "tiny_cpu", "overrides": {"optim.total_steps": 1' + "0" * 5000 + "}}",
        '{"name": "x", "preset": "tiny_cpu", "overrides": {"optim.lr": 1e999}}',
        "not json",
        "",
        '{"name": "x"',
        "\x00",
    ],
)
def test_api_refuses_json_that_is_not_plain_json(api, paths, queued, text):
    response = api.post("/api/runs/", text, content_type="application/json")
    assert response.status_code == 400 and Run.objects.count() == 0
    data = response.json()
    assert data.get("errors") or data.get("detail")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"model.path": "~nobody-here/model"}, "model.path"),  # expanduser raised RuntimeError: a 500
        ({"data.train_path": "a" * 300}, "data.train_path"),  # a name too long for the file system: OSError
        ({"data.val_path": "/" + "a/" * 2100}, "data.val_path"),
        ({"model.path": "\ud800"}, "model.path"),  # a lone surrogate: no database or file system takes it
        ({"algorithm.advantage_estimator": "x" * 4000}, "algorithm.advantage_estimator"),  # echoed whole
        ({"data.reward_fn": "y" * 4000}, "data.reward_fn"),
    ],
)
def test_api_refuses_what_the_fuzzer_found(api, paths, queued, overrides, field):
    body = {"name": "x", "preset": "tiny_cpu", "overrides": {**paths, **overrides}}
    response = _post_json(api, body)
    _check_refused(response, 0, body, {field})


@pytest.mark.parametrize(
    "body",
    [
        {"name": "\ud800", "preset": "tiny_cpu"},
        {"name": "x", "preset": "tiny_cpu", "dataset": "a\x00b"},
        {"name": "x", "preset": "tiny_cpu", "base_model": "\udfff"},
        {"name": "x", "preset": "z" * 10_000},
        {"name": "x", "preset": "tiny_cpu", "overrides": {"\ud800" * 200: 1}},
    ],
)
def test_api_refuses_names_the_database_cannot_hold(api, paths, queued, body):
    body = {**body, "overrides": {**paths, **body.get("overrides", {})}}  # only the name is at fault
    response = _post_json(api, body)
    _check_refused(response, 0, body, set())


def test_api_refuses_a_huge_body(api, paths, queued):
    body = {"name": "x", "preset": "tiny_cpu", "overrides": {**paths, "model.dtype": "x" * 5_000_000}}
    response = _post_json(api, body)
    assert response.status_code in (400, 413) and Run.objects.count() == 0


# ---- the new-run form ------------------------------------------------------------------------------------

form_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=20)  # what a browser can send
SENDABLE = [s for s in NASTY_STRINGS if "\ud800" not in s and "\udfff" not in s]  # a browser can send these
form_values = st.one_of(form_text, st.sampled_from(SENDABLE), st.sampled_from(list(map(str, NASTY_NUMBERS))))
LETTERS = st.text(alphabet="abcxyz", min_size=1, max_size=6)  # never a number, whatever the parser


def _form_post(paths: dict[str, str]) -> dict[str, str]:
    data: dict[str, str] = {"name": "form fuzz", "preset": "tiny_cpu"}
    config = get_preset("tiny_cpu").with_overrides({**paths, "optim.total_steps": 5})
    for name, value in config.flat().items():
        if value is not False:
            data[name] = "on" if value is True else display(value)  # as the form shows it
    return data


def test_form_fuzz(alice_client, paths, queued):
    base = _form_post(paths)
    numeric = sorted(n for n, f in FIELDS.items() if f["type"] in ("int", "float", "pair"))

    @FUZZ
    @given(
        st.dictionaries(
            st.sampled_from(sorted(FIELDS))
            | st.sampled_from(["name", "preset", "base_model", "dataset", "checkpoint"])
            | form_text,
            form_values,
            max_size=4,
        ),
        st.dictionaries(st.sampled_from(numeric), LETTERS, max_size=2),
        st.sets(st.sampled_from(sorted(FIELDS)), max_size=2),
    )
    def check(changes: dict[str, str], not_numbers: dict[str, str], dropped: set[str]) -> None:
        data = {k: v for k, v in {**base, **changes, **not_numbers}.items() if k not in dropped}
        before = Run.objects.count()
        response = alice_client.post("/runs/new/", data)
        assert response.status_code in (302, 400), response.status_code
        if response.status_code == 302:
            assert not not_numbers
            run_id = int(response["Location"].rstrip("/").rsplit("/", 1)[1])
            _check_created(run_id)
        else:
            assert Run.objects.count() == before
            errors = response.context["errors"]
            assert errors and set(errors) <= KNOWN_NAMES | {"checkpoint"} | set(data), errors
            assert set(not_numbers) <= set(errors), errors
            assert b"The run was not queued" in response.content

    check()


def test_new_run_page_query_fuzz(alice_client, alice_run):
    query_values = st.sampled_from([*SENDABLE, "99999"]) | form_values

    @FUZZ
    @given(st.fixed_dictionaries({}, optional=dict.fromkeys(["fork", "from", "preset"], query_values)))
    @example({"fork": "²"})  # found by this test: "²".isdigit() is true, int("²") raises
    @example({"from": "①", "preset": "\x00"})
    @example({"from": str(alice_run.pk), "fork": str(alice_run.pk)})
    def check(query: dict[str, str]) -> None:
        response = alice_client.get("/runs/new/", query)
        assert response.status_code in (200, 404), response.status_code

    check()
