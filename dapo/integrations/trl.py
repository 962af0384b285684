"""TRL on the platform: a ``transformers.TrainerCallback`` that streams a GRPOTrainer run as it trains.

    from dapo.integrations.trl import PlatformCallback

    args = GRPOConfig(..., log_completions=True)          # the samples come from TRL's completion logs
    trainer = GRPOTrainer(..., args=args, callbacks=[PlatformCallback(url=URL, token=TOKEN, name="my run")])

On train begin it creates an external run (source "trl") holding TRL's config (``args.to_dict()``); every
``on_log`` sends the logged metrics at ``state.global_step`` (names mapped onto ours by the platform:
``dapo.integrations.names``); each logged step's prompts, completions, per-reward-function rewards and
advantages become the step's samples; train end marks the run succeeded.

Where the samples come from, and why: with ``log_completions=True`` GRPOTrainer writes, at every logging
step, the table it also sends to W&B and trackio: ``<output_dir>/completions/completions_<step>.parquet``
with the columns step, prompt, completion, one column per reward function (its own score, before the
weights), any ``log_extra`` columns, and advantage. That file is TRL's public output; the in-memory
``trainer._logs`` holds the same rows but is private, and a callback is not handed the trainer. The file of
a step is written just after its ``on_log`` (``GRPOTrainer.log`` calls the callbacks first), so a step's
samples are sent at the next step boundary, and the last step's at train end. Numeric columns other than
step and advantage are taken as reward functions, in TRL's order, and a sample's reward is their sum
weighted by ``reward_weights``, as TRL's logged ``reward``. Rows come in TRL's order, ``num_generations``
completions per prompt, so a group is ``row // num_generations``. TRL does not judge correctness nor keep
per-token log-probs: those stay "not recorded by TRL".

A process that exits between train begin and train end (an exception, Ctrl-C) marks the run failed on
its way out. A lost server never stops the training: records are buffered and retried with backoff in a
thread, and a warning says so once (``dapo.integrations.sender``). Needs ``transformers`` (and, for the
samples, pandas with pyarrow, which TRL brings).
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from dapo.client import Client
from dapo.integrations.sender import Sender

log = logging.getLogger("dapo.integrations")

SKIPPED_COLUMNS = ("step", "prompt", "completion", "advantage")


def _text(value: Any) -> str:
    """A prompt or completion as text: a string as is; a conversation as "role: content" lines."""
    if isinstance(value, str):
        return value
    try:
        messages = list(value)
    except TypeError:
        return str(value)
    lines = []
    for m in messages:
        if isinstance(m, dict):
            content = m.get("content")
            if not isinstance(content, str):  # multimodal parts: their text
                content = " ".join(str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
            lines.append(f"{m.get('role', '')}: {content}")
        else:
            lines.append(str(m))
    return "\n".join(lines)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _config(args: Any) -> dict[str, Any]:
    """TRL's config as JSON (``args.to_dict()``; values JSON has no form for become their text)."""
    return json.loads(json.dumps(args.to_dict(), default=str))


class PlatformCallback(TrainerCallback):
    """Stream this trainer's run to the platform at ``url`` with ``token`` (default: ``$DAPO_URL`` and
    ``$DAPO_TOKEN``), as an external run named ``name`` (default: ``args.run_name``, else the output
    folder's name)."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        name: str | None = None,
        *,
        tags: tuple[str, ...] = (),
        finish_timeout_s: float = 30.0,
    ) -> None:
        self.name = name
        self.finish_timeout_s = finish_timeout_s
        client = Client(url, token, timeout=10.0)  # checks the token now, before any training
        self.sender = Sender(lambda: client, tags=tuple(tags))
        self._sent_steps: set[int] = set()
        self._completions: Path | None = None
        self._group_size = 1
        self._weights: list[float] = []
        self._said_no_completions = False

    @property
    def run_id(self) -> int | None:
        """The run's id on the platform (None until the server answered)."""
        return self.sender.run_id

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        name = self.name or getattr(args, "run_name", None) or Path(args.output_dir).name or "TRL run"
        self._completions = Path(args.output_dir) / "completions"
        self._group_size = max(1, int(getattr(args, "num_generations", 1) or 1))
        self._weights = [float(w) for w in getattr(args, "reward_weights", None) or []]
        if not getattr(args, "log_completions", False):
            log.warning(
                "dapo: log_completions is off: only metrics are sent (set log_completions=True for samples)"
            )
            self._said_no_completions = True
        self.sender.start(str(name)[:200], "trl", _config(args), int(state.max_steps or 0))
        atexit.register(self._exit_before_the_end)

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        if not state.is_world_process_zero or not logs:
            return
        values = {str(k): _number(v) for k, v in logs.items() if isinstance(v, int | float) and k != "step"}
        if values:
            self.sender.metrics(int(state.global_step), values, time.time())
        self._send_completions(before=int(state.global_step))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self._send_completions(before=int(state.global_step))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        self._send_completions(before=None)
        atexit.unregister(self._exit_before_the_end)
        self.sender.finish("succeeded", timeout_s=self.finish_timeout_s)

    def _exit_before_the_end(self) -> None:
        """The process exits after train begin and before train end (an exception, Ctrl-C): the run is
        marked failed, after what was buffered is sent (for up to ``finish_timeout_s``)."""
        error = "the training process exited before TRL's train end (an exception or an interrupt)"
        self.sender.finish("failed", error=error, timeout_s=self.finish_timeout_s)

    def _send_completions(self, before: int | None) -> None:
        """Send the completion logs of the steps before ``before`` (None: every step) not sent yet."""
        folder = self._completions
        if folder is None or self._said_no_completions or not folder.is_dir():
            return
        for path in sorted(folder.glob("completions_*.parquet")):
            try:
                step = int(path.stem.rsplit("_", 1)[1])
            except ValueError:
                continue
            if step in self._sent_steps or (before is not None and step >= before):
                continue
            try:
                rows = self._rows(path, step)
            except Exception as e:  # a file being written, an unreadable one: skip it, keep training
                log.warning("dapo: could not read %s: %s", path, e)
                continue
            self._sent_steps.add(step)
            self.sender.samples(rows)

    def _rows(self, path: Path, step: int) -> list[dict[str, Any]]:
        import pandas as pd

        frame = pd.read_parquet(path)
        rewards = [
            c for c in frame.columns if c not in SKIPPED_COLUMNS and pd.api.types.is_numeric_dtype(frame[c])
        ]
        rows = []
        for i, record in enumerate(frame.to_dict("records")):
            scores = {c: _number(record[c]) for c in rewards}
            weights = self._weights if len(self._weights) == len(rewards) else [1.0] * len(rewards)
            scored = [w * v for w, v in zip(weights, scores.values(), strict=True) if v is not None]
            if not scored:  # every reward function returned None: TRL trains nothing on it either
                continue
            rows.append(
                {
                    "step": step,
                    "index": i,
                    "group": i // self._group_size,
                    "prompt": _text(record.get("prompt")),
                    "completion": _text(record.get("completion")),
                    "rewards": scores,
                    "reward": sum(scored),  # TRL's reward: the weighted sum, None scores left out (nansum)
                    "advantage": _number(record.get("advantage")),
                }
            )
        return rows
