"""The policy's model code: what a learner computes and keeps.

actor.py          one policy: its model, rollout engine, optimiser and the update of paper eq. 8
modeling.py       loading the policy and per-token log-probs of responses
shared_prompt.py  log-probs when many responses share one prompt (the prompt runs once)
families.py       what a model's config says about its family: windows, soft caps, trainability (no torch)
paths.py          which fast path runs for the loaded policy and why: the run log's lines at start
head_chunks.py    log-probs and entropy through the LM head, a chunk of positions at a time
microbatch.py     which rows go through the model together (by rows or by a token budget)
fsdp.py           FSDP2 sharding of the policy over learners
memory_plan.py    per-GPU memory of a run before launch (no torch)
checkpoint.py     resumable checkpoints
export.py         a checkpoint out as a HuggingFace model folder (``python -m dapo.learner.export``)
"""
