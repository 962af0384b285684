"""The run log: the worker tees its stdout and stderr into one file per run while the run trains."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

from worker.run_log import capture, duration, say, step_line, validation_line


def test_capture_keeps_print_logging_c_level_and_subprocess_output_and_still_forwards_it(tmp_path, capfd):
    path = tmp_path / "run-logs" / "7.log"
    handler = logging.StreamHandler(sys.__stderr__)  # as Celery logs: to the process's standard error
    logging.getLogger("dapo.loop.trainer").addHandler(handler)
    with capture(path, "run 7, attempt 1", fresh=True):
        print("a print", flush=True)
        logging.getLogger("dapo.loop.trainer").warning("a warning from the trainer")
        os.write(2, b"written straight to fd 2\n")
        subprocess.run([sys.executable, "-c", "print('from a subprocess')"], check=True)
    logging.getLogger("dapo.loop.trainer").removeHandler(handler)
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


def test_a_step_line_has_reward_accuracy_groups_trained_and_generated_with_the_surplus_apart_and_seconds():
    metrics = {
        "critic/score/mean": 0.41234,
        "train/acc/mean": 0.625,
        "train/num_prompts_kept": 16.0,
        "train/num_prompts_generated": 18.0,
        "train/num_prompts_surplus": 2.0,
        "timing_s/step": 12.34,
    }
    assert (
        step_line(12, 60, metrics) == "step 12/60  reward 0.412  acc 0.625  kept 16/18 (+2 surplus)  12.3 s"
    )
    assert step_line(3, 0, {"train/num_prompts_kept": 4.0, "train/num_prompts_generated": 4.0}) == (
        "step 3  reward –  acc –  kept 4/4"
    )


def test_a_validation_line_has_the_overall_means_and_its_seconds_and_none_without_validation():
    metrics = {
        "val/acc/mean@4": 0.55,
        "val/reward/mean@4": 0.1,
        "val/acc/std@4": 0.2,
        "val/demo/acc/mean@4": 0.55,
        "timing_s/testing": 31.2,
    }
    assert (
        validation_line(10, metrics)
        == "validation at step 10: acc/mean@4 0.550  reward/mean@4 0.100  (31.2 s)"
    )
    assert validation_line(11, {"critic/score/mean": 1.0}) is None


def test_say_writes_a_timestamped_line_into_the_run_log(tmp_path):
    path = tmp_path / "run.log"
    with capture(path, "run 1, attempt 1", fresh=True):
        say("start: attempt 1, steps 1-60")
    assert re.search(r"^\[\d\d:\d\d:\d\d\] start: attempt 1, steps 1-60$", path.read_text().splitlines()[1])
    assert duration(5166) == "1h 26m" and duration(3063) == "51m 3s" and duration(42) == "42s"
