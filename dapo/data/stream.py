"""The order in which training problems are drawn: seeded epochs, resumable from a small state."""

from __future__ import annotations

import random


class ProblemStream:
    """Yields problem indices epoch after epoch, reshuffled per epoch with ``seed + epoch``.

    Its whole state is (epoch, position), saved in checkpoints, so a resumed run draws the same problems
    as an uninterrupted one.
    """

    def __init__(self, size: int, *, seed: int, shuffle: bool = True) -> None:
        if size < 1:
            raise ValueError("the training set is empty")
        self.size, self.seed, self.shuffle = size, seed, shuffle
        self.epoch, self.position = 0, 0
        self._order = self._make_order()

    def _make_order(self) -> list[int]:
        order = list(range(self.size))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        return order

    def take(self, n: int) -> list[int]:
        out: list[int] = []
        while len(out) < n:
            if self.position >= self.size:
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._make_order()
            chunk = self._order[self.position : self.position + n - len(out)]
            out.extend(chunk)
            self.position += len(chunk)
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._make_order()
