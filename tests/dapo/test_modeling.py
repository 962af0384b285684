"""Chunked response log-probs: the same values, entropies and gradients as the full-logits computation
(a copy of the original implementation below is the slow reference), and no (B, T, V) tensor at a real
vocabulary."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from dapo.algo.loss import entropy_from_logits
from dapo.learner.modeling import PackedBatch, pack, response_logprobs

CPU = torch.device("cpu")


def reference_logprobs(model, batch: PackedBatch, *, temperature: float = 1.0, with_entropy: bool = False):
    """The original full-logits implementation, kept verbatim as the reference."""
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        use_cache=False,
    )
    width_t = batch.response_mask.shape[1]
    p = batch.prompt_width
    logits = out.logits[:, p - 1 : p - 1 + width_t].float() / temperature  # (B, T, V)
    targets = batch.input_ids[:, p : p + width_t]  # (B, T)
    log_norm = torch.logsumexp(logits, dim=-1)  # (B, T)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_norm
    logp = logp * batch.response_mask
    entropy = entropy_from_logits(logits) * batch.response_mask if with_entropy else None
    return logp, entropy


class LargestTensor(TorchDispatchMode):
    """Records the largest element count of any tensor an operator returns (forward and backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.max_numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.max_numel = max(self.max_numel, t.numel())
        return out


def qwen2(vocab: int = 300, hidden: int = 32, *, tied: bool = False, seed: int = 0, **extra):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=tied,
        **extra,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).eval()


def batch_of(vocab: int, prompt_lens, response_lens, seed: int = 1) -> PackedBatch:
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(1, vocab, (n,), generator=g).tolist() for n in prompt_lens]
    responses = [torch.randint(1, vocab, (n,), generator=g).tolist() for n in response_lens]
    return pack(prompts, responses, pad_id=0, device=CPU)


BATCH = ((3, 7, 5, 4), (9, 2, 6, 0))  # uneven prompts and responses, one response empty: 17 tokens


def grads_of(model, fn, batch: PackedBatch, weights: tuple[torch.Tensor, torch.Tensor]) -> dict:
    """Gradients of Σ w1·logp + Σ w2·entropy (both terms reach the head and the decoder)."""
    model.zero_grad(set_to_none=True)
    logp, entropy = fn(model, batch)
    ((logp * weights[0]).sum() + (entropy * weights[1]).sum()).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("chunk", [1, 4, 5, 16, 17, 1024])
@pytest.mark.parametrize("tied", [False, True])
def test_values_and_entropy_match_the_full_logits_for_any_chunk_size(chunk, tied):
    model, batch = qwen2(tied=tied), batch_of(300, *BATCH)
    with torch.no_grad():
        want_lp, want_ent = reference_logprobs(model, batch, temperature=0.7, with_entropy=True)
        got_lp, got_ent = response_logprobs(
            model, batch, temperature=0.7, with_entropy=True, chunk_tokens=chunk
        )
    assert got_ent is not None and want_ent is not None
    assert got_lp.shape == want_lp.shape == (4, 9)
    torch.testing.assert_close(got_lp, want_lp, rtol=0, atol=1e-5)
    torch.testing.assert_close(got_ent, want_ent, rtol=0, atol=1e-5)
    assert bool((got_lp[batch.response_mask == 0] == 0).all())
    assert float(got_ent[batch.response_mask > 0].min()) > 0.0


class WrappedHead(torch.nn.Module):
    """A head that is not a plain ``nn.Linear``: the chunks go through autograd under checkpointing."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.linear = linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def with_head(model, kind: str):
    if kind == "bias":
        model.lm_head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True)
    elif kind == "wrapped":
        model.lm_head = WrappedHead(model.lm_head)
    return model


@pytest.mark.parametrize("chunk", [3, 8, 1024])
@pytest.mark.parametrize("kind", ["linear", "bias", "wrapped"])
def test_gradients_match_the_full_logits_with_recomputed_chunks(chunk, kind):
    model, batch = with_head(qwen2(), kind), batch_of(300, *BATCH)
    g = torch.Generator().manual_seed(2)
    weights = (torch.randn(4, 9, generator=g), torch.randn(4, 9, generator=g))
    reference = lambda m, b: reference_logprobs(m, b, temperature=1.3, with_entropy=True)  # noqa: E731
    want = grads_of(model, reference, batch, weights)
    got = grads_of(
        model,
        lambda m, b: response_logprobs(m, b, temperature=1.3, with_entropy=True, chunk_tokens=chunk),
        batch,
        weights,
    )
    assert set(got) == set(want) and any(name.startswith("lm_head.") for name in got)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5, msg=name)


def test_gradients_without_entropy_and_through_a_soft_cap_match(gemma2):
    batch = batch_of(256, *BATCH)
    weights = (torch.randn(4, 9, generator=torch.Generator().manual_seed(3)), torch.zeros(4, 9))

    def logp_only(fn, **kw):
        return lambda m, b: (fn(m, b, **kw)[0], torch.zeros(4, 9))

    for model in (gemma2, qwen2(vocab=256)):
        want = grads_of(model, logp_only(reference_logprobs, temperature=0.8), batch, weights)
        got = grads_of(model, logp_only(response_logprobs, temperature=0.8, chunk_tokens=5), batch, weights)
        for name in want:
            torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5, msg=name)
    want = grads_of(gemma2, lambda m, b: reference_logprobs(m, b, with_entropy=True), batch, weights[::-1])
    got = grads_of(
        gemma2, lambda m, b: response_logprobs(m, b, with_entropy=True, chunk_tokens=5), batch, weights[::-1]
    )
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.fixture
def gemma2():
    """A tiny Gemma2: its head soft-caps the logits (final_logit_softcapping=2, so the cap bites)."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    config = Gemma2Config(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        final_logit_softcapping=2.0,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return Gemma2ForCausalLM(config).eval()


def test_a_head_bias_and_logit_soft_capping_are_applied(gemma2):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    gemma, config = gemma2, gemma2.config
    biased = qwen2(vocab=256)
    biased.lm_head = torch.nn.Linear(32, 256, bias=True)
    batch = batch_of(256, *BATCH)
    for model in (gemma, biased):
        with torch.no_grad():
            want = reference_logprobs(model, batch, with_entropy=True)
            got = response_logprobs(model, batch, with_entropy=True, chunk_tokens=5)
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=1e-5)
        torch.testing.assert_close(got[1], want[1], rtol=0, atol=1e-5)
    # the cap matters: without it the values differ
    uncapped = Gemma2ForCausalLM(Gemma2Config(**{**config.to_dict(), "final_logit_softcapping": None}))
    uncapped.load_state_dict(gemma.state_dict())
    with torch.no_grad():
        assert not torch.allclose(reference_logprobs(uncapped.eval(), batch)[0], want[0], atol=1e-3)


def test_without_entropy_it_returns_none_and_the_same_log_probs():
    model, batch = qwen2(), batch_of(300, *BATCH)
    with torch.no_grad():
        logp, entropy = response_logprobs(model, batch, chunk_tokens=4)
        torch.testing.assert_close(logp, reference_logprobs(model, batch)[0], rtol=0, atol=1e-5)
    assert entropy is None


def test_all_empty_responses_give_zeros_and_still_reach_every_parameter():
    model, batch = qwen2(), batch_of(300, (3, 5), (0, 0))
    logp, entropy = response_logprobs(model, batch, with_entropy=True)
    assert entropy is not None and logp.shape == (2, 1)
    assert float(logp.detach().abs().sum()) == 0.0 and float(entropy.detach().abs().sum()) == 0.0
    (logp.sum() + entropy.sum()).backward()
    assert all(p.grad is not None for p in model.parameters())


def test_a_ddp_wrapped_model_gives_the_same_values_and_gradients(tmp_path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model, batch = qwen2(), batch_of(300, *BATCH)
        weights = (torch.ones(4, 9), torch.full((4, 9), 0.5))
        fn = lambda m, b: response_logprobs(m, b, with_entropy=True, chunk_tokens=4)  # noqa: E731
        want = grads_of(model, lambda m, b: reference_logprobs(m, b, with_entropy=True), batch, weights)
        ddp = DistributedDataParallel(model)
        ddp.zero_grad(set_to_none=True)
        logp, entropy = fn(ddp, batch)
        ((logp * weights[0]).sum() + (entropy * weights[1]).sum()).backward()
        for name, p in model.named_parameters():
            torch.testing.assert_close(p.grad, want[name], rtol=1e-4, atol=1e-5, msg=name)
    finally:
        dist.destroy_process_group()


def test_no_full_vocabulary_tensor_exists_at_qwen25_vocabulary():
    """Qwen2.5's 151,936 tokens on a small Qwen2 body, 3 x (16 prompt + 120 response) tokens: the full
    (B, T, V) logits would hold 55M elements; with 128-token chunks no tensor, forward or backward,
    exceeds 128 x V (the embedding's own gradient, V x 64, is smaller)."""
    vocab, chunk = 151_936, 128
    model = qwen2(vocab=vocab, hidden=64, tied=True)
    batch = batch_of(vocab, (16, 12, 9), (120, 90, 100))
    full = 3 * 120 * vocab
    with LargestTensor() as probe:
        with torch.no_grad():
            response_logprobs(model, batch, with_entropy=True, chunk_tokens=chunk)
    assert probe.max_numel <= chunk * vocab
    with LargestTensor() as probe:
        logp, entropy = response_logprobs(model, batch, with_entropy=True, chunk_tokens=chunk)
        (logp.sum() + entropy.sum()).backward()
    assert probe.max_numel <= chunk * vocab < full / 2
    assert model.lm_head.weight.grad is not None and float(model.lm_head.weight.grad.abs().sum()) > 0


def test_the_probe_sees_the_full_logits_of_the_reference():
    model, batch = qwen2(), batch_of(300, *BATCH)
    with LargestTensor() as probe, torch.no_grad():
        reference_logprobs(model, batch, with_entropy=True)
    assert probe.max_numel >= 4 * 9 * 300
    with LargestTensor() as probe, torch.no_grad():
        response_logprobs(model, batch, with_entropy=True, chunk_tokens=4)
    assert probe.max_numel < 4 * 9 * 300
