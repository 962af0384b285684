"""Sample exports: the samples a ``SampleFilter`` selects, as JSONL, CSV or parquet.

Rows are read step by step in chunks along the unique index (run, split, step, sample_index), so memory
stays flat however large the export; JSONL and CSV stream as they are read, parquet is written row group
by row group to a temporary file and streamed from there (its footer comes last). Under ASGI the chunks
are pulled through an async iterator: Django would otherwise read a sync stream whole into memory first.

Model text is kept exact in JSONL and parquet. CSV goes through the product's one CSV writer
(runs.csv_export): a text cell that starts with = + - @ (or a tab or carriage return) gets a leading ' so a
spreadsheet shows it instead of running it as a formula.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from typing import IO, Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from runs.csv_export import csv_text
from runs.models import Run, Sample

from inspector.sample_filter import SampleFilter

MAX_ROWS = 100_000
"""Most rows one export holds; a larger selection is refused with a 400 that says how to narrow it."""
CHUNK_ROWS = 500
FIELDS = [
    "run_id",
    "step",
    "split",
    "sample_index",
    "group",
    "problem_index",
    "prompt",
    "response",
    *Sample.SCORING_FIELDS,
]
TOKEN_FIELDS = Sample.TOKEN_FIELDS
FORMATS = {
    "jsonl": "application/x-ndjson; charset=utf-8",
    "csv": "text/csv; charset=utf-8",
    "parquet": "application/vnd.apache.parquet",
}


def iter_rows(qs: Any, steps: list[int], fields: list[str]) -> Iterator[dict[str, Any]]:
    """The rows of ``qs`` (a SampleFilter queryset) over ``steps``, in (step, sample_index) order, read
    CHUNK_ROWS at a time with a keyset on the unique index (never an OFFSET, never a long-lived cursor)."""
    for step in steps:
        last = -1
        while True:
            chunk = list(
                qs.filter(step=step, sample_index__gt=last)
                .order_by("sample_index")
                .values(*fields)[:CHUNK_ROWS]
            )
            yield from chunk
            if len(chunk) < CHUNK_ROWS:
                break
            last = chunk[-1]["sample_index"]


def jsonl_chunks(rows: Iterator[dict[str, Any]]) -> Iterator[bytes]:
    lines: list[str] = []
    for row in rows:
        lines.append(json.dumps(row, ensure_ascii=False))
        if len(lines) >= CHUNK_ROWS:
            yield ("\n".join(lines) + "\n").encode()
            lines = []
    if lines:
        yield ("\n".join(lines) + "\n").encode()


def csv_chunks(rows: Iterator[dict[str, Any]]) -> Iterator[bytes]:
    batch: list[list[Any]] = [FIELDS]
    for row in rows:
        batch.append([row[name] for name in FIELDS])
        if len(batch) >= CHUNK_ROWS:
            yield csv_text(batch).encode()
            batch = []
    yield csv_text(batch).encode()


def parquet_file(rows: Iterator[dict[str, Any]]) -> IO[bytes]:
    """The rows written to a temporary parquet file (one row group per chunk), rewound for reading."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    text, number, flag = pa.string(), pa.float64(), pa.bool_()
    types = {
        "run_id": pa.int64(),
        "step": pa.int64(),
        "split": text,
        "sample_index": pa.int64(),
        "group": pa.int64(),
        "problem_index": pa.int64(),
        "prompt": text,
        "response": text,
        "ground_truth": text,
        "pred": text,
        "score": number,
        "acc": flag,
        "overlong_penalty": number,
        "reward": number,
        "advantage": number,
        "length": pa.int64(),
        "truncated": flag,
        "kept": flag,
        "discard_reason": text,
        "tokens": pa.list_(text),
        "token_logprobs": pa.list_(number),
        "token_entropy": pa.list_(number),
        "token_ratio": pa.list_(number),
        "token_old_logprobs": pa.list_(number),
        "token_new_logprobs": pa.list_(number),
    }
    schema = pa.schema([(name, types[name]) for name in [*FIELDS, *TOKEN_FIELDS]])
    out = tempfile.TemporaryFile()
    with pq.ParquetWriter(out, schema, compression="zstd") as writer:
        batch: list[dict[str, Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= CHUNK_ROWS:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                batch = []
        if batch:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
    out.seek(0)
    return out


def file_chunks(handle: IO[bytes], size: int = 1 << 16) -> Iterator[bytes]:
    with handle:
        while block := handle.read(size):
            yield block


async def _pulled(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Each chunk produced in the request's sync thread (the ORM needs it) and sent as soon as it exists."""
    pull: Callable[..., Any] = sync_to_async(next, thread_sensitive=True)
    while (chunk := await pull(chunks, None)) is not None:
        yield chunk


def too_many(qs: Any) -> bool:
    """True when the selection exceeds MAX_ROWS (a count that stops at MAX_ROWS + 1)."""
    return qs.order_by()[: MAX_ROWS + 1].count() > MAX_ROWS


def export_response(
    request: HttpRequest, run: Run, f: SampleFilter, steps: list[int], fmt: str
) -> HttpResponseBase:
    """The export of ``f``'s samples over ``steps`` (a ranked filter: its top/bottom k, in rank order)."""
    qs = f.queryset(run)
    if not f.rank and too_many(qs):
        message = f"More than {MAX_ROWS} samples match: export one step at a time, or narrow the filter.\n"
        return HttpResponse(message, status=400, content_type="text/plain; charset=utf-8")
    fields = [*FIELDS, *TOKEN_FIELDS] if fmt != "csv" else FIELDS
    rows = iter(f.ordered(qs).values(*fields)) if f.rank else iter_rows(qs, steps, fields)
    if fmt == "jsonl":
        chunks = jsonl_chunks(rows)
    elif fmt == "csv":
        chunks = csv_chunks(rows)
    else:
        chunks = file_chunks(parquet_file(rows))
    content = _pulled(chunks) if isinstance(request, ASGIRequest) else chunks
    response = StreamingHttpResponse(content, content_type=FORMATS[fmt])
    step = "all" if f.step is None else f.step
    suffix = "-filtered" if f.narrows else ""
    name = f"run{run.pk}-{f.split}-step{step}{suffix}.{fmt}"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
