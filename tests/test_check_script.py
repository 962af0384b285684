"""`make test`'s runner (scripts/check.py): the static checks run beside pytest at low priority, their output
after pytest's, and the exit status is pytest's, else the first failing check's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from scripts import check


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def waits_for(flag: Path, then: str, code: int = 0) -> list[str]:
    """A stand-in for pytest that ends only once ``flag`` exists: it proves the checks ran beside it."""
    return python(
        "import pathlib, sys, time\n"
        f"flag = pathlib.Path({str(flag)!r})\n"
        "for _ in range(600):\n"
        "    if flag.exists():\n"
        "        break\n"
        "    time.sleep(0.05)\n"
        "else:\n"
        "    sys.exit(9)\n"
        f"print({then!r})\n"
        f"sys.exit({code})"
    )


def test_the_static_checks_run_beside_pytest_niced_and_print_after_it(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    flag = tmp_path / "niceness"
    steps = [
        (
            "lint",
            python(
                "import os, pathlib\n"
                "print('lint says hi')\n"
                f"pathlib.Path({str(flag)!r}).write_text(str(os.nice(0)))"
            ),
        ),
        ("types", python("import sys; print('a type error'); sys.exit(3)")),
        ("pytest", waits_for(flag, "pytest ran")),
    ]
    assert check.run_checks(steps, dict(os.environ)) == 3  # pytest passed: the first failing check's
    assert int(flag.read_text()) == min(os.nice(0) + check.STATIC_NICE, 19)
    out = capfd.readouterr().out
    order = ["pytest ran", "==== lint (ran beside pytest)", "lint says hi", "a type error", "[check] summary"]
    assert [out.index(text) for text in order] == sorted(out.index(text) for text in order), out
    summary = out[out.index("[check] summary") :]
    assert [line.split()[:2] for line in summary.splitlines()[1:]] == [
        ["ok", "lint"],
        ["FAIL", "types"],
        ["ok", "pytest"],
    ]


def test_a_pytest_failure_is_the_exit_status_and_without_pytest_the_checks_stream_in_turn(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    flag = tmp_path / "flag"
    steps = [
        ("lint", python(f"import pathlib; pathlib.Path({str(flag)!r}).touch(); import sys; sys.exit(2)"))
    ]
    assert (
        check.run_checks([*steps, ("pytest", waits_for(flag, "tests failed", code=1))], dict(os.environ)) == 1
    )
    flag.unlink()
    capfd.readouterr()
    assert check.run_checks([*steps, ("more", python("print('second')"))], dict(os.environ)) == 2
    out = capfd.readouterr().out
    assert "beside pytest" not in out and out.index("==== lint") < out.index("==== more") < out.index(
        "second"
    )
