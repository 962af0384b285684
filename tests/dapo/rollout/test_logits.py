"""Vectorised sampling ops: top-k and top-p filters, the exponential-race sampler and its log-probs."""

from __future__ import annotations

import math

import torch

from dapo.rollout.logits import filter_top_k, filter_top_p, sample_tokens

PROBS = torch.tensor([[0.5, 0.3, 0.15, 0.05]])


def test_top_k_keeps_the_k_largest_entries():
    out = filter_top_k(PROBS.log(), 2)
    assert torch.isfinite(out).tolist() == [[True, True, False, False]]
    assert torch.equal(filter_top_k(PROBS.log(), -1), PROBS.log())


def test_top_p_keeps_the_smallest_head_reaching_the_mass():
    keep = lambda p: torch.isfinite(filter_top_p(PROBS.log(), p)).tolist()[0]  # noqa: E731
    assert keep(0.45) == [True, False, False, False]  # 0.5 alone reaches 0.45
    assert keep(0.6) == [True, True, False, False]  # mass above the 2nd token (0.5) < 0.6
    assert keep(0.9) == [True, True, True, False]
    assert keep(1e-6) == [True, False, False, False]  # the argmax always stays


def test_samples_follow_the_distribution_and_return_untruncated_logprobs():
    logits = PROBS.log().expand(40_000, 4)
    gen = torch.Generator().manual_seed(0)
    tokens, logp = sample_tokens(logits, temperature=1.0, top_k=-1, top_p=1.0, generator=gen)
    freq = torch.bincount(tokens, minlength=4).float() / tokens.numel()
    torch.testing.assert_close(freq, PROBS[0], atol=0.01, rtol=0)
    torch.testing.assert_close(logp, PROBS[0].log()[tokens])


def test_truncation_restricts_the_support_but_not_the_reported_logprob():
    logits = PROBS.log().expand(5_000, 4) * 2.0
    gen = torch.Generator().manual_seed(0)
    tokens, logp = sample_tokens(logits, temperature=2.0, top_k=2, top_p=1.0, generator=gen)
    assert set(tokens.tolist()) == {0, 1}
    torch.testing.assert_close(logp, PROBS[0].log()[tokens])  # softmax(logits / T) before truncation


def test_temperature_zero_is_argmax_with_temperature_one_logprobs():
    logits = torch.tensor([[1.0, 3.0, 2.0]])
    tokens, logp = sample_tokens(logits, temperature=0.0, top_k=-1, top_p=1.0, generator=None)
    assert tokens.tolist() == [1]
    assert math.isclose(logp.item(), torch.log_softmax(logits, -1)[0, 1].item(), rel_tol=1e-6)
