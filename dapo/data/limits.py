"""Limits on what reading one dataset file may cost: rows, characters in one value, decompressed bytes.

A compressed file can hold far more than it weighs: a 2 kB zstd parquet decodes into 20 MB of prompts, and
one dictionary-encoded prompt repeated a thousand times into gigabytes. So a reader given
:class:`ReadLimits` checks them while it reads, before a row becomes a Python object:

1. parquet: the footer's row count and uncompressed size, before any data page is read;
2. parquet: each batch as Arrow decoded it, its text columns kept dictionary-encoded, so the size the
   batch would have as plain strings is summed without building them; a batch within the limits is handed
   on in pieces of at most ``PIECE_BYTES`` decoded;
3. JSON and JSON lines: the file's size up front (its bytes are its decompressed bytes), then each row,
   line by line, as it is decoded.

The trainer reads without limits (``None``); the catalog import passes its settings and names them.
What is not bounded ahead: Arrow decodes a batch's pages before it can be measured, so a column written
with prefix encoding (DELTA_BYTE_ARRAY) costs the time to spell out its values, though never the memory
to keep them (they are folded into the dictionary as they come).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MB = 1024 * 1024
PIECE_BYTES = 64 * MB
"""Most decoded bytes of one parquet batch turned into Python rows at once."""
MAX_BATCH_ROWS = 65536


class LimitExceeded(ValueError):
    """A file past one of its :class:`ReadLimits`; ``limit`` says which ("rows", "field_chars",
    "bytes"), the message names the file, the row and the column."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


@dataclass(frozen=True)
class ReadLimits:
    """What one dataset file may hold; each limit at least 1."""

    max_rows: int
    """Rows the file may hold (before repeated problems are dropped)."""
    max_field_chars: int
    """Characters one text value may hold: a message's content, an answer, any string of any column."""
    max_bytes: int
    """Bytes the file's data may take once decompressed (parquet: as plain Arrow strings)."""


class Budget:
    """One file's running count of rows and decoded bytes against its limits."""

    def __init__(self, path: Path, limits: ReadLimits) -> None:
        self.path, self.limits = path, limits
        self.rows = 0
        self.bytes = 0

    # ---- JSON and JSON lines ----------------------------------------------------------------------

    def check_file_size(self) -> None:
        size = self.path.stat().st_size
        if size > self.limits.max_bytes:
            raise self._too_many_bytes(f"{self.path}: {_mb(size)}")

    def check_row(self, where: str, row: Any) -> None:
        """One decoded row: counted, and each column's longest text measured."""
        self.rows += 1
        if self.rows > self.limits.max_rows:
            raise self._too_many_rows(where)
        columns = row.items() if isinstance(row, dict) else [("(row)", row)]
        for column, value in columns:
            chars = max(len(str(column)), _longest_python_text(value))
            if chars > self.limits.max_field_chars:
                raise self._too_long(where, column, chars)

    # ---- parquet --------------------------------------------------------------------------------------

    def check_metadata(self, metadata: Any) -> None:
        """The footer's claims, before any data page is read."""
        if metadata.num_rows > self.limits.max_rows:
            raise self._too_many_rows(f"{self.path}: {metadata.num_rows:,} rows")
        size = sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))
        if size > self.limits.max_bytes:
            raise self._too_many_bytes(f"{self.path}: {_mb(size)} of data uncompressed")

    def pieces(self, batch: Any, start: int) -> Iterator[Any]:
        """The batch (rows ``start + 1`` on) checked, then in pieces of at most PIECE_BYTES decoded."""
        self.rows += batch.num_rows
        if self.rows > self.limits.max_rows:
            raise self._too_many_rows(f"{self.path}: row {self.limits.max_rows + 1:,}")
        size = decoded_bytes(batch)
        self.bytes += size
        if self.bytes > self.limits.max_bytes:
            last = start + batch.num_rows
            raise self._too_many_bytes(f"{self.path}: {_mb(self.bytes)} of data decompressed by row {last:,}")
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            if longest_text(column) > self.limits.max_field_chars:
                row, chars = self._first_too_long(column)
                raise self._too_long(f"{self.path}: row {start + row + 1}", name, chars)
        yield from _split(batch, size)

    def _first_too_long(self, column: Any) -> tuple[int, int]:
        """(position, characters) of the first value of the column past the limit (a slow scan, made only
        once the column is known to hold one)."""
        for row in range(len(column)):
            chars = longest_text(column.slice(row, 1))
            if chars > self.limits.max_field_chars:
                return row, chars
        raise AssertionError("the column holds no value past the limit")

    # ---- messages ---------------------------------------------------------------------------------------

    def _too_many_rows(self, where: str) -> LimitExceeded:
        return LimitExceeded(f"{where}, more than the limit of {self.limits.max_rows:,} rows", "rows")

    def _too_many_bytes(self, what: str) -> LimitExceeded:
        return LimitExceeded(f"{what}, more than the limit of {_mb(self.limits.max_bytes)}", "bytes")

    def _too_long(self, where: str, column: Any, chars: int) -> LimitExceeded:
        shown = str(column) if len(str(column)) <= 60 else str(column)[:60] + "…"
        return LimitExceeded(
            f"{where}: column {shown!r} holds {chars:,} characters, more than the limit of "
            f"{self.limits.max_field_chars:,}",
            "field_chars",
        )


def dictionary_columns(schema: Any) -> list[str]:
    """The text (BYTE_ARRAY) leaf columns of a parquet schema: read as dictionaries, a value repeated a
    million times is held once, and its decoded size is summed without building the strings."""
    return [c.path for c in schema if c.physical_type == "BYTE_ARRAY"]


def batch_rows(metadata: Any) -> int:
    """Rows per batch so that one batch of the widest row group is about PIECE_BYTES as written."""
    groups = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
    widest = max((g.total_byte_size / max(1, g.num_rows) for g in groups), default=1.0)
    return max(1, min(MAX_BATCH_ROWS, int(PIECE_BYTES // max(1.0, widest))))


def decoded_bytes(array: Any) -> int:
    """Bytes of an Arrow array (or record batch) with every text value written out: offsets and
    characters of strings, dictionary entries counted once per use."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(array, pa.RecordBatch):
        return sum(decoded_bytes(column) for column in array.columns)
    kind = array.type
    if pa.types.is_dictionary(kind):
        lengths = pc.take(pc.binary_length(array.dictionary), array.indices)
        return 4 * len(array) + int(pc.sum(lengths).as_py() or 0)
    if _is_text(kind):
        return 4 * len(array) + int(pc.sum(pc.binary_length(array)).as_py() or 0)
    if _is_list(kind):
        return 4 * len(array) + decoded_bytes(array.flatten())
    if pa.types.is_struct(kind):
        return sum(decoded_bytes(child) for child in array.flatten())
    return int(array.nbytes)


def longest_text(array: Any) -> int:
    """The most characters of one text value anywhere in an Arrow array (0 without text)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_dictionary(kind):
        return _max(pc.take(_lengths(array.dictionary), array.indices))
    if _is_text(kind):
        return _max(_lengths(array))
    if _is_list(kind):
        return longest_text(array.flatten())
    if pa.types.is_struct(kind):
        return max((longest_text(child) for child in array.flatten()), default=0)
    return 0


def _lengths(array: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    string = pa.types.is_string(array.type) or pa.types.is_large_string(array.type)
    return pc.utf8_length(array) if string else pc.binary_length(array)


def _max(lengths: Any) -> int:
    import pyarrow.compute as pc

    return int(pc.max(lengths).as_py() or 0) if len(lengths) else 0


def _is_text(kind: Any) -> bool:
    import pyarrow as pa

    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    )


def _is_list(kind: Any) -> bool:
    import pyarrow as pa

    return bool(
        pa.types.is_list(kind)
        or pa.types.is_large_list(kind)
        or pa.types.is_fixed_size_list(kind)
        or pa.types.is_map(kind)
    )


def _split(batch: Any, size: int) -> Iterator[Any]:
    """The batch in halves until each piece is at most PIECE_BYTES decoded (or a single row)."""
    if size <= PIECE_BYTES or batch.num_rows <= 1:
        yield batch
        return
    half = batch.num_rows // 2
    for piece in (batch.slice(0, half), batch.slice(half)):
        yield from _split(piece, decoded_bytes(piece))


def _longest_python_text(value: Any) -> int:
    """The most characters of one string (a value or a key) anywhere in a decoded JSON value; iterative,
    so a deeply nested value cannot exhaust the stack."""
    longest, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            longest = max(longest, len(item))
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return longest


def _mb(size: int) -> str:
    mb = size / MB
    return f"{mb:,.0f} MB" if mb == int(mb) or mb >= 10 else f"{mb:,.1f} MB"
