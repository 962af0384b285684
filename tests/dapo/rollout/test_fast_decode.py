"""The hf engine's fast decode path (`dapo/rollout/fast_decode.py`) against the transformers forward.

Tiny random models of every supported architecture, built from a config with a fixed seed (no download),
every parameter random (norm weights too, so that a head-dim reordering or a misplaced scale shows). The
reference is the model's own eager forward with a DynamicCache, driven step by step alongside the fast
decoder with the same tokens: left-padded prompts of different lengths (one of a single token), n rows per
prompt, and compaction that leaves prompts with different numbers of rows and then drops whole prompts.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from transformers import (
    DynamicCache,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from dapo.rollout import SamplingParams, create_engine
from dapo.rollout import fast_decode as fd
from dapo.rollout.hf import HFEngine, fast_decode_reason, left_pad

PAD = 0
PROMPTS = [[1, 5, 9, 13, 7], [1], [1, 20, 21, 22, 23, 24, 25, 26, 27], [1, 30, 31]]
N = 3  # rows per prompt
STEPS = 30  # decode steps after the prefill
# compaction before these steps: (step, rows kept, as indices into the rows of that moment)
DROPS = {
    6: [0, 2, 3, 5, 6, 7, 8, 10, 11],  # prompts keep 2, 1, 3, 3 rows: slots with gaps
    14: [0, 1, 3, 4, 5, 7, 8],  # prompt 1 gone, prompt 2 down to 2 rows
    23: [1, 4],  # one row each of two prompts
}
COMMON = dict(
    vocab_size=48,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,  # GQA: 2 query heads per key-value head
    max_position_embeddings=128,
    pad_token_id=PAD,
    bos_token_id=1,
    eos_token_id=2,
    tie_word_embeddings=False,
    attn_implementation="eager",
)
ARCHITECTURES: dict[str, Callable[[], torch.nn.Module]] = {
    "llama": lambda: LlamaForCausalLM(LlamaConfig(**COMMON)),
    "llama-bias-llama3-rope-tied": lambda: LlamaForCausalLM(
        LlamaConfig(
            **COMMON
            | dict(
                attention_bias=True,
                mlp_bias=True,
                num_key_value_heads=4,
                tie_word_embeddings=True,
                rope_parameters={
                    "rope_type": "llama3",
                    "rope_theta": 500.0,
                    "factor": 4.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 2.0,
                    "original_max_position_embeddings": 16,
                },
            )
        )
    ),
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**COMMON)),
    "qwen3": lambda: Qwen3ForCausalLM(Qwen3Config(**COMMON | dict(head_dim=12))),
    "mistral": lambda: MistralForCausalLM(MistralConfig(**COMMON | dict(sliding_window=None))),
    "mistral-window-not-reached": lambda: MistralForCausalLM(
        MistralConfig(**COMMON | dict(sliding_window=64))
    ),
}


@pytest.fixture(autouse=True)
def nan_buffers(monkeypatch):
    """The fast decoder's uninitialised buffers hold NaN: any read of a position it never wrote or
    zeroed turns the logits of that row into NaN."""
    monkeypatch.setattr(fd, "_new_buffer", lambda like, *shape: like.new_full(shape, float("nan")))


def build(name: str, seed: int = 0) -> torch.nn.Module:
    """A tiny random model of one architecture: weights ~ N(0, 0.25), norm weights ~ 1 + N(0, 0.25)."""
    torch.manual_seed(seed)
    model = ARCHITECTURES[name]().eval()
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            noise = torch.randn_like(param) * 0.25
            param.copy_(1.0 + noise if "norm" in param_name else noise)
    return model


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def model(request) -> torch.nn.Module:
    return build(request.param)


def tokens_for(num_rows: int, step: int) -> torch.Tensor:
    """The (B,) tokens fed at `step` (the same for both paths; not EOS or pad)."""
    return torch.randint(3, COMMON["vocab_size"], (num_rows,), generator=torch.Generator().manual_seed(step))


@torch.inference_mode()
def reference_logits(model: torch.nn.Module) -> list[torch.Tensor]:
    """(B, V) logits after the prefill and after each decode step, by the transformers forward."""
    ids, mask, positions = left_pad(PROMPTS, PAD, torch.device("cpu"))
    cache = DynamicCache(config=model.config)
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
    )
    logits = [out.logits[:, -1].repeat_interleave(N, dim=0)]
    cache.batch_repeat_interleave(N)
    mask = mask.repeat_interleave(N, dim=0)
    next_pos = mask.sum(-1)
    for step in range(STEPS):
        if step in DROPS:
            keep = torch.tensor(DROPS[step])
            cache.batch_select_indices(keep)
            mask, next_pos = mask[keep], next_pos[keep]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        token = tokens_for(mask.shape[0], step)
        out = model(
            input_ids=token[:, None],
            attention_mask=mask,
            position_ids=next_pos[:, None],
            past_key_values=cache,
            use_cache=True,
        )
        logits.append(out.logits[:, -1])
        next_pos = next_pos + 1
    return logits


@torch.inference_mode()
def fast_logits(model: torch.nn.Module) -> list[torch.Tensor]:
    """The same as `reference_logits`, by `fast_decode.FastDecoder`."""
    ids, mask, positions = left_pad(PROMPTS, PAD, torch.device("cpu"))
    decoder = fd.FastDecoder(fd.build_weights(model), max_new_tokens=STEPS + 1)
    logits = [decoder.prefill(ids, mask, positions, N).repeat_interleave(N, dim=0)]
    num_rows = len(PROMPTS) * N
    for step in range(STEPS):
        if step in DROPS:
            decoder.select(torch.tensor(DROPS[step]))
            num_rows = len(DROPS[step])
        logits.append(decoder.step(tokens_for(num_rows, step)))
    return logits


def test_every_supported_architecture_is_supported(model):
    assert fd.unsupported_reason(model) is None


def test_fast_logits_match_the_transformers_forward_at_every_step(model):
    reference, fast = reference_logits(model), fast_logits(model)
    assert len(fast) == len(reference) == STEPS + 1
    assert reference[0].std() > 0.5  # logits far from uniform: a wrong path cannot hide in the noise
    for step, (got, want) in enumerate(zip(fast, reference, strict=True)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=0, msg=lambda m, s=step: f"step {s}: {m}")


def engines(model: torch.nn.Module, **options) -> tuple[HFEngine, HFEngine]:
    """(fast, transformers) engines sharing `model`; EOS {2, 3, 4} so rows stop at different steps."""
    common = dict(model=model, eos_token_ids=[2, 3, 4], pad_token_id=PAD, **options)
    fast, slow = (
        create_engine("hf", fast_decode=True, **common),
        create_engine("hf", fast_decode=False, **common),
    )
    assert isinstance(fast, HFEngine) and isinstance(slow, HFEngine)
    assert fast.fast_decode and not slow.fast_decode
    return fast, slow


def assert_same_samples(fast_out, slow_out) -> None:
    assert [c.token_ids for c in fast_out] == [c.token_ids for c in slow_out]
    assert [c.finish_reason for c in fast_out] == [c.finish_reason for c in slow_out]
    for a, b in zip(fast_out, slow_out, strict=True):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)


@pytest.mark.parametrize("compact_threshold", [0.0, 0.25, 1.0])
def test_greedy_generation_gives_the_same_tokens_as_the_transformers_path(model, compact_threshold):
    fast, slow = engines(model, compact_threshold=compact_threshold)
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=24)
    fast_out = fast.generate(PROMPTS, params)
    assert len({len(c.token_ids) for c in fast_out}) > 1  # rows stopped at different steps
    assert_same_samples(fast_out, slow.generate(PROMPTS, params))


def test_sampling_with_a_seed_gives_the_same_samples_and_logprobs(model):
    fast, slow = engines(model, compact_threshold=0.0)  # compaction at every EOS: uneven slots
    params = SamplingParams(n=4, temperature=1.0, top_p=0.95, max_new_tokens=24, seed=7)
    fast_out = fast.generate(PROMPTS, params)
    lengths = {len(c.token_ids) for c in fast_out}
    assert len(lengths) > 3  # the rows of a prompt stopped at different steps
    assert_same_samples(fast_out, slow.generate(PROMPTS, params))


def test_max_batch_size_chunks_on_the_fast_path_too():
    model = build("llama")
    fast, slow = engines(model, max_batch_size=4)
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=16, seed=3)
    assert_same_samples(fast.generate(PROMPTS, params), slow.generate(PROMPTS, params))


def test_calls_of_other_sizes_reuse_the_buffers_of_the_call_before():
    model = build("qwen3")
    fast, slow = engines(model, compact_threshold=0.0)
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=20, seed=5)
    for prompts in (PROMPTS, PROMPTS[1:3], PROMPTS[::-1]):  # shrinking, then growing again
        assert_same_samples(fast.generate(prompts, params), slow.generate(prompts, params))
    assert fast._workspace._buffers  # kept for the next call...
    fast.sleep()
    assert not fast._workspace._buffers  # ...until the engine sleeps


def test_weights_changed_between_calls_are_seen_by_the_next_call():
    model = build("qwen2")
    fast, slow = engines(model)
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=16)
    before = [c.token_ids for c in fast.generate(PROMPTS, params)]
    changed = build("qwen2", seed=1)
    fast.update_weights(changed.state_dict())  # copied into the shared model in place
    after = fast.generate(PROMPTS, params)
    assert [c.token_ids for c in after] != before
    assert_same_samples(after, slow.generate(PROMPTS, params))
    with torch.no_grad():  # the learner changing the shared model directly is seen too
        model.model.layers[1].mlp.down_proj.weight.mul_(-1.0)
    assert_same_samples(fast.generate(PROMPTS, params), slow.generate(PROMPTS, params))


def test_a_chunk_longer_than_the_sliding_window_runs_the_transformers_forward(monkeypatch):
    model = build("mistral-window-not-reached")  # window 64
    fast, slow = engines(model)
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=56)  # 9 + 56 - 1 = 64 positions: fits
    calls: list[int] = []
    prefill = fd.FastDecoder.prefill
    monkeypatch.setattr(fd.FastDecoder, "prefill", lambda self, *a: calls.append(1) or prefill(self, *a))
    assert_same_samples(fast.generate(PROMPTS, params), slow.generate(PROMPTS, params))
    assert calls == [1]
    longer = SamplingParams(n=2, temperature=0.0, max_new_tokens=57)  # 65 positions: the window would cut
    assert_same_samples(fast.generate(PROMPTS, longer), slow.generate(PROMPTS, longer))
    assert calls == [1]


def _bf16_llama() -> torch.nn.Module:
    return build("llama").to(torch.bfloat16)


UNSUPPORTED: dict[str, tuple[Callable[[], torch.nn.Module], str]] = {
    "gpt2": (
        lambda: GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=48, n_positions=64)),
        "GPT2LMHeadModel is not one of",
    ),
    "dynamic-rope": (
        lambda: LlamaForCausalLM(
            LlamaConfig(
                **COMMON | dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4})
            )
        ),
        "rope type 'dynamic'",
    ),
    "bfloat16": (_bf16_llama, "only float32"),
}


@pytest.mark.parametrize("case", list(UNSUPPORTED))
def test_an_unsupported_model_falls_back_in_auto_mode_and_raises_when_required(case):
    make, reason = UNSUPPORTED[case]
    model = make().eval()
    auto = create_engine("hf", model=model, eos_token_ids=[2], pad_token_id=PAD)
    assert isinstance(auto, HFEngine) and not auto.fast_decode
    assert auto.fast_decode_reason is not None and reason in auto.fast_decode_reason
    out = auto.generate(PROMPTS[:2], SamplingParams(n=2, temperature=0.0, max_new_tokens=4))
    assert len(out) == 4
    with pytest.raises(ValueError, match=f"fast_decode=True.*{reason}"):
        create_engine("hf", model=model, eos_token_ids=[2], pad_token_id=PAD, fast_decode=True)


def test_auto_mode_uses_the_fast_path_on_cpu_and_false_turns_it_off():
    model = build("llama")
    auto = create_engine("hf", model=model, eos_token_ids=[2], pad_token_id=PAD)
    off = create_engine(
        "hf", model=copy.deepcopy(model), eos_token_ids=[2], pad_token_id=PAD, fast_decode=False
    )
    assert isinstance(auto, HFEngine) and isinstance(off, HFEngine)
    assert auto.fast_decode and auto.fast_decode_reason is None
    assert not off.fast_decode and off.fast_decode_reason == "fast_decode=False"
    # auto elsewhere than on CPU: off (the figures behind the fast path are CPU ones); True still asks for it
    assert "CPU only" in str(fast_decode_reason(model, torch.device("cuda"), None))
    assert fast_decode_reason(model, torch.device("cuda"), True) is None
