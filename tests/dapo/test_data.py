"""Loading problems: the DAPO parquet schema, JSON/JSONL variants, and errors that name file, row, column."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

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


def _problem(index: int, content: str, truth: str) -> Problem:
    return Problem(index, [{"role": "user", "content": content}], truth, "math_dapo")


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# --------------------------------------------------------------------------------------- parquet


def test_parquet_round_trip_dedupes_repeated_rows_keeping_first_order(tmp_path: Path) -> None:
    a, b, c = _problem(0, "What is 1+1?", "2"), _problem(1, "What is 2+2?", "4"), _problem(2, "3*3?", "9")
    path = write_parquet([a, b, a, c, b, a], tmp_path / "train.parquet")

    problems = load_problems(path)

    assert [(p.prompt_text, p.ground_truth) for p in problems] == [
        ("What is 1+1?", "2"),
        ("What is 2+2?", "4"),
        ("3*3?", "9"),
    ]
    assert [p.index for p in problems] == [0, 1, 2]
    assert problems[0].messages == a.messages and problems[0].data_source == "math_dapo"
    assert len(load_problems(path, dedupe=False)) == 6
    assert [p.ground_truth for p in load_problems(path, limit=2)] == ["2", "4"]


def test_same_prompt_with_a_different_answer_is_not_a_duplicate(tmp_path: Path) -> None:
    path = write_parquet([_problem(0, "q", "1"), _problem(1, "q", "2")], tmp_path / "d.parquet")
    assert [p.ground_truth for p in load_problems(path)] == ["1", "2"]


def test_written_parquet_has_the_dapo_schema(tmp_path: Path) -> None:
    path = write_parquet([_problem(7, "q", "42")], tmp_path / "d.parquet")
    row = pq.read_table(path).to_pylist()[0]
    assert row == {
        "data_source": "math_dapo",
        "prompt": [{"content": "q", "role": "user"}],
        "ability": "MATH",
        "reward_model": {"ground_truth": "42", "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": 7},
    }


def test_parquet_with_multi_message_prompts_and_integer_truths_loads(tmp_path: Path) -> None:
    rows = [
        {
            "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1"}],
            "reward_model": {"ground_truth": 2},
        },
        {"prompt": [{"role": "user", "content": "1+1"}], "reward_model": {"ground_truth": 2}},
    ] * 3
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    problems = load_problems(tmp_path / "d.parquet")
    assert len(problems) == 2
    assert problems[0].prompt_text == "1+1" and problems[0].ground_truth == "2"
    assert problems[0].messages[0] == {"role": "system", "content": "Be brief."}


def test_parquet_missing_column_is_named(tmp_path: Path) -> None:
    pq.write_table(pa.Table.from_pylist([{"prompt": "q", "answer": "1"}]), tmp_path / "d.parquet")
    with pytest.raises(DataError, match=r"d\.parquet.*'reward_model' is missing"):
        load_problems(tmp_path / "d.parquet")


def test_parquet_bad_row_names_row_and_column(tmp_path: Path) -> None:
    rows = [
        {"prompt": [{"role": "user", "content": "q"}], "reward_model": {"ground_truth": "1"}},
        {"prompt": [{"role": "user", "content": "r"}], "reward_model": {"ground_truth": None}},
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    with pytest.raises(DataError, match=r"d\.parquet: row 2: column 'reward_model\.ground_truth' is missing"):
        load_problems(tmp_path / "d.parquet")


def test_corrupt_parquet_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "d.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match=r"d\.parquet: not a readable parquet file"):
        load_problems(tmp_path / "d.parquet")


# ------------------------------------------------------------------------------------ json, jsonl


def test_jsonl_accepts_string_prompts_message_prompts_and_the_dapo_schema(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "d.jsonl",
        [
            {"prompt": "What is 2+3?", "answer": "5"},
            {"prompt": [{"role": "user", "content": "What is 4+4?"}], "ground_truth": 8},
            {
                "data_source": "aime",
                "prompt": [{"role": "user", "content": "AIME 1"}],
                "reward_model": {"ground_truth": "204", "style": "rule"},
                "extra_info": {"index": "x"},
            },
            {"prompt": "What is 2+3?", "answer": "5"},
        ],
    )
    problems = load_problems(path)
    assert [(p.prompt_text, p.ground_truth, p.data_source) for p in problems] == [
        ("What is 2+3?", "5", "math_dapo"),
        ("What is 4+4?", "8", "math_dapo"),
        ("AIME 1", "204", "aime"),
    ]


def test_blank_jsonl_lines_are_skipped_but_counted(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"prompt": "a", "answer": "1"}\n\n{"prompt": "b"}\n')
    with pytest.raises(DataError, match=r"d\.jsonl: row 3: column 'answer' is missing"):
        load_problems(tmp_path / "d.jsonl")


def test_json_file_holds_a_list_of_rows(tmp_path: Path) -> None:
    (tmp_path / "d.json").write_text(
        json.dumps([{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": 2}])
    )
    assert [p.ground_truth for p in load_problems(tmp_path / "d.json")] == ["1", "2"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "a", "answer": "1"}\n{"prompt": "b"}\n', r"row 2: column 'answer' is missing"),
        ('{"answer": "1"}\n', r"row 1: column 'prompt' is missing"),
        ('{"prompt": 3, "answer": "1"}\n', r"row 1: column 'prompt' must be a string or a non-empty list"),
        ('{"prompt": "", "answer": "1"}\n', r"row 1: column 'prompt' is empty"),
        ('{"prompt": "a", "answer": 1.5}\n', r"row 1: column 'answer' must be a string or an integer"),
        ('{"prompt": "a", "answer": true}\n', r"row 1: column 'answer' must be a string or an integer"),
        ('{"prompt": "a", "answer": "  "}\n', r"row 1: column 'answer' is empty"),
        ('{"prompt": [{"role": "user"}], "answer": "1"}\n', r"row 1: column 'prompt\[0\]\.content' must be"),
        (
            '{"prompt": [{"role": "system", "content": "x"}], "answer": "1"}\n',
            r"row 1: .*no message with role",
        ),
        (
            '{"prompt": "a", "reward_model": {"style": "x"}}\n',
            r"row 1: column 'reward_model\.ground_truth' is missing",
        ),
        ('{"prompt": "a", "answer": "1", "data_source": 5}\n', r"row 1: column 'data_source' must be"),
        ('{"prompt": "a", "answer": "1"}\n{"prompt": "a",\n', r"row 2: bad JSON"),
        ("[1, 2]\n", r"row 1: expected an object, got list"),
        ("", r"the file holds no rows"),
        ("\n\n", r"the file holds no rows"),
    ],
)
def test_malformed_jsonl_names_file_row_and_column(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "bad.jsonl").write_text(content)
    with pytest.raises(DataError, match=r"bad\.jsonl: " + message):
        load_problems(tmp_path / "bad.jsonl")


def test_non_utf8_jsonl_names_the_row(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_bytes(
        b'{"prompt": "a", "answer": "1"}\n{"prompt": "\xff", "answer": "1"}\n'
    )
    with pytest.raises(DataError, match=r"bad\.jsonl: row 2: not valid UTF-8"):
        load_problems(tmp_path / "bad.jsonl")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", r"the file is empty"),
        (b'{"prompt": "a"}', r"expected a JSON list of rows, got dict"),
        (b'[{"prompt": "a",', r"bad JSON at line 1"),
        (b'[\n{"prompt": "\xff"}]', r"line 2: not valid UTF-8"),
        (b'[{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": null}]', r"row 2: column 'answer'"),
    ],
)
def test_malformed_json_names_file_and_row(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "bad.json").write_bytes(content)
    with pytest.raises(DataError, match=r"bad\.json: " + message):
        load_problems(tmp_path / "bad.json")


def test_unknown_extension_and_bad_limit_are_rejected(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("prompt,answer\n")
    with pytest.raises(DataError, match=r"d\.csv: unknown dataset extension '\.csv'"):
        load_problems(tmp_path / "d.csv")
    with pytest.raises(ValueError, match="limit"):
        load_problems(tmp_path / "d.csv", limit=0)


def test_missing_file_is_a_data_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nope\.parquet: no such file"):
        load_problems(tmp_path / "nope.parquet")
    assert issubclass(DataError, ValueError)


# ------------------------------------------------------------------------------- rows as stored


def test_iter_problem_rows_gives_the_indices_of_load_problems_and_every_column(tmp_path: Path) -> None:
    a, b = _problem(0, "What is 1+1?", "2"), _problem(1, "What is 2+2?", "4")
    path = write_parquet([a, b, a, b, _problem(2, "3*3?", "9")], tmp_path / "train.parquet")

    pairs = list(iter_problem_rows(path))

    assert [p for p, _ in pairs] == load_problems(path)
    assert [p.index for p, _ in pairs] == [0, 1, 2]
    assert pairs[2][1]["extra_info"] == {"index": 2}  # columns a problem does not need are kept
    assert pairs[2][1]["ability"] == "MATH"


def test_iter_problem_rows_keeps_a_jsonl_row_as_written(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "d.jsonl", [{"prompt": "q", "answer": 3, "level": 5}])
    [(problem, row)] = iter_problem_rows(path)
    assert row == {"prompt": "q", "answer": 3, "level": 5}
    assert (problem.messages, problem.ground_truth) == ([{"role": "user", "content": "q"}], "3")


def test_iter_problem_rows_raises_at_the_bad_row_after_the_good_ones(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "d.jsonl", [{"prompt": "a", "answer": "1"}, {"prompt": "b"}])
    rows = iter_problem_rows(path)
    assert next(rows)[0].ground_truth == "1"
    with pytest.raises(DataError, match=r"d\.jsonl: row 2: column 'answer' is missing"):
        next(rows)
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(DataError, match=r"e\.jsonl: the file holds no rows"):
        list(iter_problem_rows(tmp_path / "e.jsonl"))


def test_prompt_messages_normalises_like_the_trainer() -> None:
    assert prompt_messages("q") == [{"role": "user", "content": "q"}]
    stored = [{"content": "S", "role": "system", "name": "x"}, {"content": "Q", "role": "user"}]
    assert prompt_messages(stored) == [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    with pytest.raises(DataError, match="no message with role 'user'"):
        prompt_messages([{"role": "system", "content": "S"}])


# ---------------------------------------------------------------------------------------- prompts


class _FakeTokenizer:
    """Records the template call; encodes one id per character."""

    def __init__(self, chat_template: str | None) -> None:
        self.chat_template = chat_template
        self.calls: list[dict] = []

    def apply_chat_template(self, messages: list, *, tokenize: bool, add_generation_prompt: bool) -> str:
        self.calls.append({"tokenize": tokenize, "add_generation_prompt": add_generation_prompt})
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def __call__(self, text: str, *, add_special_tokens: bool) -> dict:
        return {"input_ids": ([0] if add_special_tokens else []) + [ord(c) for c in text]}


def test_render_prompt_applies_the_chat_template_with_a_generation_prompt() -> None:
    tokenizer = _FakeTokenizer("template")
    problem = Problem(0, [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}], "1")
    assert render_prompt(tokenizer, problem) == "<system>S<user>Q<assistant>"
    assert tokenizer.calls == [{"tokenize": False, "add_generation_prompt": True}]


def test_render_prompt_without_a_template_joins_user_contents() -> None:
    problem = Problem(0, [{"role": "user", "content": "A"}, {"role": "user", "content": "B"}], "1")
    assert render_prompt(_FakeTokenizer(None), problem) == "A\n\nB"


def test_encode_prompts_adds_special_tokens_only_without_a_template() -> None:
    problems = [_problem(0, "ab", "1")]
    assert encode_prompts(_FakeTokenizer(None), problems, 10) == [[0, 97, 98]]
    assert encode_prompts(_FakeTokenizer("t"), problems, 20) == [[ord(c) for c in "<user>ab<assistant>"]]


def test_encode_prompts_rejects_a_long_prompt_naming_the_problem() -> None:
    problems = [_problem(0, "ab", "1"), _problem(5, "abcdef", "1")]
    with pytest.raises(DataError, match=r"problem 5: prompt is 7 tokens, longer than max_prompt_length=4"):
        encode_prompts(_FakeTokenizer(None), problems, 4)


def test_prompt_text_is_the_last_user_message() -> None:
    messages = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "x"},
        {"role": "user", "content": "second"},
    ]
    assert Problem(0, messages, "1").prompt_text == "second"
