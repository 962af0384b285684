"""Dataset files that decompress into far more than they weigh (issue #25, item 6).

A 2 kB zstd parquet of 10 rows of 2 MB prompts imported in seconds, grew the database by 87 MB and made
the dataset page take minutes. Reading now stops at a limit on rows (DAPO_DATASET_MAX_ROWS), characters
in one field (DAPO_DATASET_MAX_FIELD_CHARS) and decompressed bytes (DAPO_DATASET_MAX_MB), checked while
the file is read: a parquet file from its metadata and each decoded batch before any row becomes a Python
object, a JSONL file line by line. The answer is a 400 naming the limit and its setting; nothing is kept.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from catalog.models import Dataset, DatasetRow
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db

MB = 1024 * 1024


def _parquet(prompts: list[str], answers: list[str] | None = None) -> bytes:
    """A DAPO-schema parquet, zstd at its strongest: long repeated text shrinks to almost nothing."""
    answers = answers or [str(i) for i in range(len(prompts))]
    table = pa.Table.from_pylist(
        [
            {"prompt": [{"role": "user", "content": p}], "reward_model": {"ground_truth": a}}
            for p, a in zip(prompts, answers, strict=True)
        ]
    )
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd", compression_level=22)
    return out.getvalue()


def _jsonl(prompts: list[str]) -> bytes:
    return "".join(json.dumps({"prompt": p, "answer": str(i)}) + "\n" for i, p in enumerate(prompts)).encode()


def _upload(client: Any, name: str, content: bytes) -> tuple[int, str]:
    f = io.BytesIO(content)
    f.name = name
    response = client.post("/datasets/upload/", {"name": "bomb", "description": "", "train": f})
    return response.status_code, response.content.decode().replace("&#x27;", "'")


def _nothing_imported(settings: Any) -> None:
    assert Dataset.objects.count() == 0 and DatasetRow.objects.count() == 0
    kept = Path(settings.DAPO_VAR_DIR) / "datasets"
    assert not kept.exists() or [p for p in kept.rglob("*") if p.is_file()] == []


def test_a_tiny_zstd_parquet_of_huge_prompts_is_refused_before_it_is_imported(alice_client, settings):
    content = _parquet([("x" * 2_000_000) + str(i) for i in range(10)])
    assert len(content) < 10_000  # 20 MB of text in a few kB
    status, html = _upload(alice_client, "bomb.parquet", content)
    assert status == 400
    assert "train file bomb.parquet: row 1: column 'prompt' holds 2,000,001 characters" in html
    assert "more than the limit of 100,000 (DAPO_DATASET_MAX_FIELD_CHARS)" in html
    _nothing_imported(settings)


@pytest.mark.parametrize("name", ["many.parquet", "many.jsonl"])
def test_rows_past_the_limit_are_refused(alice_client, settings, name):
    settings.DAPO_DATASET_MAX_ROWS = 5
    prompts = [f"Compute {i}+1." for i in range(6)]
    content = _parquet(prompts) if name.endswith(".parquet") else _jsonl(prompts)
    status, html = _upload(alice_client, name, content)
    assert status == 400 and "more than the limit of 5 rows (DAPO_DATASET_MAX_ROWS)" in html
    _nothing_imported(settings)
    settings.DAPO_DATASET_MAX_ROWS = 6  # the limit itself is allowed
    assert _upload(alice_client, name, content)[0] == 302 and Dataset.objects.get().row_count == 6


@pytest.mark.parametrize(
    "name, content",
    [
        ("distinct.parquet", _parquet([("y" * 300_000) + str(i) for i in range(8)])),
        # one prompt repeated: dictionary-encoded, its metadata says 300 kB, decoded it is 2.4 MB
        ("repeated.parquet", _parquet(["z" * 300_000] * 8)),
        ("lines.jsonl", _jsonl([("y" * 300_000) + str(i) for i in range(8)])),
    ],
)
def test_decompressed_bytes_past_the_limit_are_refused(alice_client, settings, name, content):
    settings.DAPO_DATASET_MAX_MB = 1
    settings.DAPO_DATASET_MAX_FIELD_CHARS = 1_000_000
    status, html = _upload(alice_client, name, content)
    assert status == 400 and "more than the limit of 1 MB (DAPO_DATASET_MAX_MB)" in html
    _nothing_imported(settings)


def test_a_long_jsonl_field_names_its_line_and_column(alice_client, settings):
    settings.DAPO_DATASET_MAX_FIELD_CHARS = 1000
    rows = [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2", "notes": {"why": "n" * 1001}}]
    status, html = _upload(alice_client, "notes.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
    assert status == 400
    assert "row 2: column 'notes' holds 1,001 characters, more than the limit of 1,000" in html
    _nothing_imported(settings)


def test_the_register_command_keeps_the_same_limits(settings, tmp_path):
    settings.DAPO_DATASET_MAX_FIELD_CHARS = 1000
    path = tmp_path / "long.parquet"
    path.write_bytes(_parquet(["w" * 5000]))
    with pytest.raises(CommandError, match=r"DAPO_DATASET_MAX_FIELD_CHARS"):
        call_command("register_dataset", "long", str(path))
    assert Dataset.objects.count() == 0
