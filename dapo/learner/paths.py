"""Which of the engine's fast paths run for the loaded policy, and why the others decline.

Each path decides for itself (``fast_decode.unsupported_reason``, ``shared_prompt_reason``,
``chunked_head_reason``, ``families.exact_attention``); this module asks the same functions once, when a
policy is built, and the trainer logs one line per decision from the controller (a Ray actor's own log
lines would not reach the run's log), so a run's log says which path ran and why (docs/dapo.md §11 has
the table per family).
"""

from __future__ import annotations

from dapo.learner.families import attention_softcap, family_name, sliding_window
from dapo.learner.modeling import chunked_head_reason
from dapo.learner.shared_prompt import shared_prompt_reason
from dapo.rollout.base import RolloutEngine
from dapo.runconfig import RunConfig


def path_decisions(
    model, config: RunConfig, engine: RolloutEngine, *, world_size: int, fsdp: bool
) -> list[str]:
    """One line per path: the model, its attention kernel, the rollout engine's decode, the update's
    log-probs, the shared-prompt update and the learner's sharding."""
    return [
        _model_line(model),
        _attention_line(model),
        _rollout_line(engine),
        _logprob_line(model, config),
        _shared_prompt_line(model, world_size=world_size, fsdp=fsdp),
        _learner_line(world_size=world_size, fsdp=fsdp),
    ]


def _model_line(model) -> str:
    name = type(model).__name__
    parameters = sum(p.numel() for p in model.parameters())
    window = sliding_window(model.config)
    slides = f", sliding window {window}" if window is not None else ""
    return f"model: {family_name(model.config)} ({name}, {parameters:,} parameters{slides})"


def _attention_line(model) -> str:
    kernel = getattr(model.config, "_attn_implementation", None) or "default"
    cap = attention_softcap(model.config)
    why = f" (attention scores soft-capped at {cap:g}: sdpa would skip the cap)" if cap is not None else ""
    return f"attention: {kernel}{why}"


def _rollout_line(engine: RolloutEngine) -> str:
    if engine.name == "hf":
        reason = getattr(engine, "fast_decode_reason", None)
        if reason is not None:
            return f"rollout: hf engine, transformers forward (fast decode off: {reason})"
        config = getattr(getattr(engine, "model", None), "config", None)
        window = sliding_window(config) if config is not None else None
        longer = f"; a chunk past the {window}-token window takes the transformers forward" if window else ""
        return f"rollout: hf engine, fast decode (dapo.rollout.fast_decode){longer}"
    if engine.name == "vllm":
        return (
            "rollout: vllm, log-probs of the whole distribution at the sampling temperature "
            "(raw_logprobs, the temperature folded into the logits), weights sent in checkpoint format"
        )
    return f"rollout: {engine.name} (this learner does not generate)"


def _logprob_line(model, config: RunConfig) -> str:
    reason = chunked_head_reason(model)
    if reason is not None:
        return f"update log-probs: full logits, the model's own head ({reason})"
    chunk = config.optim.logprob_chunk_tokens
    return f"update log-probs: chunked LM head, {chunk:,} response tokens a chunk (dapo.learner.head_chunks)"


def _shared_prompt_line(model, *, world_size: int, fsdp: bool) -> str:
    if fsdp or world_size > 1:
        return f"shared-prompt update: off ({world_size} learners: DDP and FSDP want one forward a backward)"
    reason = shared_prompt_reason(model)
    if reason is not None:
        return f"shared-prompt update: off ({reason}): packed rows"
    return "shared-prompt update: on (a group's prompt runs once; dapo.learner.shared_prompt)"


def _learner_line(*, world_size: int, fsdp: bool) -> str:
    if fsdp:
        return f"learner: FSDP over {world_size} learners (one unit per decoder layer)"
    return f"learner: DDP over {world_size} learners" if world_size > 1 else "learner: one process"
