"""The model families the engine trains, read from a model's config (no torch: the web process checks a
run's model at launch with it).

Several paths re-implement part of a model (the CPU fast decode, the shared-prompt update, the chunked
LM head, FSDP wrapping, export, the vLLM weight sync). Each decides from the model's config whether it
reproduces the model exactly, and otherwise declines, so that the run takes the general path; the
family matrix of the test suite (tests/dapo/families/) holds every listed family to the plain
transformers forward through every path, and docs/dapo.md §11 lists which paths each family takes.

Everything here reads a config either as a ``config.json`` dict or as a transformers ``PretrainedConfig``
(``getattr``), so the launch check and the loaded model take the same decisions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dapo.runconfig import ConfigError

FAMILIES = {
    "llama": "Llama",
    "qwen2": "Qwen2/Qwen2.5",
    "qwen3": "Qwen3",
    "qwen3_moe": "Qwen3-MoE",
    "mistral": "Mistral",
    "mixtral": "Mixtral",
    "gemma2": "Gemma 2",
    "gemma3_text": "Gemma 3",
    "gemma3": "Gemma 3 (with its vision tower)",
    "phi3": "Phi-3",
    "starcoder2": "StarCoder2",
    "granite": "Granite",
    "cohere": "Cohere (Command R)",
}
"""Display name of each ``model_type`` in the family matrix (tests/dapo/families/)."""
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
"""Class-name endings of the architectures ``AutoModelForCausalLM`` builds (the learner loads with it)."""
CAUSAL_WRAPPERS = frozenset({"Gemma3ForConditionalGeneration"})
"""Multimodal classes that ``AutoModelForCausalLM`` builds and that train on text prompts like a causal LM
(checked through the learner and the hf engine)."""
UNCHUNKED_HEAD_ATTRS = ("logit_scale", "logits_scaling", "dim_model_base")
"""Config attributes of models whose head scales the logits in its own way (Cohere, Granite, MiniCPM):
those take the full-logits path, which runs the model's own head."""


def config_value(config: Any, name: str, default: Any = None) -> Any:
    """``name`` of a config.json dict or a ``PretrainedConfig``; ``default`` when it has none."""
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def text_config(config: Any) -> Any:
    """The language model's config: a multimodal config's ``text_config``, else the config itself."""
    inner = config_value(config, "text_config")
    return inner if isinstance(inner, Mapping) or hasattr(inner, "model_type") else config


def family_name(config: Any) -> str:
    """The family's display name, else its ``model_type`` (or its first architecture)."""
    kind = str(config_value(config, "model_type") or "")
    if kind in FAMILIES:
        return FAMILIES[kind]
    architectures = config_value(config, "architectures") or []
    return kind or (str(architectures[0]) if architectures else "an unknown family")


def sliding_window(config: Any) -> int | None:
    """The attention window of the model's sliding-window layers; None when every layer attends to the
    whole sequence.

    Two conventions: configs with ``layer_types`` (Qwen2/3, Gemma 2/3, Cohere 2) slide only in the
    "sliding_attention" layers; configs without it (Mistral, Mixtral, Phi-3, StarCoder2, Qwen3-MoE)
    slide in every layer whenever ``sliding_window`` is set, whatever ``use_sliding_window`` says
    (their transformers forward reads ``sliding_window`` alone).
    """
    config = text_config(config)
    window = config_value(config, "sliding_window")
    if window is None:
        return None
    layer_types = config_value(config, "layer_types")
    if layer_types is not None and "sliding_attention" not in layer_types:
        return None
    return int(window)


def attention_softcap(config: Any) -> float | None:
    """The soft cap on attention scores (Gemma 2); None when there is none."""
    cap = config_value(text_config(config), "attn_logit_softcapping")
    return float(cap) if cap is not None else None


def scaled_head(config: Any) -> str | None:
    """The config attribute by which the model's head scales its logits (Cohere's ``logit_scale``,
    Granite's ``logits_scaling``, ...), None for a plain head."""
    inner = text_config(config)
    return next((k for k in UNCHUNKED_HEAD_ATTRS if config_value(inner, k) is not None), None)


def exact_attention(model: Any) -> str | None:
    """Switch a loaded transformers model to the "eager" attention kernel when its default kernel would
    compute another function: sdpa skips Gemma 2's soft cap on attention scores. Returns why it switched
    (None: the model's kernel is kept). The hf engine runs eager on CPU and vLLM applies the cap, so the
    learner must too, or every ratio compares two different models."""
    cap = attention_softcap(model.config)
    if cap is None:
        return None
    if getattr(model.config, "_attn_implementation", None) != "eager":
        model.set_attn_implementation("eager")
    return f"eager attention: the attention scores are soft-capped at {cap:g}, which sdpa skips"


def untrainable_reason(config_json: Mapping[str, Any]) -> str | None:
    """Why the engine cannot train the model of this config.json at all (None: it can, or it cannot
    tell): its architecture is not one ``AutoModelForCausalLM`` builds, such as an encoder-decoder, a
    classifier or reward model, or a vision-language model transformers loads only as a whole."""
    architectures = [str(a) for a in config_value(config_json, "architectures") or []]
    if not architectures:
        return None
    if any(a.endswith(CAUSAL_SUFFIXES) or a in CAUSAL_WRAPPERS for a in architectures):
        return None
    return (
        f"{family_name(config_json)} ({', '.join(architectures)}) is not a causal language model the engine "
        "can train: it trains decoder-only models whose config.json names a ...ForCausalLM architecture "
        "(loaded with transformers' AutoModelForCausalLM); pick the base or instruct checkpoint of a "
        "causal LM (docs/dapo.md §11 lists the tested families)"
    )


def check_family(config_json: Mapping[str, Any] | None) -> None:
    """Raise ConfigError({"model.path": message}) when the model cannot be trained (launch check; a
    missing config.json is the path check's to report)."""
    reason = untrainable_reason(config_json) if config_json is not None else None
    if reason is not None:
        raise ConfigError({"model.path": reason})
