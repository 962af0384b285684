"""The trainer's loop and what it hands out each step.

runner.py         the one entry point: ``run(config, out_dir=..., sinks=...)``
trainer.py        the loop: generate, reward, filter, advantage, update, log; each phase timed
batching.py       per-sample bookkeeping of a step: rewards, the update batch, the step's metrics
report.py         the step reports and the sink interface (torch-free)
sinks.py          sinks that ship with dapo: JSONL files and a console progress bar
distributions.py  per-step quantiles of rewards, lengths, advantages, ratios and entropies
hardware.py       what each process of a run uses, sampled every few seconds
timing.py         phase timers
"""
