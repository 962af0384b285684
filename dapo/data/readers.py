"""Reading the rows of a dataset file, each format streamed and checked against the read limits as it goes
(``dapo.data.limits``): parquet batch by batch (repeated problems dropped by their key), JSONL line by
line, JSON as one list. The rows are validated into problems by ``dapo.data.problems``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dapo.data import jsonsafe
from dapo.data.limits import Budget, batch_rows, dictionary_columns


class DataError(ValueError):
    """Malformed dataset input; the message names the file, the row and the column."""


def parquet_rows(
    path: Path, seen: set[tuple] | None, *, all_columns: bool = False, budget: Budget | None = None
) -> Iterator[tuple[int, Any]]:
    """Yield (1-based row number, row dict) from a parquet file, batch by batch: the columns a problem
    needs, or with `all_columns` every column.

    With `seen`, rows whose (messages, ground truth) key is already in it are skipped before they are
    turned into dicts: the published DAPO-Math-17k repeats every problem ~100x, and building 1.7M row
    dicts only to drop them costs seconds. A repeat equals its first row, which is validated. With a
    `budget`, the footer and each decoded batch are checked against its limits before any row is built."""
    import pyarrow as pa

    parquet, plain = _open_parquet(path, budget)
    names = set(plain.names)
    for column in ("prompt", "reward_model"):
        if column not in names:
            raise DataError(f"{path}: column {column!r} is missing (DAPO schema: prompt, reward_model, ...)")
    columns = None if all_columns else [c for c in ("prompt", "reward_model", "data_source") if c in names]
    start = 0
    try:
        for whole in parquet.iter_batches(batch_size=batch_rows(parquet.metadata), columns=columns):
            if budget is None:
                yield from _batch_rows(whole, start, seen)
                start += whole.num_rows
                continue
            for piece in budget.pieces(whole, start):  # checked, then its text written out
                yield from _batch_rows(piece.cast(_plain(plain, piece.schema)), start, seen)
                start += piece.num_rows
    except pa.ArrowException as exc:
        raise DataError(f"{path}: parquet read failed near row {start + 1} ({exc})") from exc


def _open_parquet(path: Path, budget: Budget | None) -> tuple[Any, Any]:
    """The parquet file and its Arrow schema. With a budget, its footer is checked and its text columns
    are read as dictionaries (until the budget has checked a batch; then they are written out)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        if budget is None:
            return parquet, parquet.schema_arrow
        budget.check_metadata(parquet.metadata)
        columns = dictionary_columns(parquet.schema)
        return pq.ParquetFile(path, read_dictionary=columns), parquet.schema_arrow
    except (OSError, pa.ArrowException, KeyError) as exc:  # KeyError: a column path read_dictionary misreads
        raise DataError(f"{path}: not a readable parquet file ({exc})") from exc


def _plain(schema: Any, read: Any) -> Any:
    """The file's own types of the columns read (text as strings, not dictionaries)."""
    import pyarrow as pa

    return pa.schema([schema.field(name) for name in read.names])


def _batch_rows(batch: Any, start: int, seen: set[tuple] | None) -> Iterator[tuple[int, Any]]:
    """(1-based row number, row dict) of one batch whose first row is row ``start + 1``."""
    import pyarrow as pa

    keys = _batch_keys(batch) if seen is not None else None
    if keys is None:
        yield from enumerate(batch.to_pylist(), start=start + 1)
        return
    assert seen is not None  # keys are only computed when de-duplicating
    fresh = []
    for i, key in enumerate(keys):
        if key not in seen:
            seen.add(key)
            fresh.append(i)
    rows = batch.take(pa.array(fresh, type=pa.int64())).to_pylist()
    yield from ((start + i + 1, row) for i, row in zip(fresh, rows, strict=True))


def _batch_keys(batch: Any) -> list[tuple] | None:
    """Per-row de-duplication keys read column-wise, or None when the columns are not the DAPO types.

    Keys only skip exact repeats early; `_collect` de-duplicates again on the parsed values."""
    import pyarrow as pa

    prompt, reward_model = batch.column("prompt"), batch.column("reward_model")
    if not (pa.types.is_list(prompt.type) and pa.types.is_struct(prompt.type.value_type)):
        return None
    if not pa.types.is_struct(reward_model.type) or reward_model.type.get_field_index("ground_truth") < 0:
        return None
    message_type = prompt.type.value_type
    if message_type.get_field_index("role") < 0 or message_type.get_field_index("content") < 0:
        return None
    messages = prompt.flatten()  # the messages of every row, one after another
    roles = messages.field("role").to_pylist()
    contents = messages.field("content").to_pylist()
    offsets = prompt.offsets.to_pylist()
    truths = reward_model.field("ground_truth").to_pylist()
    single = offsets == list(range(offsets[0], offsets[0] + len(prompt) + 1))
    if single and prompt.null_count == 0 and reward_model.null_count == 0:
        return list(zip(roles, contents, truths, strict=True))  # the common case: one message per row
    valid = prompt.is_valid().to_pylist()
    truths_valid = reward_model.is_valid().to_pylist()
    return [
        (tuple(zip(roles[a:b], contents[a:b], strict=True)) if ok else None, truth if truth_ok else None)
        for a, b, ok, truth, truth_ok in zip(
            offsets[:-1], offsets[1:], valid, truths, truths_valid, strict=True
        )
    ]


def jsonl_rows(path: Path, budget: Budget | None = None) -> Iterator[tuple[int, Any]]:
    """Yield (line number, decoded JSON value) for each non-blank line of a JSONL file, read line by line
    (a budget checks the file's size first and each row as it is decoded)."""
    if budget is not None:
        budget.check_file_size()
    with path.open("rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"{path}: row {line_number}: not valid UTF-8 ({exc.reason})") from exc
            if not line.strip():
                continue
            try:
                row = jsonsafe.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}: row {line_number}: bad JSON ({exc.msg})") from exc
            except jsonsafe.TooDeep as exc:
                raise DataError(f"{path}: row {line_number}: {exc}") from None
            if budget is not None:
                budget.check_row(f"{path}: row {line_number}", row)
            yield line_number, row


def json_rows(path: Path, budget: Budget | None = None) -> Iterator[tuple[int, Any]]:
    """Yield (1-based position, row) from a JSON file holding a list of rows (a budget checks the file's
    size before it is read, and each row)."""
    if budget is not None:
        budget.check_file_size()
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"{path}: line {line}: not valid UTF-8 ({exc.reason})") from exc
    if not text.strip():
        raise DataError(f"{path}: the file is empty")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: bad JSON at line {exc.lineno} column {exc.colno} ({exc.msg})") from exc
    except RecursionError:
        raise DataError(f"{path}: nested deeper than Python's parser can read") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of rows, got {type(data).__name__}")
    for position, row in enumerate(data, start=1):
        if budget is not None:
            budget.check_row(f"{path}: row {position}", row)
        yield position, row


# ----------------------------------------------------------------------------------------- validate
