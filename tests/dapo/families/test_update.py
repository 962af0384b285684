"""The update, per family: every way the learner computes log-probs, entropies and gradients gives the
plain transformers forward's (one unpadded forward per row), or the path declines the family and the
learner takes one that does; the actor says in the run's log which path ran and why.

Paths: the packed batch through the chunked LM head (one chunk, and chunks of 5 tokens), the model's own
head for heads that scale their logits, the shared-prompt update, and the actor's whole update in
token-budget micro-batches with the old-log-prob shortcut (old = current policy).
"""

from __future__ import annotations

import random

import pytest
import torch

from dapo.algo.loss import policy_loss
from dapo.learner.actor import PolicyActor, UpdateBatch
from dapo.learner.microbatch import plan_micro_batches
from dapo.learner.modeling import chunked_head_reason, pack, response_logprobs
from dapo.learner.shared_prompt import shared_prompt_logprobs, shared_prompt_reason, shares_prompts
from dapo.runconfig.presets import tiny_cpu
from tests.dapo.families.matrix import PAD, TEMPERATURE, build, padded, plain_logprobs, rows

GRADS = {"rtol": 1e-4, "atol": 1e-5}
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def gradients(model, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_grads_close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], **tol: float) -> None:
    assert sorted(got) == sorted(want)
    for name in want:
        torch.testing.assert_close(got[name], want[name], msg=name, **tol)  # type: ignore[arg-type]
    assert max(g.abs().max().item() for g in want.values()) > 1e-3  # real gradients, not zeros


def test_every_log_prob_path_matches_the_plain_forward_or_declines(family):
    model = build(family.name).train()
    prompts, responses = rows()
    width = max(map(len, responses))
    weights = torch.randn(len(prompts), width, generator=torch.Generator().manual_seed(0))
    logps, ents = plain_logprobs(model, prompts, responses)
    want_lp, want_ent = padded(logps, width), padded(ents, width)
    want = gradients(model, ((want_lp + want_ent) * weights).sum())

    assert (chunked_head_reason(model) is None) == family.chunked_head, chunked_head_reason(model)
    reason = shared_prompt_reason(model)
    assert (reason is None) if family.shared_prompt is None else (family.shared_prompt in reason), reason
    assert shares_prompts(model, prompts) == (family.shared_prompt is None)
    packed = pack(prompts, responses, PAD, CPU)
    paths = {
        "packed": lambda: response_logprobs(model, packed, temperature=TEMPERATURE, with_entropy=True),
        "chunks of 5": lambda: response_logprobs(
            model, packed, temperature=TEMPERATURE, with_entropy=True, chunk_tokens=5
        ),
    }
    if shares_prompts(model, prompts):
        paths["shared prompt"] = lambda: shared_prompt_logprobs(
            model, prompts, responses, PAD, CPU, temperature=TEMPERATURE, with_entropy=True, chunk_tokens=5
        )[:2]
    for name, path in paths.items():
        lp, ent = path()
        torch.testing.assert_close(lp, want_lp, rtol=0, atol=1e-5, msg=name)
        torch.testing.assert_close(ent, want_ent, rtol=0, atol=1e-5, msg=name)
        assert_grads_close(gradients(model, ((lp + ent) * weights).sum()), want, **GRADS)


def update_batch(prompts: list[list[int]], responses: list[list[int]]) -> UpdateBatch:
    """One mini-batch, one row left out of the loss (overlong filtering), old log-probs skipped."""
    rng = random.Random(1)
    keep = [i != 4 for i in range(len(prompts))]
    return UpdateBatch(
        prompts=prompts,
        responses=responses,
        advantages=[rng.uniform(-1.5, 1.5) for _ in prompts],
        old_logprobs=[[] for _ in prompts],
        loss_mask=keep,
        minibatch=[0] * len(prompts),
        minibatch_tokens={0: sum(len(r) for r, k in zip(responses, keep, strict=True) if k)},
        minibatch_seqs={0: sum(keep)},
        old_is_current=True,
    )


def reference_gradients(model, batch: UpdateBatch, config) -> dict[str, torch.Tensor]:
    """The update's gradient from the plain forward: the same loss (eq. 8, token mean) on its log-probs."""
    a = config.algorithm
    logps, _ = plain_logprobs(model, batch.prompts, batch.responses)
    width = max(map(len, batch.responses))
    logp = padded(logps, width)
    lengths = torch.tensor([len(r) for r in batch.responses])
    mask = (torch.arange(width) < lengths[:, None]).float() * torch.tensor(batch.loss_mask).float()[:, None]
    loss, _ = policy_loss(
        logp,
        logp.detach(),
        torch.tensor(batch.advantages),
        mask,
        clip_low=a.clip_low,
        clip_high=a.clip_high,
        clip_c=a.clip_c,
        agg=a.loss_agg_mode,
        num_tokens=batch.minibatch_tokens[0],
        num_seqs=batch.minibatch_seqs[0],
        max_len=config.rollout.max_response_length,
    )
    return gradients(model, loss)


PLANS = {
    "rows": {"optim.micro_batch_size": 5},  # a group's rows share micro-batches: the shared-prompt update
    "token budget": {"optim.micro_batch_max_tokens": 40},  # rows sorted by length, several passes
}


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_an_update_in_micro_batches_has_the_plain_forward_gradient(family, family_dirs, plan):
    from transformers import AutoModelForCausalLM

    from dapo.learner.families import exact_attention

    config = tiny_cpu().with_overrides(
        {
            "model.path": str(family_dirs[family.name]),
            "model.device": "cpu",
            "rollout.temperature": TEMPERATURE,
            "data.max_prompt_length": 16,
            "rollout.max_response_length": 12,
            "optim.grad_clip": 1e6,
            "optim.weight_decay": 0.0,
            "execution.torch_threads": 1,
            **PLANS[plan],
        }
    )
    prompts, responses = rows(seed=2)
    lengths = [len(p) for p in prompts], [len(r) for r in responses]
    o = config.optim
    passes = plan_micro_batches(*lengths, max_rows=o.micro_batch_size, max_tokens=o.micro_batch_max_tokens)
    assert len(passes) >= 2  # the mini-batch is cut into several passes
    reference = AutoModelForCausalLM.from_pretrained(family_dirs[family.name], local_files_only=True).train()
    exact_attention(reference)
    batch = update_batch(prompts, responses)
    want = reference_gradients(reference, batch, config)
    actor = PolicyActor(config)
    actor.update(batch)
    got = {n: p.grad for n, p in actor.model.named_parameters() if p.grad is not None}
    assert_grads_close(got, want, **GRADS)
    said = actor.path_decisions()  # what the run's log says (the trainer logs them at start)
    assert [line.split(":")[0] for line in said] == [
        "model",
        "attention",
        "rollout",
        "update log-probs",
        "shared-prompt update",
        "learner",
    ]
    shared = said[4]
    assert ("shared-prompt update: on" in shared) == (family.shared_prompt is None), shared
    assert (family.shared_prompt or "shared-prompt update: on") in shared
    assert ("chunked LM head" in said[3]) == family.chunked_head, said[3]
    assert ("fast decode (dapo.rollout.fast_decode)" in said[2]) == family.fast_decode, said[2]
    assert ("attention: eager" in said[1]) == (family.name == "gemma2"), said[1]
