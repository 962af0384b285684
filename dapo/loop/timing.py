"""A phase timer: ``with timer("gen"): ...`` accumulates seconds per phase name."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager


class Timer:
    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.totals[name] += time.perf_counter() - start

    def metrics(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{name}": seconds for name, seconds in self.totals.items()}
