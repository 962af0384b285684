"""The dataset browser: upload and registration (validated, all or nothing), rows, search, statistics, the
prompt as the model sees it, and each problem's solve rate in the runs a user can see."""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from catalog.importer import ImportFailed, SplitFile, import_dataset
from catalog.models import BaseModel, Dataset, DatasetRow
from catalog.registry import register_dataset
from catalog.uploads import DatasetUploadHandler
from django.core.files.uploadhandler import SkipFile, StopFutureHandlers
from django.core.management import call_command
from django.test import Client
from runs.models import Run, Sample

from dapo.data.problems import Problem, load_problems, write_parquet
from dapo.runconfig.presets import get_preset
from tests.platform.fixtures import make_user
from tests.platform.support import sample

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[3]
DEMO_MODEL = REPO / "assets" / "demo" / "model"


# ---- helpers ----------------------------------------------------------------------------------------


def _jsonl(rows: list[Any]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _file(name: str, content: bytes) -> io.BytesIO:
    f = io.BytesIO(content)
    f.name = name
    return f


def _upload(client: Client, name: str = "arith", **files: io.BytesIO) -> Any:
    return client.post("/datasets/upload/", {"name": name, "description": "", **files})


def _problems(n: int) -> list[Problem]:
    return [Problem(i, [{"role": "user", "content": f"Compute {i}+{i}."}], str(2 * i)) for i in range(n)]


def _var_files(settings) -> list[Path]:
    """Every file left under DAPO_VAR_DIR/datasets (uploads, temporary or kept)."""
    root = Path(settings.DAPO_VAR_DIR) / "datasets"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def _nothing_imported(settings) -> None:
    assert Dataset.objects.count() == 0
    assert DatasetRow.objects.count() == 0
    assert _var_files(settings) == []


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    """Statistics are cached by dataset id: a rolled-back test's ids come back in the next test."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def roots(settings, tmp_path: Path) -> Path:
    """A dataset root holding a valid JSONL file; the web may register files only inside it."""
    root = tmp_path / "data-root"
    root.mkdir()
    (root / "train.jsonl").write_bytes(_jsonl([{"prompt": "Compute 1+1.", "answer": "2"}] * 2))
    settings.DAPO_DATASET_ROOTS = [root]
    return root


@pytest.fixture
def demo_model() -> BaseModel:
    return BaseModel.objects.create(name="demo-tiny-llama", path="assets/demo/model")


# ---- upload -----------------------------------------------------------------------------------------


def test_a_jsonl_upload_imports_every_problem_with_the_trainers_indices(alice_client, alice, settings):
    rows = [
        {"prompt": "Compute 2+3.", "answer": "5", "level": 1},
        {"prompt": [{"role": "user", "content": "Compute 4+4."}], "ground_truth": 8},
        {"prompt": "Compute 2+3.", "answer": "5"},  # a repeat: dropped, as the trainer drops it
        {"prompt": "AIME 1", "reward_model": {"ground_truth": "204"}, "data_source": "aime"},
    ]
    response = _upload(alice_client, train=_file("arith.jsonl", _jsonl(rows)))

    dataset = Dataset.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/datasets/{dataset.pk}/"
    assert (dataset.name, dataset.format, dataset.splits, dataset.row_count) == (
        "arith",
        "jsonl",
        {"train": 3},
        3,
    )
    assert dataset.created_by == alice and dataset.uploaded
    kept = Path(settings.DAPO_VAR_DIR) / "datasets" / f"{dataset.pk}-arith" / "train.jsonl"
    assert _var_files(settings) == [kept] and dataset.path == str(kept)
    stored = list(dataset.rows.order_by("index"))
    expected = load_problems(kept)
    assert [(r.index, r.ground_truth, r.data_source) for r in stored] == [
        (p.index, p.ground_truth, p.data_source) for p in expected
    ]
    assert stored[0].prompt == "Compute 2+3." and stored[0].extra == {"answer": "5", "level": 1}
    assert stored[1].prompt == [{"role": "user", "content": "Compute 4+4."}] and stored[1].prompt_chars == 12
    assert stored[1].messages == expected[1].messages


def test_a_parquet_upload_with_a_validation_file_imports_both_splits(alice_client, tmp_path):
    write_parquet(_problems(5) * 3, tmp_path / "train.parquet")  # DAPO-Math-17k repeats its problems
    write_parquet(_problems(2), tmp_path / "test.parquet")
    response = _upload(
        alice_client,
        train=_file("train.parquet", (tmp_path / "train.parquet").read_bytes()),
        val=_file("aime.parquet", (tmp_path / "test.parquet").read_bytes()),
    )
    dataset = Dataset.objects.get()
    assert response.status_code == 302
    assert dataset.splits == {"train": 5, "val": 2} and dataset.val_path.endswith("/val.parquet")
    assert dataset.schema["reward_model"] == "struct<ground_truth: string, style: string>"
    row = dataset.rows.get(split="val", index=1)
    assert row.prompt == [{"content": "Compute 1+1.", "role": "user"}] and row.ground_truth == "2"
    assert row.extra["extra_info"] == {"index": 1} and row.extra["ability"] == "MATH"


def _bad_parquet_schema() -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"question": ["1+1"], "answer": ["2"]}), sink)
    return sink.getvalue()


@pytest.mark.parametrize(
    ("filename", "content", "message"),
    [
        ("bad.jsonl", b'{"prompt": "a", "answer": "1"}\n{"prompt": "b", "answer": \n', "row 2: bad JSON"),
        (
            "bad.jsonl",
            _jsonl([{"prompt": "a", "answer": "1"}, {"prompt": "b"}]),
            "row 2: column 'answer' is missing",
        ),
        ("bad.jsonl", _jsonl([{"question": "a", "answer": "1"}]), "row 1: column 'prompt' is missing"),
        (
            "bad.jsonl",
            _jsonl([{"prompt": "a", "answer": 1.5}]),
            "row 1: column 'answer' must be a string or an",
        ),
        ("bad.jsonl", _jsonl([{"prompt": "a", "answer": "  "}]), "row 1: column 'answer' is empty"),
        (
            "bad.jsonl",
            b'{"prompt": "a", "answer": "1"}\n{"prompt": "\xff\xfe", "answer": "1"}\n',
            "row 2: not valid UTF-8",
        ),
        ("bad.jsonl", b"\n\n", "the file holds no rows"),
        ("bad.jsonl", b"", "bad.jsonl is empty (0 bytes)"),
        ("bad.jsonl", _jsonl([{"prompt": "a\u0000b", "answer": "1"}]), "holds a NUL character"),
        ("bad.parquet", b"PAR1 this is not parquet", "not a readable parquet file"),
        ("bad.parquet", _bad_parquet_schema(), "column 'prompt' is missing"),
        ("bad.csv", b"prompt,answer\na,1\n", "expected a .parquet file (DAPO schema) or a .jsonl file"),
    ],
)
def test_a_bad_upload_says_what_is_wrong_and_imports_nothing(
    alice_client, settings, filename, content, message
):
    response = _upload(alice_client, train=_file(filename, content))
    html = response.content.decode()
    assert response.status_code == 400
    assert message in html.replace("&#x27;", "'")
    assert "/incoming/" not in html  # the message names the uploaded file, not its temporary name
    _nothing_imported(settings)


def test_a_bad_row_after_thousands_of_good_ones_leaves_no_row_behind(alice_client, settings):
    rows = [{"prompt": f"Compute {i}+1.", "answer": str(i + 1)} for i in range(2500)]  # past two batches
    rows.append({"prompt": "Compute x.", "answer": None})
    response = _upload(alice_client, train=_file("big.jsonl", _jsonl(rows)))
    assert response.status_code == 400 and "train file big.jsonl: row 2501" in response.content.decode()
    _nothing_imported(settings)


def test_a_bad_validation_file_undoes_the_train_split(alice_client, settings):
    response = _upload(
        alice_client,
        train=_file("train.jsonl", _jsonl([{"prompt": "a", "answer": "1"}])),
        val=_file("val.jsonl", _jsonl([{"prompt": "b"}])),
    )
    assert response.status_code == 400 and "val file val.jsonl: row 1" in response.content.decode()
    _nothing_imported(settings)


def test_a_failure_after_the_files_were_moved_removes_them(alice_client, settings, monkeypatch):
    from catalog import importer

    def fail(*args: Any, **kwargs: Any) -> None:
        raise ImportFailed("the disk went away")

    monkeypatch.setattr(importer, "_finish", fail)
    response = _upload(alice_client, train=_file("t.jsonl", _jsonl([{"prompt": "a", "answer": "1"}])))
    assert response.status_code == 400 and "the disk went away" in response.content.decode()
    _nothing_imported(settings)
    assert [p.name for p in (Path(settings.DAPO_VAR_DIR) / "datasets").iterdir()] == ["incoming"]


def test_a_name_taken_whatever_its_case_adds_a_version_and_identical_files_are_refused(
    alice_client, settings
):
    first = _upload(alice_client, "Arith", train=_file("a.jsonl", _jsonl([{"prompt": "a", "answer": "1"}])))
    assert first.status_code == 302
    response = _upload(
        alice_client, "arith", train=_file("b.jsonl", _jsonl([{"prompt": "b", "answer": "2"}]))
    )
    v1, v2 = Dataset.objects.order_by("version")
    assert response.status_code == 302 and response["Location"] == f"/datasets/{v2.pk}/"
    assert [(d.name, d.version) for d in (v1, v2)] == [("Arith", 1), ("Arith", 2)]  # the first spelling
    assert v1.rows.get().ground_truth == "1" and v2.rows.get().ground_truth == "2" and v1.path != v2.path
    again = _upload(alice_client, "ARITH", train=_file("c.jsonl", _jsonl([{"prompt": "b", "answer": "2"}])))
    assert again.status_code == 400 and "identical to Arith v2" in again.content.decode()
    assert Dataset.objects.count() == 2 and DatasetRow.objects.count() == 2 and len(_var_files(settings)) == 2


def test_a_name_is_required(alice_client, settings):
    response = _upload(alice_client, "   ", train=_file("a.jsonl", _jsonl([{"prompt": "a", "answer": "1"}])))
    assert response.status_code == 400 and "give the dataset a name" in response.content.decode()
    _nothing_imported(settings)


def test_a_file_over_the_size_limit_is_refused_and_nothing_is_kept(alice_client, settings):
    settings.DAPO_MAX_UPLOAD_MB = 1  # the test sends 1.5 MB, not 2 GB
    line = json.dumps({"prompt": "x" * 1000, "answer": "1"}) + "\n"
    content = line.encode() * 1500
    response = _upload(alice_client, train=_file("huge.jsonl", content))
    html = response.content.decode()
    assert response.status_code == 400
    assert "huge.jsonl is larger than the upload limit of 1 MB (DAPO_MAX_UPLOAD_MB)" in html
    _nothing_imported(settings)


def test_a_body_bigger_than_two_files_is_refused_before_it_is_parsed(alice_client, settings, monkeypatch):
    settings.DAPO_MAX_UPLOAD_MB = 1
    parsed = []
    monkeypatch.setattr(DatasetUploadHandler, "new_file", lambda *a, **k: parsed.append(a))
    content = b"0" * (3 * 1024 * 1024 + 10)
    response = _upload(alice_client, train=_file("huge.jsonl", content))
    assert response.status_code == 413 and "larger than two files of 1 MB" in response.content.decode()
    assert parsed == []
    _nothing_imported(settings)


def test_the_upload_handler_stops_writing_at_the_limit(tmp_path):
    handler = DatasetUploadHandler(limit=10, folder=tmp_path)
    with pytest.raises(StopFutureHandlers):
        handler.new_file("train", "t.jsonl", "application/json", None)
    [partial] = list(tmp_path.iterdir())
    handler.receive_data_chunk(b"12345678", 0)
    with pytest.raises(SkipFile):  # 16 bytes would pass the limit: the chunk is not written
        handler.receive_data_chunk(b"12345678", 8)
    assert not partial.exists() and handler.too_large == {"train": "t.jsonl"}
    handler.cleanup()
    assert list(tmp_path.iterdir()) == []


def test_uploading_needs_a_csrf_token(alice, settings):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    response = _upload(client, train=_file("a.jsonl", _jsonl([{"prompt": "a", "answer": "1"}])))
    assert response.status_code == 403
    _nothing_imported(settings)
    token = client.get("/datasets/").cookies["csrftoken"].value
    response = client.post(
        "/datasets/upload/",
        {
            "csrfmiddlewaretoken": token,
            "name": "a",
            "train": _file("a.jsonl", _jsonl([{"prompt": "a", "answer": "1"}])),
        },
    )
    assert response.status_code == 302 and Dataset.objects.count() == 1


@pytest.mark.parametrize("url", ["/datasets/", "/datasets/1/", "/datasets/upload/", "/datasets/register/"])
def test_every_dataset_page_needs_a_login(anon_client, url, settings):
    response = (
        anon_client.post(url, {"name": "x", "train_path": "x"}) if "/1/" not in url else anon_client.get(url)
    )
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    _nothing_imported(settings)


# ---- registration -----------------------------------------------------------------------------------


def test_registering_a_file_inside_the_roots_imports_it_in_place(alice_client, roots):
    response = alice_client.post(
        "/datasets/register/", {"name": "local", "train_path": str(roots / "train.jsonl")}
    )
    dataset = Dataset.objects.get()
    assert response.status_code == 302 and dataset.path == str(roots / "train.jsonl") and not dataset.uploaded
    assert dataset.splits == {"train": 1} and (roots / "train.jsonl").exists()


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("{root}/../outside.jsonl", "must be inside one of the dataset roots"),
        ("{root}/sub/../../outside.jsonl", "must be inside one of the dataset roots"),
        ("/etc/passwd", "must be inside one of the dataset roots"),
        ("{root}/escape.jsonl", "must be inside one of the dataset roots"),  # a symlink pointing out
        ("{root}/missing.jsonl", "no file at"),
        ("{root}/notes.txt", "must be a .parquet, .jsonl, .json file"),
        ("{root}/a\x00b.jsonl", "Null characters are not allowed"),
        ("", "This field is required"),
    ],
)
def test_registration_refuses_paths_outside_the_roots(alice_client, roots, settings, path, message):
    outside = roots.parent / "outside.jsonl"
    outside.write_bytes(_jsonl([{"prompt": "secret", "answer": "1"}]))
    (roots / "escape.jsonl").symlink_to(outside)
    (roots / "notes.txt").write_text("x")
    response = alice_client.post("/datasets/register/", {"name": "x", "train_path": path.format(root=roots)})
    assert response.status_code == 400 and message in response.content.decode()
    assert Dataset.objects.count() == 0 and DatasetRow.objects.count() == 0


def test_registering_a_malformed_file_names_the_row_and_imports_nothing(alice_client, roots):
    (roots / "bad.jsonl").write_bytes(_jsonl([{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": ""}]))
    response = alice_client.post("/datasets/register/", {"name": "x", "train_path": str(roots / "bad.jsonl")})
    html = response.content.decode().replace("&#x27;", "'")
    assert response.status_code == 400 and f"{roots / 'bad.jsonl'}: row 2: column 'answer' is empty" in html
    assert Dataset.objects.count() == 0 and DatasetRow.objects.count() == 0 and (roots / "bad.jsonl").exists()


def test_the_register_command_imports_rows_and_skips_unchanged_files(tmp_path):
    path = write_parquet(_problems(4), tmp_path / "train.parquet")
    call_command("register_dataset", "d", str(path), stdout=io.StringIO())
    first = list(DatasetRow.objects.values_list("id", flat=True))
    call_command("register_dataset", "d", str(path), stdout=io.StringIO())
    assert list(DatasetRow.objects.values_list("id", flat=True)) == first  # not read again
    write_parquet(_problems(6), path)
    os.utime(path, ns=(0, 10**18))
    dataset = register_dataset("d", str(path))  # changed contents: the next version, the first one kept
    assert (dataset.version, dataset.splits) == (2, {"train": 6})
    assert Dataset.objects.get(version=1).rows.count() == 4 and DatasetRow.objects.count() == 10
    os.utime(path, ns=(0, 10**18 + 1))  # touched, same contents: the record is refreshed, no new version
    assert register_dataset("d", str(path)).pk == dataset.pk and Dataset.objects.count() == 2


def test_the_register_command_reports_a_malformed_file(tmp_path):
    from django.core.management.base import CommandError

    (tmp_path / "bad.jsonl").write_bytes(_jsonl([{"prompt": "a"}]))
    with pytest.raises(CommandError, match=r"row 1: column 'answer' is missing"):
        call_command("register_dataset", "d", str(tmp_path / "bad.jsonl"))
    assert Dataset.objects.count() == 0


def test_extra_columns_are_stored_as_json(tmp_path):
    table = pa.table(
        {
            "prompt": ["q"],
            "reward_model": [{"ground_truth": "1"}],
            "score": [float("nan")],
            "when": pa.array([0], type=pa.timestamp("s")),
            "blob": [b"\xff\x01"],
        }
    )
    pq.write_table(table, tmp_path / "d.parquet")
    dataset = import_dataset("d", [SplitFile("train", tmp_path / "d.parquet", "d.parquet")])
    extra = dataset.rows.get().extra
    assert extra["score"] is None and extra["when"] == "1970-01-01 00:00:00" and extra["blob"] == "\ufffd\x01"


@pytest.fixture
def root_client(django_user_model) -> Client:
    client = Client()
    client.force_login(make_user(django_user_model, "root", "x", is_superuser=True, is_staff=True))
    return client


def test_the_admin_validates_every_row_before_it_saves_and_imports(root_client, roots):
    (roots / "bad.jsonl").write_bytes(_jsonl([{"prompt": "a", "answer": "1"}, {"prompt": "b"}]))
    form = {"name": "adm", "path": str(roots / "bad.jsonl"), "val_path": "", "description": "", "_save": "1"}
    response = root_client.post("/admin/catalog/dataset/add/", form)
    assert (
        response.status_code == 200
        and "row 2: column &#x27;answer&#x27; is missing" in response.content.decode()
    )
    assert Dataset.objects.count() == 0
    response = root_client.post("/admin/catalog/dataset/add/", {**form, "path": "/etc/passwd"})
    assert (
        "must be inside one of the dataset roots" in response.content.decode()
        and Dataset.objects.count() == 0
    )
    response = root_client.post("/admin/catalog/dataset/add/", {**form, "path": str(roots / "train.jsonl")})
    assert response.status_code == 302 and Dataset.objects.get().splits == {"train": 1}
    assert DatasetRow.objects.get().ground_truth == "2"


def test_a_dataset_registered_before_rows_existed_says_how_to_import_them(alice_client):
    legacy = Dataset.objects.create(name="old", path="data/old.parquet", splits={"train": 5}, row_count=5)
    html = _html(alice_client.get(f"/datasets/{legacy.pk}/"))
    assert "manage.py register_dataset old data/old.parquet" in html


# ---- browsing ---------------------------------------------------------------------------------------


@pytest.fixture
def arith(tmp_path: Path) -> Dataset:
    """120 train problems (answers 0..9 twelve times, two data sources) and 10 validation problems."""
    train = [
        {
            "prompt": f"Compute {i} mod 10, problem {i}.",
            "answer": str(i % 10),
            "data_source": "a" if i < 100 else "b",
        }
        for i in range(120)
    ]
    (tmp_path / "train.jsonl").write_bytes(_jsonl(train))
    (tmp_path / "val.jsonl").write_bytes(
        _jsonl([{"prompt": f"Val {i}.", "answer": str(i)} for i in range(10)])
    )
    return register_dataset("arith", str(tmp_path / "train.jsonl"), str(tmp_path / "val.jsonl"))


def _html(response: Any) -> str:
    assert response.status_code == 200
    return response.content.decode()


def _stats(html: str) -> dict[str, Any]:
    return json.loads(html.split('id="ds-stats" type="application/json">')[1].split("</script>")[0])


def _indices(html: str) -> list[int]:
    return [
        int(i) for i in re.findall(r'<tr class="clickable[^"]*" data-href="[^"]*" data-index="(\d+)"', html)
    ]


def test_the_list_shows_formats_splits_and_a_nav_link(alice_client, arith):
    html = _html(alice_client.get("/datasets/"))
    assert f'href="/datasets/{arith.pk}/"' in html and "<code>jsonl</code>" in html
    assert '<td class="num">120</td>' in html and '<td class="num">10</td>' in html
    assert 'href="/datasets/" class="active">Datasets</a>' in html
    assert 'enctype="multipart/form-data"' in html and "csrfmiddlewaretoken" in html


def test_rows_are_paginated_and_searched_over_prompt_and_answer(alice_client, arith):
    url = f"/datasets/{arith.pk}/"
    assert _indices(_html(alice_client.get(url))) == list(range(50))
    assert _indices(_html(alice_client.get(url + "?page=3"))) == list(range(100, 120))
    html = _html(alice_client.get(url + "?q=PROBLEM 11"))  # case-insensitive, inside the prompt
    assert _indices(html) == [11, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119]
    assert "<mark>problem 11</mark>" in html
    assert _indices(_html(alice_client.get(url + "?source=b&answer=3"))) == [103, 113]
    assert _indices(_html(alice_client.get(url + "?split=val&q=7"))) == [7]  # the answer matches too
    assert _indices(_html(alice_client.get(url + "?sort=-index")))[:3] == [119, 118, 117]
    assert _html(alice_client.get(url + "?page=abc&sort=evil&split=nope&row=-4&model=x"))  # never a 500


def test_statistics_count_answers_and_prompt_lengths(alice_client, arith, demo_model):
    stats = _stats(_html(alice_client.get(f"/datasets/{arith.pk}/")))
    assert stats["rows"] == 120 and stats["answers"] == 10 and stats["sources"] == 2
    assert stats["top_answers"][0] == {"value": "0", "count": 12} and stats["other_answers"] == 0
    chars = [len(f"Compute {i} mod 10, problem {i}.") for i in range(120)]
    assert (stats["lo"], stats["hi"]) == (min(chars), max(chars)) and sum(stats["chars"]["counts"]) == 120
    assert stats["chars"]["edges"][0] == min(chars)
    tokens = stats["tokens"]
    assert tokens["model"] == "demo-tiny-llama" and tokens["measured"] == 120
    # the demo tokenizer is one token a character: BOS, "<|user|>", the prompt, "\n", "<|assistant|>"
    assert tokens["max"] == max(chars) + 4 and sum(tokens["histogram"]["counts"]) == 120


def test_token_lengths_of_a_large_split_are_sampled_but_keep_the_true_maximum(
    alice_client, tmp_path, demo_model, monkeypatch
):
    from catalog import stats

    monkeypatch.setattr(stats, "TOKEN_SAMPLE", 10)
    monkeypatch.setattr(stats, "LONGEST", 3)
    rows = [{"prompt": "x" * (50 if i == 5 else 10), "answer": str(i)} for i in range(120)]
    (tmp_path / "t.jsonl").write_bytes(_jsonl(rows))
    dataset = register_dataset("t", str(tmp_path / "t.jsonl"))
    tokens = _stats(_html(alice_client.get(f"/datasets/{dataset.pk}/")))["tokens"]
    assert (tokens["measured"], tokens["total"]) == (10, 120)  # every 12th index: 0, 12, ..., 108
    assert tokens["p95"] == 10 + 4 and tokens["max"] == 50 + 4  # problem 5 is not in the sample


def test_the_chosen_row_shows_the_prompt_with_the_chat_template_beside_the_truth(
    alice_client, arith, demo_model
):
    html = _html(alice_client.get(f"/datasets/{arith.pk}/?row=3"))
    seen = html.split('id="prompt-seen">')[1].split("</pre>")[0]
    assert seen == (  # what the template wrote is shaded; the problem's own text is not
        '<span class="ds-templated">&lt;s&gt;&lt;|user|&gt;</span>Compute 3 mod 10, problem 3.'
        '<span class="ds-templated">\n&lt;|assistant|&gt;</span>'
    )
    assert html.split('id="ground-truth">')[1].split("</pre>")[0] == "3"
    assert "chat_template.jinja" in html and f"{len('Compute 3 mod 10, problem 3.') + 4} tokens" in html
    assert 'id="row-prev"' in html and 'id="row-next"' in html


def test_template_segments_fall_back_to_one_piece_when_the_template_edits_a_message():
    from catalog.detail import template_segments

    assert template_segments("<s>S\nQ<a>", ["S", "Q"]) == [
        ("<s>", True),
        ("S", False),
        ("\n", True),
        ("Q", False),
        ("<a>", True),
    ]
    assert template_segments("<s>q<a>", ["  Q "]) == [("<s>q<a>", False)]


def test_without_a_model_the_prompt_is_shown_as_the_trainer_sends_it_untemplated(alice_client, arith):
    html = _html(alice_client.get(f"/datasets/{arith.pk}/?row=3"))
    assert html.split('id="prompt-seen">')[1].split("</pre>")[0] == "Compute 3 mod 10, problem 3."
    assert "no base model registered" in html


def test_a_template_that_raises_shows_its_message_not_a_500(alice_client, arith, tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "chat_template.jinja").write_text("{{ raise_exception('System role not supported') }}")
    BaseModel.objects.create(name="strict", path=str(model))
    html = _html(alice_client.get(f"/datasets/{arith.pk}/?row=0"))
    assert "System role not supported" in html


def test_the_demo_model_is_the_default_template(alice_client, arith, demo_model):
    BaseModel.objects.create(name="aaa-other", path="/nowhere")
    html = _html(alice_client.get(f"/datasets/{arith.pk}/"))
    options = html.split('id="f-model">')[1].split("</select>")[0]
    assert options.index("demo-tiny-llama") < options.index("aaa-other")


def test_dataset_text_is_rendered_as_text(alice_client, tmp_path, demo_model):
    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    (tmp_path / "x.jsonl").write_bytes(
        _jsonl([{"prompt": evil, "answer": "<b>7</b>", "data_source": "<i>s</i>"}])
    )
    dataset = register_dataset("x", str(tmp_path / "x.jsonl"))
    html = _html(alice_client.get(f"/datasets/{dataset.pk}/?row=0"))
    assert "<script>alert" not in html and "<img src=x" not in html and "<b>7</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;b&gt;7&lt;/b&gt;" in html
    assert _stats(html)["top_answers"][0]["value"] == "<b>7</b>"  # json_script escapes it; JS sets text


# ---- solve rates ------------------------------------------------------------------------------------


def _run(owner: Any, dataset: Dataset | None, train: str, val: str = "") -> Run:
    config = get_preset("tiny_cpu").with_overrides({"data.train_path": train, "data.val_path": val})
    return Run.create_queued(owner=owner, name=f"{owner.username}-run", config=config, dataset=dataset)


def _samples(run: Run, problem: int, outcomes: list[bool], split: str = "train", step: int = 1) -> None:
    Sample.objects.bulk_create(
        Sample.from_record(
            run.pk,
            sample(step, i, split=split, problem_index=problem, acc=ok, sample_index=problem * 100 + i),
        )
        for i, ok in enumerate(outcomes)
    )


@pytest.fixture
def sampled(arith: Dataset, alice, bob, queued) -> dict[str, Run]:
    """Alice's runs on the dataset (one by catalog entry, one by path), her run on another file, Bob's run."""
    runs = {
        "by_fk": _run(alice, arith, arith.path, arith.val_path),
        "by_path": _run(alice, None, arith.path),
        "other_file": _run(alice, arith, "/elsewhere/train.jsonl"),
        "bob": _run(bob, arith, arith.path),
    }
    _samples(runs["by_fk"], 5, [True, False, False, False])
    _samples(runs["by_fk"], 6, [False, False, False, False])
    _samples(runs["by_fk"], 7, [True, True], step=2)
    _samples(runs["by_path"], 5, [True, True, True, True])
    _samples(runs["by_fk"], 2, [True, False], split="val")
    _samples(runs["other_file"], 5, [False] * 8)  # its problem 5 is another file's problem
    _samples(runs["bob"], 5, [False] * 8)  # alice cannot see bob's run
    return runs


def _rates(html: str) -> dict[int, tuple[int, int]]:
    """{problem index: (correct, samples)} of the table's rows that have samples."""
    found = re.findall(r'data-index="(\d+)" data-correct="(\d+)" data-samples="(\d+)"', html)
    return {int(i): (int(c), int(n)) for i, c, n in found}


def test_solve_rates_count_only_the_users_runs_on_this_file(alice_client, arith, sampled):
    html = _html(alice_client.get(f"/datasets/{arith.pk}/"))
    rates = _rates(html)
    assert rates == {5: (5, 8), 6: (0, 4), 7: (2, 2)}  # alice's two runs: not bob's, not the other file's
    assert "</span></span> 63% " in html  # 5 of 8, halves rounded up
    assert _rates(_html(alice_client.get(f"/datasets/{arith.pk}/?split=val"))) == {2: (1, 2)}


def test_another_user_sees_only_their_own_runs_numbers(bob_client, arith, sampled):
    assert _rates(_html(bob_client.get(f"/datasets/{arith.pk}/"))) == {5: (0, 8)}


def test_rows_sort_and_filter_by_solve_rate(alice_client, arith, sampled):
    url = f"/datasets/{arith.pk}/"
    assert _indices(_html(alice_client.get(url + "?sort=rate")))[:4] == [6, 5, 7, 0]  # unsampled last
    assert _indices(_html(alice_client.get(url + "?sort=-rate")))[:3] == [7, 5, 6]
    assert _indices(_html(alice_client.get(url + "?solved=never"))) == [6]
    assert _indices(_html(alice_client.get(url + "?solved=mixed"))) == [5]
    assert _indices(_html(alice_client.get(url + "?solved=always"))) == [7]
    assert len(_indices(_html(alice_client.get(url + "?solved=unsampled&page=3")))) == 120 - 3 - 100


def test_a_new_step_of_a_run_reorders_the_solve_rates(alice_client, arith, sampled):
    from dapo.loop.report import StepReport

    url = f"/datasets/{arith.pk}/?sort=-rate"
    assert _indices(_html(alice_client.get(url)))[:3] == [7, 5, 6]  # (cached now)
    solved = [sample(5, 600 + i, problem_index=6, acc=True) for i in range(8)]  # 6: 8 of 12 > 5 of 8
    sampled["by_fk"].record_step(StepReport(step=5, metrics={}, samples=solved, wall_time=0.0, elapsed_s=1.0))
    assert _indices(_html(alice_client.get(url)))[:3] == [7, 6, 5]


def test_the_row_panel_breaks_the_solve_rate_down_by_run_with_timeline_links(alice_client, arith, sampled):
    html = _html(alice_client.get(f"/datasets/{arith.pk}/?row=5"))
    panel = html.split('id="solve-runs"')[1].split("</table>")[0]
    fk, path = sampled["by_fk"].pk, sampled["by_path"].pk
    assert f"/runs/{fk}/problems/5/" in panel and f"/runs/{path}/problems/5/" in panel
    assert "1 / 4" in panel and "4 / 4" in panel and f"/runs/{sampled['bob'].pk}/" not in panel
    assert "63%" in html.split('id="solve-total">')[1]
    val = _html(alice_client.get(f"/datasets/{arith.pk}/?split=val&row=2"))
    assert f"/runs/{fk}/problems/2/?split=val" in val


def test_the_list_counts_only_visible_runs(alice_client, bob_client, arith, sampled):
    alice_html = _html(alice_client.get("/datasets/"))
    assert (
        f">#{sampled['by_fk'].pk} alice-run<" in alice_html
        and f">#{sampled['by_path'].pk} alice-run<" in alice_html
    )
    assert f">#{sampled['bob'].pk} bob-run<" not in alice_html
    bob_html = _html(bob_client.get("/datasets/"))
    assert f">#{sampled['bob'].pk} bob-run<" in bob_html and "alice-run" not in bob_html


# ---- the chat template, as transformers renders it --------------------------------------------------

COMPLEX_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] %}"
    "{%- set loop_messages = messages[1:] %}{%- else %}{%- set system = 'You are helpful.' %}"
    "{%- set loop_messages = messages %}{%- endif %}\n"
    "{{ bos_token }}<|system|>{{ system }}\n"
    "{% set ns = namespace(n=0) %}\n"
    "{%- for message in loop_messages %}\n"
    "  {%- if message['role'] == 'tool' %}{% continue %}{% endif %}\n"
    "  {%- set ns.n = ns.n + 1 %}\n"
    "  {% if message['role'] == 'assistant' %}{% generation %}"
    "<|assistant|>{{ message['content'] }}{{ eos_token }}{% endgeneration %}\n"
    "  {% else %}<|{{ message['role'] }}|>{{ message['content'] | trim }}\n"
    "  {% endif %}\n"
    "{% endfor %}\n"
    "{%- if add_generation_prompt %}<|assistant|>{{ {'turns': ns.n, 'note': 'é<b>'} | tojson }}{% endif %}"
)


@pytest.mark.parametrize("template_in", ["jinja-file", "tokenizer-config-list"])
def test_our_rendering_matches_transformers_apply_chat_template(tmp_path, template_in):
    from catalog.chat import TokenCounter, load_chat_template
    from transformers import AutoTokenizer

    model = tmp_path / "model"
    shutil.copytree(DEMO_MODEL, model, ignore=shutil.ignore_patterns("*.safetensors", "chat_template.jinja"))
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["eos_token"] = {"content": "</s>", "__type": "AddedToken"}
    if template_in == "jinja-file":
        (model / "chat_template.jinja").write_text(COMPLEX_TEMPLATE)
    else:
        config["chat_template"] = [
            {"name": "default", "template": COMPLEX_TEMPLATE},
            {"name": "rag", "template": "x"},
        ]
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = AutoTokenizer.from_pretrained(model)
    ours = load_chat_template(model)
    counter = TokenCounter(model, templated=True)
    conversations = [
        [{"role": "user", "content": "  Compute 1+2.  "}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q <s>"}],
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "tool", "content": "c"},
            {"role": "user", "content": "d"},
        ],
    ]
    for messages in conversations:
        expected = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert ours.render(messages) == expected
        assert counter.count([expected]) == [len(tokenizer(expected, add_special_tokens=False)["input_ids"])]


def test_a_model_without_a_template_joins_user_messages_like_the_trainer(tmp_path):
    from catalog.chat import TokenCounter, load_chat_template
    from transformers import AutoTokenizer

    from dapo.data.problems import encode_prompts, render_prompt

    model = tmp_path / "model"
    shutil.copytree(DEMO_MODEL, model, ignore=shutil.ignore_patterns("*.safetensors", "chat_template.jinja"))
    tokenizer = AutoTokenizer.from_pretrained(model)
    problem = Problem(
        0, [{"role": "system", "content": "S"}, {"role": "user", "content": "Compute 1+2."}], "3"
    )
    ours = load_chat_template(model)
    assert ours.template is None and ours.render(problem.messages) == render_prompt(tokenizer, problem)
    counted = TokenCounter(model, templated=False).count([ours.render(problem.messages)])
    assert counted == [len(encode_prompts(tokenizer, [problem], 100)[0])]


def test_solve_rates_match_a_slow_count(arith, sampled, alice):
    """The database aggregate equals a loop over the stored samples of the visible runs on this file."""
    from catalog import solve

    runs = solve.runs_using(arith, alice)["train"]
    fast = solve.rates_for([r.pk for r in runs], "train", list(range(10)))
    for index in range(10):
        outcomes = [s.acc for s in Sample.objects.filter(run__in=runs, split="train", problem_index=index)]
        if outcomes:
            assert math.isclose(fast[index].rate, sum(outcomes) / len(outcomes))
            assert fast[index].samples == len(outcomes)
        else:
            assert index not in fast
