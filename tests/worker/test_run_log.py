"""The run log: the worker tees its stdout and stderr into one file per run while the run trains."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from worker.run_log import capture


def test_capture_keeps_print_logging_c_level_and_subprocess_output_and_still_forwards_it(tmp_path, capfd):
    path = tmp_path / "run-logs" / "7.log"
    handler = logging.StreamHandler(sys.__stderr__)  # as Celery logs: to the process's standard error
    logging.getLogger("dapo.trainer").addHandler(handler)
    with capture(path, "run 7, attempt 1", fresh=True):
        print("a print", flush=True)
        logging.getLogger("dapo.trainer").warning("a warning from the trainer")
        os.write(2, b"written straight to fd 2\n")
        subprocess.run([sys.executable, "-c", "print('from a subprocess')"], check=True)
    logging.getLogger("dapo.trainer").removeHandler(handler)
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("===== ") and lines[0].endswith("run 7, attempt 1 =====")
    for line in ("a print", "written straight to fd 2", "from a subprocess"):
        assert line in lines
    assert "a warning from the trainer" in text
    out, err = capfd.readouterr()  # the worker's own log still gets everything
    assert "a print" in out and "from a subprocess" in out and "written straight to fd 2" in err
    print("after the run")  # the descriptors are restored: nothing more reaches the run's log
    assert "after the run" not in path.read_text()


def test_a_second_attempt_appends_and_a_first_starts_over(tmp_path):
    path = tmp_path / "3.log"
    path.write_text("left by a deleted run whose id was reused\n")
    with capture(path, "attempt 1", fresh=True):
        print("one", flush=True)
    with capture(path, "attempt 2"):
        print("two", flush=True)
    text = path.read_text()
    assert "reused" not in text and text.index("one") < text.index("attempt 2") < text.index("two")


def test_the_log_stops_at_its_size_limit_and_says_so(tmp_path, capfd):
    path = tmp_path / "9.log"
    with capture(path, "attempt 1", fresh=True, max_bytes=1000):
        for i in range(200):
            print(f"line {i:04d}", flush=True)
    text = path.read_text()
    header = len(text.splitlines()[0]) + 1
    note = "\n[run log: size limit reached; the rest is in the worker's log]\n"
    assert len(text.encode()) - header == 1000 + len(note) and text.endswith(note)
    assert "line 0199" in capfd.readouterr().out
