"""Step 5 of bench/gpu_check.sh: vLLM and the hf engine on the same prompts, then vLLM's weight sync.

    python bench/gpu_check.py engines MODE OUT

Both engines load the same random 0.5B-shaped model and sample 8 completions of the same 64 prompts; each
prints its tokens/s and the mean gap between its log-probs and a teacher-forced pass of the learner (an HF
model on the GPU). Then the learner's weights move (noise), vLLM receives them as a state dict and as a
stream (timed), and its log-probs must follow: the gap after the sync must be under half the gap before.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpu_common import REAL_SHAPE, TINY_SHAPE, build_model, problems_file, result


def engines(mode: str, out: Path) -> None:
    """vLLM and the hf engine on the same prompts (tokens/s, agreement), then vLLM's weight sync."""
    import torch
    from transformers import AutoModelForCausalLM

    from dapo.data.demo import build_tokenizer
    from dapo.data.problems import encode_prompts, load_problems
    from dapo.rollout import SamplingParams, create_engine

    gpu = mode == "gpu"
    model_dir, params = build_model(
        out, REAL_SHAPE if gpu else TINY_SHAPE, "model-real" if gpu else "model-tiny"
    )
    tok = build_tokenizer()
    prompts = encode_prompts(tok, load_problems(problems_file(out), limit=64 if gpu else 4), 64)
    device, dtype = ("cuda", torch.bfloat16) if gpu else ("cpu", torch.float32)
    learner = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    common = {"eos_token_ids": [tok.eos_token_id], "pad_token_id": tok.pad_token_id, "seed": 0}
    built = {
        "hf": create_engine(
            "hf", model_path=str(model_dir), device=device, dtype="bfloat16" if gpu else "float32", **common
        )
    }
    if gpu:
        built["vllm"] = create_engine(
            "vllm",
            model_path=str(model_dir),
            dtype="bfloat16",
            enable_sleep_mode=True,
            gpu_memory_utilization=0.35,
            max_model_len=1024,
            skip_tokenizer_init=True,  # token ids in and out; the demo tokenizer has 103 of the 151,936
            **common,
        )
    else:
        print("vllm: skipped in the dry run (the hf engine stands in for it below)")
    sampled = SamplingParams(n=8 if gpu else 2, temperature=1.0, max_new_tokens=256 if gpu else 16, seed=3)
    for name, engine in built.items():
        engine.generate(prompts[:2], SamplingParams(max_new_tokens=4))  # warm-up
        if gpu:
            torch.cuda.synchronize()
        started = time.perf_counter()
        out_samples = engine.generate(prompts, sampled)
        seconds = time.perf_counter() - started
        tokens = sum(len(c.token_ids) for c in out_samples)
        gap = logprob_gap(learner, prompts, out_samples, sampled.n)
        result(
            step="engines",
            engine=name,
            samples=len(out_samples),
            tokens=tokens,
            seconds=seconds,
            rollout_tok_s=tokens / seconds,
            logprob_gap_vs_learner=gap,
        )
    sync = built.get("vllm", built["hf"])
    with torch.no_grad():  # the learner moves: the engine must follow it after a sync, and only then
        for p in learner.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    before = logprob_gap(learner, prompts[:8], sync.generate(prompts[:8], sampled), sampled.n)
    timings = []
    for form in ("state_dict", "stream"):
        weights = learner.state_dict() if form == "state_dict" else iter(learner.state_dict().items())
        started = time.perf_counter()
        sync.update_weights(weights)
        timings.append(time.perf_counter() - started)
    after = logprob_gap(learner, prompts[:8], sync.generate(prompts[:8], sampled), sampled.n)
    result(
        step="weight_sync",
        engine=sync.name,
        parameters=params,
        seconds_state_dict=timings[0],
        seconds_stream=timings[1],
        logprob_gap_before=before,
        logprob_gap_after=after,
    )
    if not after < 0.5 * before:
        raise SystemExit(
            f"FAIL weight sync: log-prob gap to the learner {after:.4f} after, {before:.4f} before"
        )
    for engine in built.values():
        engine.close()


def logprob_gap(model: Any, prompts: list[list[int]], samples: list, n: int) -> float:
    """Mean |engine log-prob - learner log-prob| over the sampled tokens (teacher-forced, temperature 1)."""
    import torch

    gaps = []
    with torch.no_grad():
        for i, sample in enumerate(samples[: 4 * n]):
            if not sample.token_ids:
                continue
            prompt = prompts[i // n]
            ids = torch.tensor([prompt + sample.token_ids], device=next(model.parameters()).device)
            logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
            logp = torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt) :, None])[:, 0]
            gaps.append((logp.cpu() - torch.tensor(sample.logprobs)).abs().mean().item())
    return sum(gaps) / max(len(gaps), 1)
