"""Hardware samples: what a process reports of itself, and the samples a real tiny run hands its sinks."""

from __future__ import annotations

import os
import threading
import time

from dapo.loop.hardware import Gpus, HardwareMonitor, ProcessSampler
from dapo.loop.report import Sink
from dapo.loop.runner import run
from dapo.loop.sinks import JsonlSink, read_jsonl


def own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def test_a_sample_reports_this_processs_cpu_and_memory_and_the_machines():
    wall0, cpu0 = time.monotonic(), own_cpu_s()
    sampler = ProcessSampler()
    ballast = bytearray(200 * 2**20)  # 200 MiB this process holds
    ballast[::4096] = b"x" * len(ballast[::4096])  # touched, so resident
    deadline = time.monotonic() + 0.4
    while time.monotonic() < deadline:  # busy: about one core
        pass
    values = sampler.sample()
    expected = 100 * (own_cpu_s() - cpu0) / (time.monotonic() - wall0)  # a shared machine gives less than 100
    assert values["cpu_percent"] > 5 and abs(values["cpu_percent"] - expected) < 15
    assert 0 <= values["sys_cpu_percent"] <= 100
    assert values["rss_gb"] > 0.19
    assert 0 < values["sys_mem_used_gb"] < values["sys_mem_total_gb"]
    del ballast


def test_without_pynvml_there_are_no_gpu_figures():
    assert Gpus().values() == {}  # the CPU lock has no nvidia-ml-py; GPU nodes do


def test_an_interval_of_zero_starts_no_thread():
    got = []
    monitor = HardwareMonitor(0, got.append).start()
    assert not monitor._thread.is_alive()
    monitor.stop()
    assert got == []


class Samples(Sink):
    """Records the samples; each step waits (at most 30 s) for one more sample than the step before saw, so
    that a run of N steps yields at least N samples however fast its steps are on a quiet machine or how
    late the sampling thread gets the CPU on a busy one."""

    def __init__(self):
        self.samples, self.arrived, self.seen = [], threading.Condition(), 0

    def on_hardware(self, samples):
        with self.arrived:
            self.samples.extend(samples)
            self.arrived.notify_all()

    def on_step(self, report):
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.samples) > self.seen, timeout=30)
            self.seen = len(self.samples)


def test_a_tiny_run_hands_its_sinks_the_controllers_samples(tiny_config, tmp_path):
    config = tiny_config.with_overrides(
        {"logging.hardware_interval_s": 0.05, "checkpoint.every_n_steps": 0, "optim.total_steps": 3}
    )
    rec = Samples()
    started = time.time()
    result = run(config, out_dir=tmp_path, sinks=[rec, JsonlSink(tmp_path)])
    assert result.status == "succeeded", result.error
    assert len(rec.samples) >= 3
    assert {s.worker for s in rec.samples} == {"controller"}
    assert all(started <= s.time <= time.time() for s in rec.samples)
    assert all({"cpu_percent", "rss_gb", "sys_mem_used_gb"} <= set(s.values) for s in rec.samples)
    assert max(s.values["rss_gb"] for s in rec.samples) > 0.1  # torch and a model are loaded
    lines = read_jsonl(tmp_path / "hardware.jsonl")
    assert [line["time"] for line in lines] == [s.time for s in rec.samples]
