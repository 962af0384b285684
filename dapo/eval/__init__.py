"""Measuring a policy: validation during a run and evaluation on its own.

validation.py  n samples per problem of the validation sets, every few steps of a run
evaluate.py    evaluation without training (``python -m dapo.eval.evaluate``)
metrics.py     mean@k, maj@k, pass@k and the rest over n samples per prompt (pure)
"""
