"""The model-family matrix: a tiny random model of every family a DAPO user brings, from its transformers
config (no download), and the plain transformers forward every path is compared with (the fixtures that
hand them to tests are in conftest.py).

Tiny: hidden 32, 2 layers, 4 heads (2 key/value heads), the demo tokenizer's 103-token vocabulary, weights
drawn with std 0.1 (peaked enough that samples and gradients differ between rows). Families with a
sliding window get one of 8 tokens, which the rows of these tests outgrow. ``Family`` records what each
path is expected to decide for it (docs/dapo.md §11 is the same table in words).
"""

from __future__ import annotations

import copy
import functools
import random
from dataclasses import dataclass, field
from typing import Any

import torch

VOCAB, PAD, EOS = 103, 0, 2
TEMPERATURE = 0.7
COMMON = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "initializer_range": 0.1,
    "pad_token_id": PAD,
    "bos_token_id": 1,
    "eos_token_id": EOS,
}
WINDOW = {"sliding_window": 8}
GEMMA = {"head_dim": 8, "query_pre_attn_scalar": 8, "layer_types": ["sliding_attention", "full_attention"]}
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}


@dataclass(frozen=True)
class Family:
    """One family of the matrix and what each path decides for it."""

    name: str
    config: str
    """The transformers config class."""
    model: str
    """The transformers causal-LM class."""
    options: dict[str, Any] = field(default_factory=dict)
    fast_decode: bool = False
    """The hf engine's CPU fast decode runs it (else the transformers forward)."""
    shared_prompt: str | None = None
    """Why the shared-prompt update declines it (a fragment of ``shared_prompt_reason``); None: it runs."""
    chunked_head: bool = True
    """The update's log-probs go through the chunked LM head (else the model's own head, full logits)."""
    checkpoint_layout: bool = False
    """transformers keeps it in memory in another layout than its checkpoint (fused experts)."""


FAMILIES = [
    Family("llama3", "LlamaConfig", "LlamaForCausalLM", {"rope_parameters": LLAMA3_ROPE}, fast_decode=True),
    Family("qwen2", "Qwen2Config", "Qwen2ForCausalLM", {"tie_word_embeddings": True}, fast_decode=True),
    Family("qwen3", "Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}, fast_decode=True),
    Family(
        "qwen3_moe",
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        {"head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16},
        checkpoint_layout=True,
    ),
    Family("mistral", "MistralConfig", "MistralForCausalLM", {"sliding_window": None}, fast_decode=True),
    Family(
        "mistral_window",
        "MistralConfig",
        "MistralForCausalLM",
        WINDOW,
        fast_decode=True,
        shared_prompt="window",
    ),
    Family(
        "mixtral",
        "MixtralConfig",
        "MixtralForCausalLM",
        {**WINDOW, "num_local_experts": 4, "num_experts_per_tok": 2},
        shared_prompt="window",
        checkpoint_layout=True,
    ),
    Family(
        "gemma2",
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {**GEMMA, **WINDOW, "attn_logit_softcapping": 2.0, "final_logit_softcapping": 5.0},
        shared_prompt="window",
    ),
    Family("gemma3", "Gemma3TextConfig", "Gemma3ForCausalLM", {**GEMMA, **WINDOW}, shared_prompt="window"),
    Family("phi3", "Phi3Config", "Phi3ForCausalLM", WINDOW, shared_prompt="window"),
    Family("starcoder2", "Starcoder2Config", "Starcoder2ForCausalLM", WINDOW, shared_prompt="window"),
    Family(
        "granite",
        "GraniteConfig",
        "GraniteForCausalLM",
        {
            "logits_scaling": 4.0,
            "embedding_multiplier": 2.0,
            "residual_multiplier": 0.5,
            "attention_multiplier": 0.25,
        },
        shared_prompt="logits_scaling",
        chunked_head=False,
    ),
    Family(
        "cohere",
        "CohereConfig",
        "CohereForCausalLM",
        {"logit_scale": 0.5},
        shared_prompt="logit_scale",
        chunked_head=False,
    ),
]
BY_NAME = {f.name: f for f in FAMILIES}


@functools.cache
def _built(name: str) -> torch.nn.Module:
    import transformers

    from dapo.learner.families import exact_attention

    family = BY_NAME[name]
    config = getattr(transformers, family.config)(**{**COMMON, **family.options})
    torch.manual_seed(0)
    model = getattr(transformers, family.model)(config)
    exact_attention(model)  # as the learner loads it (Gemma 2: eager, for its attention soft cap)
    return model.eval()


def build(name: str) -> torch.nn.Module:
    """A fresh copy of the family's tiny random model (built once per session)."""
    return copy.deepcopy(_built(name))


def rows(seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """3 prompts of 4, 9 and 13 tokens (left padding differs), 3 responses of 1-11 tokens each; groups
    contiguous. Prompt plus response outgrow the 8-token windows."""
    rng = random.Random(seed)
    prompts, responses = [], []
    for length in (4, 9, 13):
        prompt = [rng.randrange(3, VOCAB) for _ in range(length)]
        for _ in range(3):
            prompts.append(prompt)
            responses.append([rng.randrange(3, VOCAB) for _ in range(rng.choice([1, 6, 11]))])
    return prompts, responses


def plain_logprobs(
    model: torch.nn.Module,
    prompts: list[list[int]],
    responses: list[list[int]],
    temperature: float = TEMPERATURE,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per row, log softmax(logits / T) of each response token and the entropy, from one forward of the
    row alone (no padding, no cache): the reference of every path."""
    logps, entropies = [], []
    for prompt, response in zip(prompts, responses, strict=True):
        logits = (
            model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1].float() / temperature
        )
        logp = torch.log_softmax(logits, dim=-1)
        logps.append(logp.gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1))
        entropies.append(-(logp.exp() * logp).sum(-1))
    return logps, entropies


def padded(values: list[torch.Tensor], width: int) -> torch.Tensor:
    """(rows, width) of per-row values, zero-padded on the right."""
    return torch.stack([torch.nn.functional.pad(v, (0, width - v.numel())) for v in values])
