"""Log-probs of responses that share prompts, with each distinct prompt run through the decoder ONCE.

A group's G samples answer one prompt, so a packed batch (``dapo.learner.modeling.pack``) repeats every prompt
G times: with short responses that is most of the update's tokens (the peer benchmark's digit sums: 36-38
prompt tokens and at most 25 response tokens a row). Here the distinct prompts go through the decoder
once, left-padded as in ``pack``, keeping their key/value cache; the cache rows are then repeated for each
response (``index_select``, so gradients flow back into the one prompt pass) and the responses run on top
of it. The numbers are those of ``response_logprobs`` on the packed batch (same positions, same masks;
float rounding aside), and so are the gradients: the tests compare both.

Used by the actor when it applies (``shares_prompts``): one process (no DDP or FSDP wrapper, which expect
one forward per backward), a linear LM head the chunked path reproduces, no soft cap on the logits, no
gradient checkpointing (it turns the cache off), full attention in every layer, and fewer distinct
prompts than rows. A sliding window rules it out: the prompt pass hands back a cache cut to the window,
which the response pass would read as if it were the whole prompt (wrong log-probs and gradients, by
nats, on Mistral-style configs). ``shared_prompt_reason`` says why a model is declined.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from dapo.learner.families import sliding_window
from dapo.learner.head_chunks import chunked_logprobs
from dapo.learner.modeling import chunked_head_reason


def shared_prompt_reason(model) -> str | None:
    """Why ``shared_prompt_logprobs`` cannot reproduce ``model``'s (unwrapped) packed log-probs; None
    when it can."""
    config = model.config
    window = sliding_window(config)
    if window is not None:
        return f"sliding attention window of {window} tokens (the prompt's cache would be cut to it)"
    if getattr(model, "is_gradient_checkpointing", False):
        return "gradient checkpointing (it turns the key/value cache off)"
    if type(model.get_output_embeddings()) is not torch.nn.Linear:
        return f"the LM head is a {type(model.get_output_embeddings()).__name__}, not a plain linear layer"
    if getattr(config, "final_logit_softcapping", None) is not None:
        return "the logits are soft-capped (final_logit_softcapping)"
    return chunked_head_reason(model)


def shares_prompts(model, prompts: list[list[int]]) -> bool:
    """Whether ``shared_prompt_logprobs`` applies to these rows on this model: unwrapped (one process),
    accepted by ``shared_prompt_reason``, and some prompt repeated (distinct prompts gain nothing)."""
    if len({tuple(p) for p in prompts}) == len(prompts) or hasattr(model, "module"):
        return False
    return shared_prompt_reason(model) is None


def shared_prompt_logprobs(
    model,
    prompts: list[list[int]],
    responses: list[list[int]],
    pad_id: int,
    device: torch.device,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_tokens: int = 1024,
) -> tuple[Tensor, Tensor | None, Tensor]:
    """(logp (B, T), entropy (B, T) or None, response_mask (B, T)) as ``response_logprobs(model,
    pack(prompts, responses))`` computes them; padded positions hold zeros."""
    from transformers import DynamicCache

    index: dict[tuple[int, ...], int] = {}
    rows = [index.setdefault(tuple(p), len(index)) for p in prompts]  # row -> distinct prompt
    unique = [list(p) for p in index]
    width_p = max(len(p) for p in unique)
    width_t = max(1, max(len(r) for r in responses))
    p_ids = torch.tensor([[pad_id] * (width_p - len(p)) + p for p in unique], device=device)  # (U, P)
    p_mask = (
        torch.arange(width_p, device=device)
        >= torch.tensor([[width_p - len(p)] for p in unique], device=device)
    ).long()
    r_ids = torch.tensor([r + [pad_id] * (width_t - len(r)) for r in responses], device=device)  # (B, T)
    r_mask = (
        torch.arange(width_t, device=device) < torch.tensor([[len(r)] for r in responses], device=device)
    ).long()
    inverse = torch.tensor(rows, device=device)  # (B,)

    kept: list[Tensor] = []
    hook = model.get_decoder().register_forward_hook(lambda _m, _a, out: kept.append(out[0]))
    empty = torch.zeros(0, dtype=torch.long, device=device)
    try:
        out = model(
            input_ids=p_ids,
            attention_mask=p_mask,
            position_ids=(p_mask.cumsum(-1) - 1).clamp(min=0),
            use_cache=True,
            logits_to_keep=empty,
        )
        cache = DynamicCache(
            ddp_cache_data=[
                (layer.keys.index_select(0, inverse), layer.values.index_select(0, inverse))
                for layer in out.past_key_values.layers
            ]
        )
        mask = torch.cat([p_mask.index_select(0, inverse), r_mask], dim=1)  # (B, P + T)
        lengths = p_mask.sum(-1).index_select(0, inverse)  # (B,) real prompt tokens
        model(
            input_ids=r_ids,
            attention_mask=mask,
            position_ids=lengths.unsqueeze(-1) + torch.arange(width_t, device=device),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=empty,
        )
    finally:
        hook.remove()
    prompt_last = kept[0][:, -1].index_select(0, inverse)  # (B, H): predicts response token 0
    states = torch.cat([prompt_last.unsqueeze(1), kept[1][:, : width_t - 1]], dim=1)  # (B, T, H)
    valid = r_mask > 0  # (B, T)
    head_fn = functools.partial(
        chunked_logprobs,
        model.get_output_embeddings(),
        chunk=max(1, chunk_tokens),
        temperature=temperature,
        softcap=None,
        with_entropy=with_entropy,
    )
    logp_flat, ent_flat = head_fn(states[valid], r_ids[valid])
    logp = states.new_zeros(valid.shape, dtype=torch.float32).masked_scatter(valid, logp_flat)
    entropy = None
    if with_entropy:
        entropy = states.new_zeros(valid.shape, dtype=torch.float32).masked_scatter(valid, ent_flat)
    return logp, entropy, r_mask.to(torch.float32)
