"""Rollout tests run torch single-threaded: their models are tiny, and on a shared 2-core machine
OpenMP threads waiting on each other made a 3-row decode step 10-20x slower than one thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="package")
def single_torch_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
