"""The objective explainer of the token view: for each token of a trained sample with token data, what the
DAPO loss did with it at the sample's first optimiser step (dapo.algo.explain, the same formulas as
dapo.algo.loss, on the old and new log-probs the learner recorded and the mini-batch counts of the update).
"""

from __future__ import annotations

import math
from typing import Any

from runs.models import MetricPoint, Run, Sample

from dapo.algo.explain import RULES, token_terms, token_weight
from dapo.runconfig import AlgorithmConfig


def _section(run: Run, name: str) -> dict[str, Any]:
    block = run.config.get(name) if isinstance(run.config, dict) else None
    return block if isinstance(block, dict) else {}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def explain_tokens(run: Run, sample: Sample, clip: dict[str, float | None]) -> dict[str, Any] | None:
    """Per-token terms (``dapo.algo.explain.TokenTerms`` as dicts, None where a log-prob is missing) and the
    context they were computed in; None when the sample has no recorded old and new log-probs (not
    trained, beyond ``logging.token_data_samples_per_step``, or recorded before the explainer existed)."""
    info = sample.update_info if isinstance(sample.update_info, dict) else None
    old, new = sample.token_old_logprobs, sample.token_new_logprobs
    if not info or not isinstance(old, list) or not isinstance(new, list):
        return None
    tokens, seqs = _number(info.get("minibatch_tokens")), _number(info.get("minibatch_seqs"))
    if tokens is None or seqs is None:
        return None
    mode = str(_section(run, "algorithm").get("loss_agg_mode", AlgorithmConfig().loss_agg_mode))
    max_len = _number(_section(run, "rollout").get("max_response_length")) or 1.0
    in_loss = bool(info.get("in_loss", True))
    n = min(len(old), len(new))
    try:
        weight = token_weight(
            mode,
            in_loss=in_loss,
            seq_tokens=n,
            minibatch_tokens=tokens,
            minibatch_seqs=seqs,
            max_len=int(max_len),
        )
    except ValueError:
        return None
    low, high = clip["clip_low"] or 0.0, clip["clip_high"] or 0.0
    terms: list[dict[str, Any] | None] = []
    for o, w in zip(old[:n], new[:n], strict=True):
        o, w = _number(o), _number(w)
        if o is None or w is None:
            terms.append(None)
            continue
        t = token_terms(
            o,
            w,
            sample.advantage or 0.0,  # null only on external runs' samples, which hold no tokens
            clip_low=low,
            clip_high=high,
            clip_c=clip["clip_c"],
            weight=weight,
            in_loss=in_loss,
        )
        terms.append(t.to_dict())
    pg_loss = (
        MetricPoint.objects.filter(run=run, step=sample.step, name="actor/pg_loss")
        .values_list("value", flat=True)
        .first()
    )
    epochs = _section(run, "optim").get("epochs", 1)
    return {
        "terms": terms,
        "mode": mode,
        "weight": weight,
        "in_loss": in_loss,
        "minibatch": info.get("minibatch"),
        "minibatch_tokens": tokens,
        "minibatch_seqs": seqs,
        "seq_tokens": n,
        "max_len": int(max_len),
        "advantage": sample.advantage,
        "sample_share": sum(t["share"] for t in terms if t),
        "pg_loss": pg_loss,
        "epochs": epochs,
        "rules": RULES,
        **clip,
    }
