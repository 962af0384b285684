"""The hf engine's own behaviour beyond the shared contract: compaction, chunking, weight sharing."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from dapo.rollout import SamplingParams, create_engine
from dapo.rollout.hf import left_pad

PROMPTS = [[1, 5, 9], [1, 7], [1, 10, 11, 12, 13, 14], [1]]
GREEDY = SamplingParams(n=3, top_k=1, max_new_tokens=12)


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=16,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).eval()


def engine(model, **options):
    # with 16 tokens and EOS = {2, 3} greedy rows finish at different steps: compaction is exercised
    return create_engine("hf", model=model, eos_token_ids=[2, 3], pad_token_id=0, **options)


def run(eng, params=GREEDY):
    return [(c.token_ids, c.logprobs, c.finish_reason) for c in eng.generate(PROMPTS, params)]


def test_left_pad_counts_positions_over_real_tokens_only():
    ids, mask, pos = left_pad([[7, 8, 9], [5]], pad_token_id=0, device=torch.device("cpu"))
    assert ids.tolist() == [[7, 8, 9], [0, 0, 5]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert pos.tolist() == [[0, 1, 2], [0, 0, 0]]


VARIANTS = [
    {"compact_threshold": 0.0},  # drop rows at every EOS
    {"compact_threshold": 1.0},  # never drop rows: finished rows are fed pad
    {"fast_decode": False},  # the transformers forward instead of the fast decode path (the CPU default)
    {"fast_decode": False, "compact_threshold": 0.0},
    {"fast_decode": False, "compact_threshold": 1.0},
    {"fast_decode": False, "kv_buffer": False},  # transformers' own concatenating DynamicCache
    {"fast_decode": False, "attn_implementation": "sdpa"},
]


@pytest.mark.parametrize("options", VARIANTS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_every_decoding_variant_gives_the_same_greedy_samples(model, options):
    default = run(engine(model))
    assert {reason for _, _, reason in default} == {"eos", "length"}  # rows did finish early
    variant = run(engine(model, **options))
    assert [c[0] for c in variant] == [c[0] for c in default]
    for (_, lp_v, _), (_, lp_d, _) in zip(variant, default, strict=True):
        torch.testing.assert_close(torch.tensor(lp_v), torch.tensor(lp_d), atol=1e-5, rtol=0)


def test_generation_restores_the_models_attention_implementation(model):
    before = model.config._attn_implementation
    run(engine(model, attn_implementation="eager" if before != "eager" else "sdpa", fast_decode=False))
    assert model.config._attn_implementation == before


def test_max_batch_size_chunks_without_changing_greedy_outputs(model):
    whole = run(engine(model))
    assert [c[0] for c in run(engine(model, max_batch_size=4))] == [c[0] for c in whole]
    assert [c[0] for c in run(engine(model, max_batch_size=1))] == [c[0] for c in whole]  # n > max


def test_update_weights_with_the_shared_models_own_state_is_a_no_op(model, monkeypatch):
    eng = engine(model)
    monkeypatch.setattr(model, "load_state_dict", lambda *a, **k: pytest.fail("copied its own weights"))
    eng.update_weights(model.state_dict())


def test_update_weights_rejects_unknown_names(model):
    eng = engine(model)
    with pytest.raises(ValueError, match="unknown parameter names"):
        eng.update_weights({"not.a.weight": torch.zeros(1)})


def test_a_training_model_is_sampled_in_eval_mode_and_given_back_training(model):
    model.train()
    try:
        assert run(engine(model)) == run(engine(model))
        assert model.training
    finally:
        model.eval()


def test_an_empty_prompt_is_rejected(model):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        engine(model).generate([[1], []], GREEDY)


def test_update_weights_streams_pairs_copying_each_before_taking_the_next(model):
    import copy

    target, source = copy.deepcopy(model), copy.deepcopy(model)
    with torch.no_grad():
        for p in source.parameters():
            p.add_(1.0)
    own = target.state_dict()
    copied_before_next: list[bool] = []

    def pairs():
        previous = None
        for name, tensor in source.state_dict().items():
            if previous is not None:  # the engine asks for this pair only after storing the previous one
                copied_before_next.append(torch.equal(own[previous[0]], previous[1]))
            previous = (name, tensor)
            yield name, tensor.clone()  # a fresh tensor per layer, like an FSDP gather

    eng = engine(target)
    eng.update_weights(pairs())
    assert copied_before_next and all(copied_before_next)
    for name, tensor in source.state_dict().items():
        torch.testing.assert_close(own[name], tensor, rtol=0, atol=0)
    assert run(eng) == run(engine(source))


def test_update_weights_from_pairs_checks_names_shapes_and_completeness(model):
    import copy

    target = copy.deepcopy(model)
    pairs = list(model.state_dict().items())
    eng = engine(target)
    with pytest.raises(ValueError, match=r"missing parameters \['lm_head.weight'\]"):
        eng.update_weights((n, t) for n, t in pairs if n != "lm_head.weight")
    with pytest.raises(ValueError, match="unknown parameter names"):
        eng.update_weights(iter([*pairs, ("not.a.weight", torch.zeros(1))]))
    with pytest.raises(ValueError, match=r"model.norm.weight has shape \(3,\), the model's is \(64,\)"):
        eng.update_weights([*pairs[:-1], ("model.norm.weight", torch.zeros(3))])
    eng.update_weights(pairs)  # every name once: accepted
