"""One decoder pass per distinct prompt gives the packed batch's log-probs, entropies and gradients."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch

from dapo.learner.actor import PolicyActor, UpdateBatch
from dapo.learner.modeling import pack, response_logprobs
from dapo.learner.shared_prompt import shared_prompt_logprobs, shared_prompt_reason, shares_prompts


def groups(vocab: int, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """3 prompts of 5-12 tokens, 4 responses of 1-7 tokens each (rows of a group contiguous)."""
    rng = random.Random(seed)
    prompts, responses = [], []
    for _ in range(3):
        prompt = [rng.randrange(7, vocab) for _ in range(rng.choice([5, 9, 12]))]
        for _ in range(4):
            prompts.append(prompt)
            responses.append([rng.randrange(7, vocab) for _ in range(rng.choice([1, 3, 7]))])
    return prompts, responses


def test_shared_prompts_give_the_packed_log_probs_entropies_and_gradients(tiny_config):
    actor = PolicyActor(tiny_config)
    model = actor.model.train()
    prompts, responses = groups(model.config.vocab_size)
    assert shares_prompts(model, prompts) and not shares_prompts(model, prompts[::4])  # distinct: no gain
    original = getattr(model.config, "layer_types", None)
    model.config.layer_types = ["full_attention"] * (model.config.num_hidden_layers - 1) + [
        "sliding_attention"
    ]
    model.config.sliding_window = 8  # a Qwen-style config: one sliding layer
    assert not shares_prompts(model, prompts)
    model.config.layer_types, model.config.sliding_window = original, None
    weights = torch.randn(len(prompts), max(map(len, responses)))  # a loss that weighs every position

    packed = pack(prompts, responses, actor.pad_id, actor.device)
    want_lp, want_ent = response_logprobs(model, packed, temperature=0.7, with_entropy=True)
    ((want_lp + want_ent) * weights).sum().backward()
    want_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    lp, ent, mask = shared_prompt_logprobs(
        model, prompts, responses, actor.pad_id, actor.device, temperature=0.7, with_entropy=True
    )
    ((lp + ent) * weights).sum().backward()
    assert torch.equal(mask, packed.response_mask)
    torch.testing.assert_close(lp, want_lp, rtol=0, atol=1e-5)
    torch.testing.assert_close(ent, want_ent, rtol=0, atol=1e-5)
    assert (lp[mask == 0] == 0).all() and (lp[mask > 0] < 0).all()
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want_grads[name], rtol=1e-4, atol=1e-5, msg=name)
    assert max(g.abs().max().item() for g in want_grads.values()) > 1e-2  # real gradients, not zeros


def test_an_update_of_groups_matches_one_without_prompt_sharing(tiny_config, monkeypatch):
    c = replace(tiny_config, optim=replace(tiny_config.optim, micro_batch_size=5))
    shared, plain = PolicyActor(c), PolicyActor(c)
    prompts, responses = groups(shared.model.config.vocab_size, seed=1)
    rng = random.Random(2)
    batch = UpdateBatch(
        prompts=prompts,
        responses=responses,
        advantages=[rng.uniform(-1, 1) for _ in prompts],
        old_logprobs=[[] for _ in prompts],
        loss_mask=[i != 6 for i in range(len(prompts))],
        minibatch=[0] * len(prompts),
        minibatch_tokens={0: sum(len(r) for i, r in enumerate(responses) if i != 6)},
        minibatch_seqs={0: len(prompts) - 1},
        ratio_rows=[],
        old_is_current=True,
    )
    got, _, got_ent, _ = shared.update(batch)
    monkeypatch.setattr("dapo.learner.actor.shares_prompts", lambda *_: False)
    want, _, want_ent, _ = plain.update(batch)
    for key in ("actor/pg_loss", "actor/entropy_update", "actor/grad_norm"):
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), key
    for row in want_ent:
        assert got_ent[row] == pytest.approx(want_ent[row], abs=1e-5)
    for (name, p), q in zip(plain.model.named_parameters(), shared.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=0, atol=5e-5, msg=name)


def tiny(config_class, model_class, **options):
    """A 2-layer random model of a family, hidden 32, on the rows of ``groups`` (vocabulary 64)."""
    config = config_class(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=0,
        **options,
    )
    torch.manual_seed(0)
    return model_class(config).eval()


def windowed_models():
    """Families whose config slides a window over every layer without ``layer_types`` (window 8, less
    than the rows of ``groups``)."""
    import transformers as t

    return {
        "mistral": tiny(t.MistralConfig, t.MistralForCausalLM, sliding_window=8),
        "mixtral": tiny(t.MixtralConfig, t.MixtralForCausalLM, sliding_window=8, num_local_experts=2),
        "phi3": tiny(t.Phi3Config, t.Phi3ForCausalLM, sliding_window=8),
        "starcoder2": tiny(t.Starcoder2Config, t.Starcoder2ForCausalLM, sliding_window=8),
    }


@pytest.mark.parametrize("family", ["mistral", "mixtral", "phi3", "starcoder2"])
def test_a_sliding_window_without_layer_types_takes_the_packed_path(family):
    """The prompt pass would hand back a cache cut to the window, read as the whole prompt: rows were off
    by nats. The window must decline the shared-prompt path, whichever form the config gives it."""
    model = windowed_models()[family]
    prompts, _ = groups(64)
    assert not shares_prompts(model, prompts)
    assert "sliding attention window of 8 tokens" in shared_prompt_reason(model)


def test_mistral_without_a_window_still_shares_prompts_exactly():
    import transformers as t

    model = tiny(t.MistralConfig, t.MistralForCausalLM, sliding_window=None)
    prompts, responses = groups(64)
    assert shares_prompts(model, prompts) and shared_prompt_reason(model) is None
    with torch.no_grad():
        want, _ = response_logprobs(model, pack(prompts, responses, 0, torch.device("cpu")))
        got, _, _ = shared_prompt_logprobs(model, prompts, responses, 0, torch.device("cpu"))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
