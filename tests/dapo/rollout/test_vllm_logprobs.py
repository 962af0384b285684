"""The vllm engine returns the log-probs every engine returns: log softmax(logits / T) over the whole
vocabulary, before top-k/top-p truncation (verl's definition), and sends weights in the checkpoint's names.

On CPU, against `vllm_standin.SamplerLLM`, which turns a fixed table of logits into tokens and log-probs as
vLLM 0.33's `Sampler` does in either logprobs_mode. vLLM's own "processed_logprobs" are those of the
truncated, renormalised distribution, which one-step off-policy training would take as the old policy's;
the engine asks for "raw_logprobs" and folds the temperature into the model's `LogitsProcessor.scale`.
"""

from __future__ import annotations

import pytest
import torch

from dapo.rollout import SamplingParams
from tests.dapo.rollout.vllm_standin import STEP_LOGITS, SamplerLLM, install, keep_top_k_top_p, make, received


@pytest.fixture
def vllm_module(monkeypatch):
    """dapo.rollout.vllm against the stand-in, whose LLM samples like vLLM's Sampler."""
    module = install(monkeypatch)
    monkeypatch.setattr(module.vllm, "LLM", SamplerLLM)
    return module


def scales(engine) -> list[float]:
    return [w.get_model().logits_processor.scale for w in engine.llm.workers]


def full_logprob(step: int, token: int, temperature: float) -> float:
    return float(torch.log_softmax(STEP_LOGITS[step] / temperature, dim=-1)[token])


@pytest.mark.parametrize(("top_p", "top_k"), [(0.6, -1), (1.0, 4), (0.7, 5)], ids=["top_p", "top_k", "both"])
def test_logprobs_are_of_the_whole_distribution_at_the_temperature_if_truncated(vllm_module, top_p, top_k):
    engine = make(vllm_module, tensor_parallel_size=2)
    params = SamplingParams(n=6, temperature=0.7, top_p=top_p, top_k=top_k, max_new_tokens=8, seed=3)
    out = engine.generate([[1, 5]], params)
    truncated = 0
    for completion in out:
        for step, (token, logp) in enumerate(zip(completion.token_ids, completion.logprobs, strict=True)):
            assert logp == pytest.approx(full_logprob(step, token, 0.7), abs=1e-5)
            kept = keep_top_k_top_p(STEP_LOGITS[step] / 0.7, top_k, top_p)
            assert torch.isfinite(kept[token])  # drawn from vLLM's truncation at temperature 0.7
            truncated += int(torch.isinf(kept).any())
    assert truncated > 0  # the truncation did cut tokens: renormalised log-probs would differ
    assert scales(engine) == [pytest.approx(1 / 0.7)] * 2  # every worker's logits divided by T


def test_the_fold_follows_the_temperature_and_scales_from_the_models_own(vllm_module):
    engine = make(vllm_module)
    engine.llm.workers[0].get_model().logits_processor.scale = 0.0625  # Cohere's logit_scale
    rpcs = []
    original = engine.llm.collective_rpc
    engine.llm.collective_rpc = lambda method, **kw: rpcs.append(method) or original(method, **kw)
    sampled = SamplingParams(n=2, temperature=0.5, max_new_tokens=3, seed=1)
    engine.generate([[1]], sampled)
    engine.generate([[1]], sampled)
    assert rpcs == ["dapo_fold_temperature"] and scales(engine) == [0.125]  # once per change
    greedy = engine.generate([[1]], SamplingParams(temperature=0.0, max_new_tokens=3))[0]
    assert scales(engine) == [0.0625] and engine.llm.calls[-1][1][0].temperature == 0.0
    argmax = [int((STEP_LOGITS[k] * 0.0625).argmax()) for k in range(3)]
    assert greedy.token_ids == argmax
    expected = [float(torch.log_softmax(STEP_LOGITS[k] * 0.0625, -1)[t]) for k, t in enumerate(argmax)]
    assert greedy.logprobs == pytest.approx(expected, abs=1e-5)  # T=0: the log-probs of temperature 1


def test_greedy_by_top_k_one_keeps_the_log_probs_of_its_temperature(vllm_module):
    engine = make(vllm_module)
    out = engine.generate([[1]], SamplingParams(temperature=0.5, top_k=1, max_new_tokens=4))[0]
    assert engine.llm.calls[-1][1][0].temperature == 0.0  # greedy in vLLM
    assert out.token_ids == [int(STEP_LOGITS[k].argmax()) for k in range(4)]
    expected = [full_logprob(k, t, 0.5) for k, t in enumerate(out.token_ids)]
    assert out.logprobs == pytest.approx(expected, abs=1e-5)  # as the hf engine: softmax(logits / 0.5)


def test_a_model_without_a_logits_processor_fails_with_the_reason(vllm_module):
    engine = make(vllm_module)
    del engine.llm.workers[0].model_runner.model.logits_processor
    with pytest.raises(RuntimeError, match="no LogitsProcessor in vLLM's model"):
        engine.generate([[1]], SamplingParams(temperature=0.7, max_new_tokens=2))
    engine.generate([[1]], SamplingParams(temperature=1.0, max_new_tokens=2))  # T=1 needs no fold


def test_weights_of_a_mixture_of_experts_go_out_in_the_checkpoints_names(vllm_module, tmp_path):
    """transformers 5 fuses Mixtral's experts in memory; vLLM loads the per-expert checkpoint names."""
    from safetensors.torch import load_file
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_local_experts=3,
        pad_token_id=0,
    )
    model = MixtralForCausalLM(config)
    model.save_pretrained(tmp_path)
    files = {k: v for f in tmp_path.glob("*.safetensors") for k, v in load_file(f).items()}
    engine = make(vllm_module, model_path=str(tmp_path))
    assert "model.layers.0.mlp.experts.gate_up_proj" in model.state_dict()
    engine.update_weights(model.state_dict())
    got = received(engine)
    assert sorted(got) == sorted(files)
    assert "model.layers.0.block_sparse_moe.experts.2.w3.weight" in got
    for name, tensor in files.items():
        assert torch.equal(got[name], tensor), name
    assert engine.last_sync.tensors == len(files)
