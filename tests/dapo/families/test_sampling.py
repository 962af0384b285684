"""Sampling, per family: the hf engine draws the tokens a plain transformers forward draws at the same
seed, with its log-probs to 1e-5, through its fast decode path where it runs and the transformers forward
otherwise (and always, as the fallback).

The reference loop runs one uncached forward of each row's whole sequence per step and samples with the
engine's own sampler (`dapo.rollout.logits.sample_tokens`, tested on its own) from one generator seeded
like the engine's, so every random draw lines up; the engine keeps all rows to the end
(``compact_threshold`` 1, as the reference does). A second call with the default compaction (finished
rows dropped from the cache) is held to the same log-probs.
"""

from __future__ import annotations

import pytest
import torch

from dapo.rollout import SamplingParams, create_engine
from dapo.rollout.logits import sample_tokens
from tests.dapo.families.matrix import EOS, PAD, TEMPERATURE, build, plain_logprobs, rows

PARAMS = SamplingParams(n=2, temperature=TEMPERATURE, top_p=0.9, top_k=40, max_new_tokens=10, seed=11)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@torch.no_grad()
def reference_samples(model, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
    """Each row's tokens drawn from the uncached forward, prompt-major, n rows a prompt; rows that
    finished are fed pad (as the engine feeds them) until every row has finished or the cap is hit."""
    generator = torch.Generator().manual_seed(params.seed)
    seqs = [list(p) for p in prompts for _ in range(params.n)]
    out: list[list[int]] = [[] for _ in seqs]
    alive = [True] * len(seqs)
    for _ in range(params.max_new_tokens):
        logits = torch.stack([model(torch.tensor([s])).logits[0, -1] for s in seqs])  # (B, V)
        tokens, _ = sample_tokens(logits, params.temperature, params.top_k, params.top_p, generator)
        for row, token in enumerate(tokens.tolist()):
            seqs[row].append(token if alive[row] else PAD)  # its logits are never read again
            if alive[row]:
                out[row].append(token)
                alive[row] = token != EOS
        if not any(alive):
            break
    return out


@pytest.mark.parametrize("fast", [True, False], ids=["auto", "transformers"])
def test_the_engine_samples_what_the_plain_forward_samples(family, fast):
    model = build(family.name)
    prompts = [p for i, p in enumerate(rows()[0]) if i % 3 == 0]  # the 3 distinct prompts
    engine = create_engine(
        "hf",
        model=model,
        eos_token_ids=[EOS],
        pad_token_id=PAD,
        fast_decode=None if fast else False,
        compact_threshold=1.0,
    )
    if fast:  # the fast path runs exactly for the families it knows, or says why not
        assert (engine.fast_decode_reason is None) == family.fast_decode, engine.fast_decode_reason
    out = engine.generate(prompts, PARAMS)
    assert [c.token_ids for c in out] == reference_samples(model, prompts, PARAMS)
    assert any(len(c.token_ids) + len(prompts[i // 2]) > 8 for i, c in enumerate(out))  # past the windows
    want, _ = plain_logprobs(model, [prompts[i // 2] for i in range(len(out))], [c.token_ids for c in out])
    for completion, logp in zip(out, want, strict=True):
        torch.testing.assert_close(torch.tensor(completion.logprobs), logp, rtol=0, atol=1e-5)


def test_compaction_keeps_the_log_probs_of_the_plain_forward(family):
    model = build(family.name)
    prompts = [p for i, p in enumerate(rows(seed=1)[0]) if i % 3 == 0]
    engine = create_engine("hf", model=model, eos_token_ids=[EOS, *range(5, 15)], pad_token_id=PAD)
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=12, seed=4)
    out = engine.generate(prompts, params)
    assert len({len(c.token_ids) for c in out}) > 1  # rows ended at different steps: some were dropped
    want, _ = plain_logprobs(
        model, [prompts[i // 3] for i in range(len(out))], [c.token_ids for c in out], 1.0
    )
    for completion, logp in zip(out, want, strict=True):
        torch.testing.assert_close(torch.tensor(completion.logprobs), logp, rtol=0, atol=1e-5)
