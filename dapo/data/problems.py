"""Loading reasoning problems: the DAPO-Math-17k / verl parquet schema and simple JSON/JSONL files.

A dataset is a list of `Problem`s: chat messages to prompt with, and the ground truth the rule-based
reward compares against (docs/dapo.md §6, §7). Malformed input raises `DataError` naming the file,
the row and the column; a load either returns every problem or raises, never a partial list.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dapo.data import jsonsafe
from dapo.data.limits import Budget, ReadLimits
from dapo.data.readers import DataError, json_rows, jsonl_rows, parquet_rows

DEFAULT_DATA_SOURCE = "math_dapo"
"""data_source given to rows that name none: the reward function that scores them (verl convention)."""
DAPO_ABILITY = "MATH"
DAPO_REWARD_STYLE = "rule-lighteval/MATH_v2"
_ANSWER_KEYS = ("answer", "ground_truth")


@dataclass(frozen=True)
class Problem:
    """One problem: chat messages to prompt with and the ground truth to score against."""

    index: int
    """Stable id within the dataset: the position in file order after de-duplication (0-based)."""
    messages: list[dict]
    """Chat messages `[{"role": ..., "content": ...}]`; at least one has role "user"."""
    ground_truth: str
    """The reference answer, compared by the rule-based reward (docs/dapo.md §6)."""
    data_source: str = DEFAULT_DATA_SOURCE
    """Name of the data source; in verl it selects the reward function."""

    @property
    def prompt_text(self) -> str:
        """The content of the last user message."""
        return next(m["content"] for m in reversed(self.messages) if m["role"] == "user")


# ---------------------------------------------------------------------------------------------- load


def load_problems(path: str | Path, *, dedupe: bool = True, limit: int | None = None) -> list[Problem]:
    """Load problems from a `.parquet` (DAPO schema), `.jsonl` or `.json` (a list of rows) file.

    JSON rows hold either `prompt` (a string or a list of chat messages) and `answer` (or
    `ground_truth`), or the DAPO schema (`prompt`, `reward_model.ground_truth`, optional `data_source`).
    With `dedupe`, rows repeating an earlier (messages, ground truth) pair are dropped, keeping the first
    occurrence in file order (the published DAPO-Math-17k parquet repeats each problem ~100x).
    `limit` keeps the first `limit` problems after de-duplication. Rows in error messages are 1-based
    (for JSONL, the line number). Raises `DataError` on malformed input or an unknown extension.
    """
    path = Path(path)
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be a positive integer or None, got {limit!r}")
    return _collect(_validated(path, _rows(path, dedupe=dedupe, all_columns=False), dedupe=dedupe), limit)


def iter_problem_rows(
    path: str | Path, *, dedupe: bool = True, limits: ReadLimits | None = None
) -> Iterator[tuple[Problem, dict[str, Any]]]:
    """Each problem of a dataset file with its row as stored (every column), streamed in file order.

    The same validation, de-duplication and `Problem.index` as `load_problems`, so an index read here is
    the `problem_index` of a run's samples. Raises `DataError` at the first malformed row and, at the end,
    when the file holds no rows, and `dapo.data.limits.LimitExceeded` as soon as the file passes one of
    `limits` (checked while reading, before a row is built): problems yielded before an error stand, so a
    caller that must not keep part of a file (an import) discards what it got.
    """
    path = Path(path)
    rows = _rows(path, dedupe=dedupe, all_columns=True, limits=limits)
    yield from _validated(path, rows, dedupe=dedupe)


def prompt_messages(prompt: Any) -> list[dict]:
    """The chat messages the trainer builds from a row's `prompt` value (a string or a list of messages):
    a string becomes one user message, each message keeps only `role` and `content`."""
    return _parse_messages("column 'prompt'", prompt)


def _rows(
    path: Path, *, dedupe: bool, all_columns: bool, limits: ReadLimits | None = None
) -> Iterator[tuple[int, Any]]:
    """(1-based row number, row) of a `.parquet`, `.jsonl` or `.json` file; DataError on anything else."""
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    suffix = path.suffix.lower()
    budget = Budget(path, limits) if limits is not None else None
    if suffix == ".parquet":
        return parquet_rows(path, set() if dedupe else None, all_columns=all_columns, budget=budget)
    if suffix == ".jsonl":
        return jsonl_rows(path, budget)
    if suffix == ".json":
        return json_rows(path, budget)
    raise DataError(f"{path}: unknown dataset extension {suffix!r} (expected .parquet, .jsonl or .json)")


def _collect(problems: Iterable[tuple[Problem, Any]], limit: int | None) -> list[Problem]:
    """The first `limit` problems; every row is still validated past `limit`."""
    kept: list[Problem] = []
    for problem, _row in problems:
        if limit is None or len(kept) < limit:
            kept.append(problem)
    return kept


def _validated(path: Path, rows: Iterable[tuple[int, Any]], *, dedupe: bool) -> Iterator[tuple[Problem, Any]]:
    """Validate rows into (problem, row), dropping repeats; DataError at the end when there was no row."""
    seen: set[tuple] = set()
    index = 0
    for row_number, row in rows:
        messages, ground_truth, data_source = _parse_row(path, row_number, row)
        if dedupe:
            key = (tuple((m["role"], m["content"]) for m in messages), ground_truth)
            if key in seen:
                continue
            seen.add(key)
        yield Problem(index, messages, ground_truth, data_source), row
        index += 1
    if index == 0:
        raise DataError(f"{path}: the file holds no rows")


def _parse_row(path: Path, row_number: int, row: Any) -> tuple[list[dict], str, str]:
    """Return (messages, ground truth, data source) of one row of either schema."""
    where = f"{path}: row {row_number}"
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected an object, got {type(row).__name__}")
    for column, value in row.items():
        if jsonsafe.depth(value) >= jsonsafe.MAX_DEPTH:  # the row itself is one level more
            raise DataError(f"{where}: column {column!r} is {jsonsafe.TooDeep(jsonsafe.MAX_DEPTH - 1)}")
    if "prompt" not in row or row["prompt"] is None:
        raise DataError(f"{where}: column 'prompt' is missing")
    messages = _parse_messages(where, row["prompt"])
    if row.get("reward_model") is not None:
        reward_model = row["reward_model"]
        if not isinstance(reward_model, dict) or reward_model.get("ground_truth") is None:
            raise DataError(f"{where}: column 'reward_model.ground_truth' is missing")
        ground_truth = _parse_answer(where, "reward_model.ground_truth", reward_model["ground_truth"])
    else:
        key = next((k for k in _ANSWER_KEYS if row.get(k) is not None), None)
        if key is None:
            raise DataError(f"{where}: column 'answer' is missing (or 'ground_truth', 'reward_model')")
        ground_truth = _parse_answer(where, key, row[key])
    data_source = row.get("data_source")
    if data_source is None:
        data_source = DEFAULT_DATA_SOURCE
    if not isinstance(data_source, str) or not data_source:
        raise DataError(f"{where}: column 'data_source' must be a non-empty string, got {data_source!r}")
    return messages, ground_truth, data_source


def _parse_messages(where: str, prompt: Any) -> list[dict]:
    """A prompt string becomes one user message; a list must hold {role, content} string pairs."""
    if isinstance(prompt, str):
        if not prompt.strip():
            raise DataError(f"{where}: column 'prompt' is empty")
        return [{"role": "user", "content": prompt}]
    if not isinstance(prompt, list) or not prompt:
        raise DataError(
            f"{where}: column 'prompt' must be a string or a non-empty list of messages, "
            f"got {type(prompt).__name__}"
        )
    messages = []
    for i, message in enumerate(prompt):
        if not isinstance(message, dict):
            raise DataError(f"{where}: column 'prompt[{i}]' must be a message object")
        for field in ("role", "content"):
            if not isinstance(message.get(field), str):
                raise DataError(f"{where}: column 'prompt[{i}].{field}' must be a string")
        messages.append({"role": message["role"], "content": message["content"]})
    if not any(m["role"] == "user" for m in messages):
        raise DataError(f"{where}: column 'prompt' has no message with role 'user'")
    return messages


def _parse_answer(where: str, column: str, value: Any) -> str:
    """Ground truths are strings; integers are accepted and written in decimal."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DataError(
            f"{where}: column {column!r} must be a string or an integer, got {type(value).__name__}"
        )
    text = str(value).strip()
    if not text:
        raise DataError(f"{where}: column {column!r} is empty")
    return text


# ------------------------------------------------------------------------------------------ prompts


def render_prompt(tokenizer: Any, problem: Problem) -> str:
    """The prompt text the policy sees: the chat template with the generation prompt, when the tokenizer
    has a template; otherwise the user contents joined by blank lines."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(problem.messages, tokenize=False, add_generation_prompt=True)
    return "\n\n".join(m["content"] for m in problem.messages if m["role"] == "user")


def encode_prompts(tokenizer: Any, problems: Sequence[Problem], max_prompt_length: int) -> list[list[int]]:
    """Token ids of each rendered prompt.

    Policy: prompts are never truncated (a cut prompt is a different problem); a prompt longer than
    `max_prompt_length` tokens raises `DataError` naming the problem index. A chat template already
    writes the special tokens it wants, so the tokenizer adds none; a plain prompt gets the tokenizer's
    own special tokens (e.g. BOS).
    """
    templated = bool(getattr(tokenizer, "chat_template", None))
    encoded = []
    for problem in problems:
        text = render_prompt(tokenizer, problem)
        ids = list(tokenizer(text, add_special_tokens=not templated)["input_ids"])
        if len(ids) > max_prompt_length:
            raise DataError(
                f"problem {problem.index}: prompt is {len(ids)} tokens, longer than "
                f"max_prompt_length={max_prompt_length}"
            )
        encoded.append(ids)
    return encoded


# -------------------------------------------------------------------------------------------- write


def write_parquet(problems: Iterable[Problem], path: str | Path) -> Path:
    """Write problems as a parquet file in the DAPO-Math-17k / verl schema (docs/dapo.md §7)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    rows = [
        {
            "data_source": p.data_source,
            "prompt": [{"content": m["content"], "role": m["role"]} for m in p.messages],
            "ability": DAPO_ABILITY,
            "reward_model": {"ground_truth": p.ground_truth, "style": DAPO_REWARD_STYLE},
            "extra_info": {"index": p.index},
        }
        for p in problems
    ]
    schema = pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
            ("extra_info", pa.struct([("index", pa.int64())])),
        ]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path
