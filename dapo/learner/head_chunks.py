"""Log-probs and entropy of response tokens through the LM head, a chunk of positions at a time.

For n positions with hidden states h (n, H), head weight W (V, H), bias b, soft cap c (optional) and
temperature τ, the logits are z = cap(h Wᵀ + b) / τ with cap(x) = c·tanh(x / c), and

    logp_i = z_i[t_i] − logsumexp(z_i)          H_i = logsumexp(z_i) − Σ_v p_iv z_iv,  p_i = softmax(z_i)

A chunk holds (n, V) tensors only while it is computed. With grad, ``LinearHeadLogprobs`` keeps h and W
(O(n x H)) and recomputes the logits in backward, where the gradient w.r.t. z has a closed form:

    ∂logp_i/∂z_iv = 1[v = t_i] − p_iv            ∂H_i/∂z_iv = p_iv (Σ_u p_iu z_iu − z_iv)

so backward needs two (n, V) buffers, not the half-dozen autograd keeps for softmax, logsumexp, gather and
the entropy's product. A head that is not a plain ``nn.Linear`` goes through ``head_chunk`` under
``torch.utils.checkpoint`` (recomputed in backward by autograd) instead.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint


def chunked_logprobs(
    head,
    states: Tensor,
    targets: Tensor,
    *,
    chunk: int,
    temperature: float,
    softcap: float | None,
    with_entropy: bool,
) -> tuple[Tensor, Tensor]:
    """logp (N,) and entropy (N,) (zeros when not asked) of N positions; states (N, H), targets (N,)."""
    linear = type(head) is torch.nn.Linear
    recompute = torch.is_grad_enabled() and states.shape[0] > chunk
    parts = []
    for start in range(0, states.shape[0], chunk):
        h, t = states[start : start + chunk], targets[start : start + chunk]
        if linear:
            parts.append(
                LinearHeadLogprobs.apply(h, t, head.weight, head.bias, temperature, softcap, with_entropy)
            )
        elif recompute:
            parts.append(
                checkpoint(head_chunk, h, t, head, temperature, softcap, with_entropy, use_reentrant=False)
            )
        else:
            parts.append(head_chunk(h, t, head, temperature, softcap, with_entropy))
    return torch.cat([lp for lp, _ in parts]), torch.cat([ent for _, ent in parts])


def head_chunk(
    states: Tensor, targets: Tensor, head, temperature: float, softcap: float | None, with_entropy: bool
) -> tuple[Tensor, Tensor]:
    """logp (n,) and entropy (n,) (zeros when not asked) of n positions, by plain autograd ops."""
    z = _logits(head(states), temperature, softcap)  # (n, V) fp32
    log_norm = torch.logsumexp(z, dim=-1)  # (n,)
    logp = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_norm
    if not with_entropy:
        return logp, torch.zeros_like(logp)
    return logp, log_norm - _expected(torch.softmax(z, dim=-1), z)


class LinearHeadLogprobs(torch.autograd.Function):
    """``head_chunk`` for an ``nn.Linear`` head that saves only its inputs and recomputes the logits in
    backward (see the module docstring for the gradient)."""

    @staticmethod
    def forward(ctx, states, targets, weight, bias, temperature, softcap, with_entropy):
        ctx.save_for_backward(states, targets, weight, bias)
        ctx.options = (temperature, softcap, with_entropy)
        return head_chunk(
            states, targets, lambda h: F.linear(h, weight, bias), temperature, softcap, with_entropy
        )

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        states, targets, weight, bias = ctx.saved_tensors
        temperature, softcap, with_entropy = ctx.options
        raw = F.linear(states, weight, bias)  # (n, V), the model's dtype
        tanh = torch.tanh(raw / softcap) if softcap is not None else None
        z = _logits(raw if tanh is None else tanh * softcap, temperature, None)  # (n, V) fp32
        probs = torch.softmax(z, dim=-1)  # (n, V)
        if with_entropy:
            # p ⊙ (g_H (E_p[z] − z) − g_logp), built in z's buffer
            expected = _expected(probs, z)
            grad = z.sub_(expected.unsqueeze(-1)).mul_(-grad_entropy.unsqueeze(-1))
            grad = grad.sub_(grad_logp.unsqueeze(-1)).mul_(probs)
        else:
            grad = probs.mul_(-grad_logp.unsqueeze(-1))
        del probs, z
        grad.scatter_add_(-1, targets.unsqueeze(-1), grad_logp.unsqueeze(-1))  # + g_logp at the target
        if temperature != 1.0:
            grad.div_(temperature)
        grad = grad.to(raw.dtype)
        del raw
        if tanh is not None:  # d cap(x)/dx = 1 − tanh²(x / c)
            grad.mul_(tanh.square_().neg_().add_(1.0))
        grad_states = grad @ weight if ctx.needs_input_grad[0] else None
        grad_weight = grad.t() @ states if ctx.needs_input_grad[2] else None
        grad_bias = grad.sum(0) if bias is not None and ctx.needs_input_grad[3] else None
        return grad_states, None, grad_weight, grad_bias, None, None, None


def _logits(raw: Tensor, temperature: float, softcap: float | None) -> Tensor:
    """Soft cap in the head's dtype (as the model's own forward does it), then fp32 / temperature."""
    if softcap is not None:
        raw = torch.tanh(raw / softcap) * softcap
    z = raw.float()
    # In place: a fresh tensor nothing saved for backward (autograd would raise otherwise); a copy would
    # be one more (n, V) tensor.
    return z.div_(temperature) if temperature != 1.0 else z


def _expected(probs: Tensor, z: Tensor) -> Tensor:
    """Σ_v p_v z_v per row, (n,), as a batched dot product (no (n, V) product tensor)."""
    return torch.bmm(probs.unsqueeze(1), z.unsqueeze(-1)).view(-1)
