"""Micro-batch plans: which rows go through the model together (pure; no torch).

A micro-batch is packed to its longest prompt plus its longest response (``dapo.learner.modeling.pack``), so
its cost is rows x padded width. Two ways to cut rows into micro-batches:

* by rows (``max_tokens`` 0): ``max_rows`` consecutive rows at a time (``optim.micro_batch_size``);
* by a token budget (``optim.micro_batch_max_tokens``; verl ``use_dynamic_bsz`` with
  ``ppo_max_token_len_per_gpu``): rows sorted by length, then packed greedily while rows x padded width
  stays within the budget. Similar lengths share a micro-batch, so DAPO's long-tailed responses stop
  padding every short one to the longest; a row longer than the budget alone is its own micro-batch.

The plan changes only how the work is cut: the loss divides by the whole mini-batch's token count, so
any plan gives the same loss and gradient (see ``dapo.algo.loss``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PaddingCount:
    """Token slots of the micro-batches that ran (rows x padded width) and the real tokens in them."""

    slots: int = 0
    tokens: int = 0

    def add(self, prompt_lens: list[int], response_lens: list[int]) -> None:
        self.slots += len(prompt_lens) * padded_width(prompt_lens, response_lens)
        self.tokens += sum(prompt_lens) + sum(response_lens)

    @property
    def fraction(self) -> float:
        """Padded share of the slots: perf/padding_frac."""
        return (self.slots - self.tokens) / self.slots if self.slots else 0.0


def padded_width(prompt_lens: list[int], response_lens: list[int]) -> int:
    """Columns of the packed batch: longest prompt + longest response (at least one response column)."""
    return max(prompt_lens) + max(1, max(response_lens))


def plan_micro_batches(
    prompt_lens: list[int], response_lens: list[int], *, max_rows: int, max_tokens: int = 0
) -> list[list[int]]:
    """Row indices of each micro-batch; together they cover every row once.

    ``max_tokens`` 0: consecutive runs of ``max_rows``. Otherwise: sorted by prompt + response length
    (ties by index), packed greedily while ``rows x padded_width <= max_tokens``.
    """
    n = len(prompt_lens)
    if max_tokens <= 0:
        return [list(range(start, min(start + max_rows, n))) for start in range(0, n, max_rows)]
    order = sorted(range(n), key=lambda i: (prompt_lens[i] + response_lens[i], i))
    plan: list[list[int]] = []
    current: list[int] = []
    width_p = width_t = 0
    for i in order:
        wp, wt = max(width_p, prompt_lens[i]), max(width_t, response_lens[i], 1)
        if current and (len(current) + 1) * (wp + wt) > max_tokens:
            plan.append(current)
            current, wp, wt = [], prompt_lens[i], max(response_lens[i], 1)
        current.append(i)
        width_p, width_t = wp, wt
    if current:
        plan.append(current)
    return plan


def split_to_count(plan: list[list[int]], count: int) -> list[list[int]]:
    """The plan cut into exactly ``count`` micro-batches by halving the one with the most rows, again and
    again (a half of a micro-batch within the budget is within it too).

    Data-parallel learners must run the same number of forward/backward passes per mini-batch (each
    backward all-reduces gradients; under FSDP each forward gathers weights): each learner plans its own
    rows, then all take the largest count. Raises ``ValueError`` when there are fewer rows than ``count``.
    """
    out = [list(mb) for mb in plan]
    if sum(len(mb) for mb in out) < count:
        raise ValueError(f"cannot cut {sum(len(mb) for mb in out)} rows into {count} micro-batches")
    while len(out) < count:
        k = max(range(len(out)), key=lambda j: len(out[j]))
        half = (len(out[k]) + 1) // 2
        out[k : k + 1] = [out[k][:half], out[k][half:]]
    return out
