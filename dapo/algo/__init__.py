"""The algorithm of the DAPO paper as pure functions (torch tensors in, tensors and metrics out).

loss.py       the decoupled-clip policy loss (paper eq. 8) and its aggregation modes
advantage.py  group-relative outcome advantages (GRPO, as DAPO uses them)
sampling.py   dynamic sampling: keep groups with a reward signal, across generation rounds
explain.py    the loss terms of one token in plain Python, for the rollout inspector (no torch)
"""
