"""The run's log says, at start, which fast path runs for the model and why the others do not: one line
per decision, from the controller (what the learner decided), before the first step."""

from __future__ import annotations

import logging
from dataclasses import replace

from dapo.cluster.backends import LocalBackend
from dapo.loop.trainer import Trainer


def test_the_run_log_names_every_path_decision_before_the_first_step(tiny_config, tmp_path, caplog):
    config = replace(tiny_config, model=replace(tiny_config.model, gradient_checkpointing=True))
    backend = LocalBackend(config)
    with caplog.at_level(logging.INFO, logger="dapo.loop.trainer"):
        Trainer(config, tmp_path, [], backend=backend)._setup()
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("paths: ")]
    assert said == [f"paths: {line}" for line in backend.path_decisions()] + [said[-1]]
    assert said[0].startswith("paths: model: Llama (LlamaForCausalLM, 1,790,976 parameters")
    assert said[4].startswith("paths: shared-prompt update: off (gradient checkpointing")
    assert said[-1].startswith("paths: old-log-prob shortcut: off (data.train_batch_size 4 > optim.mini")
    backend.close()
