"""Every rollout engine obeys the RolloutEngine contract, pinned against slow uncached reference loops.

One module, parametrised over engine names: "hf" (CPU, its fast decode path), "hf-transformers" (CPU, the
transformers forward: fast_decode=False), "hf-cuda" (marked gpu) and "vllm" (marked vllm); the last two
skip where CUDA or vLLM is absent. The model is a tiny random Llama built from a config (no
download). The reference greedy loop and the reference log-probs below run one full forward pass of the
whole sequence per step, without a KV cache, so they pin the engines' cache handling, left padding of
prompts of different lengths, and position ids.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from dapo.rollout import RolloutEngine, SamplingParams, create_engine

PAD = 0
PROMPTS = [[1, 5, 9, 13], [1, 7], [1, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29], [1]]  # different lengths
PROBE = PROMPTS[0]  # the fixture picks EOS so that greedy decoding of this prompt ends with "eos"

ENGINE_CASES = [
    pytest.param("hf", id="hf"),
    pytest.param("hf-transformers", id="hf-transformers"),
    pytest.param("hf-cuda", id="hf-cuda", marks=pytest.mark.gpu),
    pytest.param("vllm", id="vllm", marks=pytest.mark.vllm),
]
ATOL = {
    "hf": 1e-4,
    "hf-transformers": 1e-4,
    "hf-cuda": 1e-4,
    "vllm": 1e-3,
}  # vLLM's fp32 kernels sum in another order


def build_model(seed: int) -> LlamaForCausalLM:
    """A random ~0.2M-parameter Llama; lm_head is scaled up so that greedy decoding has clear margins."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        pad_token_id=PAD,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model


@torch.no_grad()
def next_logits(model: torch.nn.Module, ids: Sequence[int]) -> torch.Tensor:
    """(T, V) logits of a full uncached forward pass over one unpadded sequence."""
    return model(torch.tensor([list(ids)])).logits[0].float()


def reference_greedy(model: torch.nn.Module, prompt: Sequence[int], max_new: int, eos: int) -> list[int]:
    """Greedy decoding with one full forward pass per step (no cache, no padding)."""
    ids, out = list(prompt), []
    for _ in range(max_new):
        token = int(next_logits(model, ids)[-1].argmax())
        ids.append(token)
        out.append(token)
        if token == eos:
            break
    return out


def reference_logprobs(
    model: torch.nn.Module, prompt: Sequence[int], completion: Sequence[int], temperature: float
) -> torch.Tensor:
    """(len(completion),) log softmax(logits / T) of each completion token, from one uncached pass."""
    logits = next_logits(model, list(prompt) + list(completion))[len(prompt) - 1 : -1]  # (C, V)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)


@pytest.fixture(scope="module")
def model_and_eos() -> tuple[LlamaForCausalLM, int]:
    """The reference model and an EOS id that greedy decoding of PROBE emits at its 4th step."""
    model = build_model(seed=0)
    continuation = reference_greedy(model, PROBE, max_new=12, eos=-1)
    eos = next(t for i, t in enumerate(continuation) if i >= 3 and t not in continuation[:i] and t != PAD)
    model.config.eos_token_id = model.generation_config.eos_token_id = eos  # vLLM also stops at these
    return model, eos


@pytest.fixture(scope="module", params=ENGINE_CASES)
def case(
    request: pytest.FixtureRequest, model_and_eos, tmp_path_factory
) -> Iterator[tuple[str, RolloutEngine]]:
    """(case name, engine) with the reference model's weights; skips where the hardware is absent."""
    name = request.param
    model, eos = model_and_eos
    common = {"eos_token_ids": [eos], "pad_token_id": PAD, "seed": 0}
    if name in ("hf", "hf-transformers"):  # a copy of the model: tests change weights
        engine = create_engine("hf", model=copy.deepcopy(model), fast_decode=name == "hf", **common)
    else:
        if name == "hf-cuda" and not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU")
        if name == "vllm":
            pytest.importorskip("vllm")
        model_dir = tmp_path_factory.mktemp("tiny-llama")
        model.save_pretrained(model_dir)
        if name == "hf-cuda":
            engine = create_engine("hf", model_path=str(model_dir), device="cuda", **common)
        else:
            engine = create_engine(
                "vllm",
                model_path=str(model_dir),
                dtype="float32",
                gpu_memory_utilization=0.2,
                enforce_eager=True,
                enable_sleep_mode=True,
                max_model_len=256,
                skip_tokenizer_init=True,
                **common,
            )
    yield name, engine
    engine.close()


def test_it_returns_n_contiguous_samples_per_prompt_with_aligned_logprobs(case, model_and_eos):
    name, engine = case
    model, _ = model_and_eos
    out = engine.generate(PROMPTS, SamplingParams(n=3, temperature=0.7, max_new_tokens=6, seed=1))
    assert len(out) == len(PROMPTS) * 3
    for i, completion in enumerate(out):
        assert 1 <= len(completion.token_ids) <= 6
        assert len(completion.logprobs) == len(completion.token_ids)
        logprobs = torch.tensor(completion.logprobs)
        assert torch.isfinite(logprobs).all() and (logprobs <= 0).all()
        # sample i belongs to prompt i // n: its log-probs are only right under that prompt
        expected = reference_logprobs(model, PROMPTS[i // 3], completion.token_ids, temperature=0.7)
        torch.testing.assert_close(logprobs, expected, atol=ATOL[name], rtol=0)


def test_logprobs_are_of_the_whole_distribution_under_top_p_and_top_k(case, model_and_eos):
    """One definition for every engine: log softmax(logits / T) before truncation, not the renormalised
    distribution the token was drawn from (vLLM's processed_logprobs would be)."""
    name, engine = case
    model, _ = model_and_eos
    params = SamplingParams(n=3, temperature=0.6, top_p=0.5, top_k=3, max_new_tokens=6, seed=2)
    out = engine.generate(PROMPTS, params)
    for i, completion in enumerate(out):
        expected = reference_logprobs(model, PROMPTS[i // 3], completion.token_ids, temperature=0.6)
        torch.testing.assert_close(torch.tensor(completion.logprobs), expected, atol=ATOL[name], rtol=0)


@pytest.mark.parametrize(("temperature", "top_k"), [(1.0, 1), (0.0, -1)], ids=["top_k=1", "T=0"])
def test_greedy_equals_the_uncached_reference_loop(case, model_and_eos, temperature, top_k):
    name, engine = case
    model, eos = model_and_eos
    out = engine.generate(
        PROMPTS, SamplingParams(n=2, temperature=temperature, top_k=top_k, max_new_tokens=10)
    )
    for i, completion in enumerate(out):
        prompt = PROMPTS[i // 2]
        assert completion.token_ids == reference_greedy(model, prompt, 10, eos)
        expected = reference_logprobs(model, prompt, completion.token_ids, temperature=1.0)
        torch.testing.assert_close(torch.tensor(completion.logprobs), expected, atol=ATOL[name], rtol=0)


def test_finish_reason_is_eos_with_the_eos_token_included_or_length_at_the_cap(case, model_and_eos):
    _, engine = case
    model, eos = model_and_eos
    out = engine.generate(PROMPTS, SamplingParams(top_k=1, max_new_tokens=8))
    assert out[0].finish_reason == "eos" and out[0].token_ids[-1] == eos and len(out[0].token_ids) == 4
    assert any(c.finish_reason == "length" for c in out)  # the fixture's random model rarely says EOS
    for completion in out:
        if completion.finish_reason == "length":
            assert len(completion.token_ids) == 8 and eos not in completion.token_ids
        else:
            assert completion.finish_reason == "eos" and eos not in completion.token_ids[:-1]
    sampled = engine.generate(PROMPTS, SamplingParams(n=4, max_new_tokens=5, seed=3))
    for completion in sampled:
        assert completion.finish_reason == ("eos" if completion.token_ids[-1] == eos else "length")
        assert eos not in completion.token_ids[:-1]


def test_same_seed_gives_same_samples_and_another_seed_differs(case):
    _, engine = case

    def draw(seed: int) -> list[list[int]]:
        params = SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=seed)
        return [c.token_ids for c in engine.generate(PROMPTS, params)]

    first = draw(7)
    assert draw(7) == first
    assert draw(8) != first
    assert len({tuple(t) for t in first[:4]}) > 1  # the samples of one group are not copies


def test_tiny_top_p_keeps_only_the_argmax(case, model_and_eos):
    _, engine = case
    model, eos = model_and_eos
    out = engine.generate(PROMPTS, SamplingParams(n=3, temperature=1.0, top_p=1e-3, max_new_tokens=6, seed=5))
    for i, completion in enumerate(out):
        assert completion.token_ids == reference_greedy(model, PROMPTS[i // 3], 6, eos)


def test_update_weights_changes_the_outputs(case, model_and_eos):
    _, engine = case
    model, eos = model_and_eos
    other = build_model(seed=1)
    greedy = SamplingParams(top_k=1, max_new_tokens=6)
    before = [c.token_ids for c in engine.generate(PROMPTS, greedy)]
    try:
        engine.update_weights(other.state_dict())
        after = [c.token_ids for c in engine.generate(PROMPTS, greedy)]
        assert after != before
        assert after == [reference_greedy(other, p, 6, eos) for p in PROMPTS]
    finally:
        engine.update_weights(model.state_dict())
    assert [c.token_ids for c in engine.generate(PROMPTS, greedy)] == before


def test_it_generates_again_after_sleep_and_wake_up(case, model_and_eos):
    _, engine = case
    model, eos = model_and_eos
    engine.sleep()
    engine.wake_up()
    out = engine.generate(PROMPTS[:1], SamplingParams(top_k=1, max_new_tokens=6))
    assert out[0].token_ids == reference_greedy(model, PROMPTS[0], 6, eos)


def test_update_weights_takes_streamed_pairs_also_while_asleep(case, model_and_eos):
    """The colocated hand-over: the engine sleeps while the learner trains, then receives the new weights
    one (name, tensor) pair at a time, as an FSDP learner gathers them, and generates with them."""
    _, engine = case
    model, eos = model_and_eos
    other = build_model(seed=2)
    greedy = SamplingParams(top_k=1, max_new_tokens=6)
    try:
        engine.sleep()
        engine.update_weights((name, tensor.clone()) for name, tensor in other.state_dict().items())
        after = [c.token_ids for c in engine.generate(PROMPTS, greedy)]
        assert after == [reference_greedy(other, p, 6, eos) for p in PROMPTS]
    finally:
        engine.update_weights(iter(model.state_dict().items()))
    assert [c.token_ids for c in engine.generate(PROMPTS, greedy)] == [
        reference_greedy(model, p, 6, eos) for p in PROMPTS
    ]
