"""Hardware samples: what each process of a run uses, every ``logging.hardware_interval_s`` seconds.

Every process that works for a run samples itself in a daemon thread: the controller (the trainer's own
process: the Celery run process in the platform, the CLI otherwise) and, on Ray, each learner and rollout
actor. A sample's ``values``:

    cpu_percent        this process's CPU time over the interval, in percent of one core (can pass 100)
    rss_gb             this process's resident memory
    sys_cpu_percent    the whole machine's CPU use (all cores = 100)
    sys_mem_used_gb, sys_mem_total_gb   the machine's memory in use (total minus available) and its total
    gpu_util, gpu_mem_used_gb, gpu_mem_total_gb   only where pynvml (nvidia-ml-py) imports and finds a GPU:
                       the mean utilisation and the summed memory of the GPUs this process may use
                       (CUDA_VISIBLE_DEVICES, else every GPU)

CPU and memory come from /proc and ``os.times`` (Linux; elsewhere the keys are left out). Ray actors put
their samples on a Ray queue that the controller drains (``RayBackend.hardware_samples``); the controller's
monitor hands everything to the sinks (``Sink.on_hardware``) from its thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from dapo.loop.report import HardwareSample

log = logging.getLogger(__name__)
GB = 2**30


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except OSError:
        return None


def _meminfo() -> dict[str, int]:
    text = _read("/proc/meminfo") or ""
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[name] = int(parts[0]) * 1024
    return out


def _rss_bytes() -> int | None:
    for line in (_read("/proc/self/status") or "").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies of the whole machine from /proc/stat."""
    first = (_read("/proc/stat") or "").split("\n", 1)[0].split()
    if not first or first[0] != "cpu":
        return None
    ticks = [int(x) for x in first[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return sum(ticks) - idle, sum(ticks)


class Gpus:
    """The GPUs this process may use, through pynvml; empty when it is missing or finds none."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        try:
            import pynvml  # nvidia-ml-py: on GPU nodes only

            pynvml.nvmlInit()
            self.nvml = pynvml
            count = pynvml.nvmlDeviceGetCount()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            wanted = [v.strip() for v in visible.split(",") if v.strip()] if visible is not None else None
            for i in range(count):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                if wanted is None or str(i) in wanted or _uuid(pynvml, handle) in wanted:
                    self.handles.append(handle)
        except Exception as e:  # no library, no driver, no GPU: sample without GPU figures
            log.debug("no GPU figures: %s", e)
            self.handles = []

    def values(self) -> dict[str, float]:
        if not self.handles:
            return {}
        try:
            util = [self.nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self.handles]
            mem = [self.nvml.nvmlDeviceGetMemoryInfo(h) for h in self.handles]
        except Exception as e:
            log.debug("GPU figures unavailable: %s", e)
            return {}
        return {
            "gpu_util": float(sum(util) / len(util)),
            "gpu_mem_used_gb": sum(m.used for m in mem) / GB,
            "gpu_mem_total_gb": sum(m.total for m in mem) / GB,
        }


def _uuid(nvml: Any, handle: Any) -> str:
    uuid = nvml.nvmlDeviceGetUUID(handle)
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


class ProcessSampler:
    """Samples this process and its machine; CPU figures are over the time since the previous sample."""

    def __init__(self) -> None:
        self.gpus = Gpus()
        self._wall = time.monotonic()
        self._cpu = _own_cpu_s()
        self._ticks = _cpu_ticks()

    def sample(self) -> dict[str, float]:
        wall, cpu, ticks = time.monotonic(), _own_cpu_s(), _cpu_ticks()
        values: dict[str, float] = {}
        if wall > self._wall:
            values["cpu_percent"] = 100.0 * (cpu - self._cpu) / (wall - self._wall)
        if ticks and self._ticks and ticks[1] > self._ticks[1]:
            values["sys_cpu_percent"] = 100.0 * (ticks[0] - self._ticks[0]) / (ticks[1] - self._ticks[1])
        self._wall, self._cpu, self._ticks = wall, cpu, ticks
        rss = _rss_bytes()
        if rss is not None:
            values["rss_gb"] = rss / GB
        mem = _meminfo()
        if "MemTotal" in mem and "MemAvailable" in mem:
            values["sys_mem_used_gb"] = (mem["MemTotal"] - mem["MemAvailable"]) / GB
            values["sys_mem_total_gb"] = mem["MemTotal"] / GB
        values.update(self.gpus.values())
        return values


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


class HardwareMonitor:
    """A daemon thread: every ``interval_s``, this process's sample plus whatever ``collect`` returns (the
    Ray actors' samples) go to ``emit``. An error in a pass is logged and the next pass goes on."""

    def __init__(
        self,
        interval_s: float,
        emit: Callable[[list[HardwareSample]], None],
        *,
        worker: str = "controller",
        collect: Callable[[], list[HardwareSample]] | None = None,
    ) -> None:
        self.interval_s, self.emit, self.worker, self.collect = interval_s, emit, worker, collect
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"hardware-{worker}", daemon=True)

    def start(self) -> HardwareMonitor:
        if self.interval_s > 0:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=max(10.0, self.interval_s))

    def _loop(self) -> None:
        sampler = ProcessSampler()
        while not self._done.wait(self.interval_s):
            try:
                samples = [HardwareSample(time=time.time(), worker=self.worker, values=sampler.sample())]
                if self.collect is not None:
                    samples.extend(self.collect())
                self.emit(samples)
            except Exception:
                log.warning("hardware sample of %s failed", self.worker, exc_info=True)
