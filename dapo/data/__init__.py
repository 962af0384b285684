"""The problems a run trains and validates on.

problems.py  reading the DAPO-Math-17k / verl parquet schema and JSON/JSONL files into problems
stream.py    the seeded, resumable order in which training problems are drawn
jsonsafe.py  JSON from outside with a bound on nesting
readers.py   the rows of a parquet, JSONL or JSON file, streamed within the read limits
limits.py    those limits: rows, characters per field, decompressed bytes
demo.py      the demo task built locally: arithmetic problems, a tokenizer and a tiny Llama
"""

from __future__ import annotations

from dapo.data.problems import (
    DataError,
    Problem,
    encode_prompts,
    iter_problem_rows,
    load_problems,
    prompt_messages,
    render_prompt,
    write_parquet,
)

__all__ = [
    "DataError",
    "Problem",
    "encode_prompts",
    "iter_problem_rows",
    "load_problems",
    "prompt_messages",
    "render_prompt",
    "write_parquet",
]
