"""Dynamic sampling: keep only groups with a reward signal, across generation rounds.

DAPO's constraint 0 < |{o_i : correct}| < G (paper eq. 8, §3.2; docs/dapo.md §4): a group whose
samples all score the same has zero advantage everywhere and contributes no gradient, so it is dropped
and more prompts are generated until the train batch is full.

The trainer's loop, with ``filler = GroupBatchFiller(train_batch_size, G, max_num_gen_batches)``::

    while filler.may_generate_more:          # False once done or once the round limit is hit
        samples = generate_and_score(next_gen_batch)          # gen_batch_size · G records
        keep = keep_groups(metric_values, G)                  # dynamic sampling OFF: [True] * n_groups
        filler.add(samples, keep, acc=[s.acc for s in samples])
    batch = filler.batch()                                    # exactly train_batch_size · G records,
    metrics.update(filler.metrics())                          # or fewer when the round limit was hit

The filler is generic over the per-sample records (any Python objects); it never looks inside them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Generic, TypeVar

import torch

logger = logging.getLogger(__name__)

FILTER_METRICS = ("acc", "score", "seq_reward")
"""What dynamic sampling filters on: correctness before the length penalty (default, the reference's
``acc``), the correctness score, or the sequence reward after the overlong penalty."""

DISCARD_REASONS = ("all_correct", "all_wrong", "no_variance", "surplus")
"""Why a generated group was not trained on (``GroupBatchFiller.group_reasons``):

- ``all_correct`` / ``all_wrong``: dynamic sampling dropped it (its filter metric did not vary) and every
  sample was right / wrong;
- ``no_variance``: dropped with right and wrong samples, its filter metric (``score`` or ``seq_reward``)
  equal all the same;
- ``surplus``: it passed the filter but the batch was already full: the last round's leftovers beyond
  ``train_batch_size``, cut at a group boundary.
"""

T = TypeVar("T")


def keep_groups(values: torch.Tensor | Sequence[float], group_size: int) -> torch.Tensor:
    """Which groups carry a reward signal: True where the group's values are not all equal (std > 0).

    values: (B,) the filter metric per sample, B = num_groups · G, groups contiguous (bools allowed).
    Returns (num_groups,) bool. Equality is tested exactly rather than with a float std, which can be a
    tiny positive number for equal values; a group of size 1 is never kept.
    """
    values = torch.as_tensor(values)
    if values.dim() != 1 or group_size < 1 or values.numel() % group_size != 0:
        raise ValueError(
            f"values must be 1-D with a length divisible by group_size={group_size}, "
            f"got shape {tuple(values.shape)}"
        )
    grouped = values.view(-1, group_size)  # (N, G)
    return (grouped != grouped[:, :1]).any(dim=-1)  # (N,)


class GroupBatchFiller(Generic[T]):
    """Accumulates kept groups across generation rounds until ``train_batch_size`` groups are kept.

    Args:
        train_batch_size: prompts (groups) per training step.
        group_size: G, samples per prompt; records arrive as contiguous groups of G.
        max_num_gen_batches: at most this many generation rounds per step; <= 0 means unlimited.
            When the limit is hit with fewer groups than wanted, the step trains on what it has and a
            warning is logged (the reference raises instead).
        max_num_groups: at most this many groups generated per step (<= 0: unlimited); the limit of
            rounds sized by `RoundSizer`, whose rounds are smaller than ``gen_batch_size``.
    """

    def __init__(
        self, train_batch_size: int, group_size: int, max_num_gen_batches: int = 0, *, max_num_groups: int = 0
    ) -> None:
        if train_batch_size < 1:
            raise ValueError(f"train_batch_size must be >= 1, got {train_batch_size}")
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        self.train_batch_size = train_batch_size
        self.group_size = group_size
        self.max_num_gen_batches = max_num_gen_batches
        self.max_num_groups = max_num_groups
        self._groups: list[list[T]] = []  # kept groups, in arrival order
        self._num_rounds = 0
        self._num_generated = 0  # groups generated
        self._num_all_correct = 0
        self._num_all_wrong = 0
        self._dropped: list[str] = []  # per generated group: "" passed the filter, else the reason

    def add(self, samples: Sequence[T], keep: Sequence[bool], *, acc: Sequence[bool]) -> None:
        """Record one generation round.

        Args:
            samples: num_groups · G records, the G samples of a prompt contiguous.
            keep: (num_groups,) whether to keep each group (``keep_groups(...)``, or all True when
                dynamic sampling is off). A bool tensor is fine.
            acc: (num_groups · G,) correctness of each sample, for the all-correct / all-wrong stats.
        """
        keep = [bool(k) for k in keep]
        acc = [bool(a) for a in acc]
        num_groups = len(keep)
        if len(samples) != num_groups * self.group_size:
            raise ValueError(f"got {len(samples)} samples for {num_groups} groups of {self.group_size}")
        if len(acc) != len(samples):
            raise ValueError(f"got {len(acc)} acc values for {len(samples)} samples")
        G = self.group_size
        for g in range(num_groups):
            group_acc = acc[g * G : (g + 1) * G]
            self._num_all_correct += all(group_acc)
            self._num_all_wrong += not any(group_acc)
            if keep[g]:
                self._groups.append(list(samples[g * G : (g + 1) * G]))
                self._dropped.append("")
            else:
                kind = (
                    "all_correct" if all(group_acc) else "all_wrong" if not any(group_acc) else "no_variance"
                )
                self._dropped.append(kind)
        self._num_rounds += 1
        self._num_generated += num_groups

    @property
    def num_kept(self) -> int:
        """Groups that passed the filter so far (before truncation to ``train_batch_size``)."""
        return len(self._groups)

    @property
    def num_trained(self) -> int:
        """Groups of the training batch: those that passed the filter, up to ``train_batch_size``. The
        metric ``train/num_prompts_kept`` counts these; the rest are ``train/num_prompts_surplus``."""
        return min(len(self._groups), self.train_batch_size)

    @property
    def num_generated(self) -> int:
        """Groups generated so far, kept or not."""
        return self._num_generated

    @property
    def done(self) -> bool:
        """True once at least ``train_batch_size`` groups are kept."""
        return self.num_kept >= self.train_batch_size

    @property
    def _rounds_used_up(self) -> bool:
        return self.max_num_gen_batches > 0 and self._num_rounds >= self.max_num_gen_batches

    @property
    def limit_hit(self) -> bool:
        """True when the round (or group) limit is reached with fewer than ``train_batch_size`` groups
        kept."""
        groups_used_up = self.max_num_groups > 0 and self._num_generated >= self.max_num_groups
        return (self._rounds_used_up or groups_used_up) and not self.done

    @property
    def may_generate_more(self) -> bool:
        """True while another round is both needed (not done) and allowed (round limit not hit)."""
        return not self.done and not self.limit_hit

    def batch(self) -> list[T]:
        """The training batch: the first ``train_batch_size`` kept groups, flattened, groups contiguous.

        The surplus of the last round is discarded at a group boundary. When the round limit was hit,
        returns all kept groups (possibly none) and logs a warning. Raises RuntimeError when called
        while more rounds are still needed and allowed.
        """
        if self.may_generate_more:
            raise RuntimeError(
                f"batch() called with {self.num_kept}/{self.train_batch_size} groups kept "
                f"after {self._num_rounds} rounds; keep generating while may_generate_more"
            )
        if self.limit_hit:
            limit = (
                f"max_num_gen_batches={self.max_num_gen_batches}"
                if self._rounds_used_up
                else f"{self.max_num_groups} groups, max_num_gen_batches x gen_batch_size"
            )
            logger.warning(
                "dynamic sampling hit its limit (%s: %d rounds, %d groups generated) "
                "with %d of %d groups kept; training this step on the %d groups it has",
                limit,
                self._num_rounds,
                self._num_generated,
                self.num_kept,
                self.train_batch_size,
                self.num_kept,
            )
        groups = self._groups[: self.train_batch_size]
        return [sample for group in groups for sample in group]

    def group_reasons(self) -> list[str]:
        """Why each generated group (in arrival order) was not trained on: "" for the groups of
        ``batch()``, else one of ``DISCARD_REASONS``."""
        out, passed = [], 0
        for reason in self._dropped:
            if reason:
                out.append(reason)
                continue
            passed += 1
            out.append("" if passed <= self.train_batch_size else "surplus")
        return out

    def metrics(self) -> dict[str, float]:
        """Per-step stats (docs/dapo.md §4, §10); fractions are over all generated groups;
        ``train/discarded_groups/<reason>`` counts the groups not trained on, by reason;
        ``train/num_gen_batches`` counts rounds (smaller ones under sized rounds: docs/metrics.md);
        ``train/num_prompts_kept`` counts the groups trained on, ``train/num_prompts_surplus`` the groups that
        passed the filter after the batch was full (not trained on)."""
        generated = max(self._num_generated, 1)
        reasons = self.group_reasons()
        discarded = {f"train/discarded_groups/{r}": float(reasons.count(r)) for r in DISCARD_REASONS}
        return {
            **discarded,
            "train/num_gen_batches": float(self._num_rounds),
            "train/num_prompts_generated": float(self._num_generated),
            "train/num_prompts_kept": float(self.num_trained),
            "train/num_prompts_surplus": float(self.num_kept - self.num_trained),
            "train/frac_all_correct": self._num_all_correct / generated,
            "train/frac_all_wrong": self._num_all_wrong / generated,
            "train/gen_limit_hit": float(self.limit_hit),
        }


class RoundSizer:
    """Sizes dynamic sampling's rounds to the groups still missing (``algorithm.adaptive_gen_batch``).

    With fixed rounds every round draws ``gen_batch_size`` prompts, and the groups the last round keeps
    beyond ``train_batch_size`` are thrown away (``surplus``). A sized round draws

        m = ceil(missing / p + margin * sqrt(missing * (1 - p)) / p),   clipped to [1, cap]

    prompts, with p the kept fraction of recent groups (counts decayed by ``decay`` per round, a prior
    of one kept group in one generated, so the first round asks for exactly what is missing) and
    ``margin`` standard deviations of the kept count as a cushion against a further, small round.

    The trained batch is the same in law as with fixed rounds: both are the first ``train_batch_size``
    groups that pass the filter in the order the prompt stream hands them out, all sampled by the same
    policy; only fewer groups are generated for nothing (and fewer prompts are used up per step).
    """

    def __init__(self, cap: int, *, decay: float = 0.9, margin: float = 0.5) -> None:
        if cap < 1:
            raise ValueError(f"cap must be >= 1, got {cap}")
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"decay must be in [0, 1], got {decay}")
        self.cap, self.decay, self.margin = cap, decay, margin
        self.kept = self.generated = 0.0

    @property
    def keep_rate(self) -> float:
        """The estimated fraction of groups that pass the filter, in (0, 1]."""
        return (self.kept + 1.0) / (self.generated + 1.0)

    def size(self, missing: int) -> int:
        """Prompts for the next round when ``missing`` groups are still wanted (``missing`` >= 1)."""
        p = self.keep_rate
        wanted = missing / p + self.margin * math.sqrt(missing * (1.0 - p)) / p
        return max(1, min(self.cap, math.ceil(wanted - 1e-9)))

    def observe(self, kept: int, generated: int) -> None:
        """Record a round: ``kept`` of its ``generated`` groups passed the filter."""
        self.kept = self.decay * self.kept + kept
        self.generated = self.decay * self.generated + generated

    def state_dict(self) -> dict[str, float]:
        return {"kept": self.kept, "generated": self.generated}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.kept, self.generated = float(state["kept"]), float(state["generated"])
