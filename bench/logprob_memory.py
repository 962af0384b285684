"""Peak memory and time of the response log-probs at a real vocabulary: full logits against chunks.

A random Qwen2 body (hidden 128, 2 layers) with Qwen2.5's 151,936-token vocabulary, 4 sequences of 64
prompt + 512 response tokens, CPU, fp32. Each measurement runs in its own process (so one peak does not
hide another): it builds the model and batch, reads the peak RSS (``ru_maxrss``), runs
``response_logprobs(with_entropy=True)`` under no_grad (the old-log-prob pass) or with grad and a backward
(the update), and reports how much the peak grew and how long the call took.

``full`` is the full-logits computation (``dapo.learner.modeling.full_logits_logprobs``, the implementation
before the chunked one); ``chunked`` is ``dapo.learner.modeling.response_logprobs``.

Then the demo's shape (the ``tiny_cpu`` model, 64 sequences x (20 prompt + 8..48 response) tokens), time
only, both paths alternating in one process, to check the small-vocabulary path did not get slower.

Last, the padding of token-budget micro-batches (``dapo.learner.microbatch``, no model): a mini-batch of 512
rows (32 prompts x 16 samples) with the paper's lengths (prompts 50-400 tokens, responses long-tailed up to
20,480: exponential with mean 4,000, capped), cut into 16-row micro-batches or by a budget of
2 x (2,048 + 20,480) tokens: padded share of the slots, number of passes, slots computed.

    .venv/bin/python bench/logprob_memory.py                 # ~4 min on 2 busy cores; `full` needs ~7 GB
    .venv/bin/python bench/logprob_memory.py --chunk 512 --skip-demo
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VOCAB, HIDDEN, LAYERS = 151_936, 128, 2
SEQS, PROMPT, RESPONSE = 4, 64, 512


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # Linux reports KiB


def logprob_fn(path: str, chunk: int):
    from dapo.learner.modeling import full_logits_logprobs, response_logprobs

    if path == "full":
        return lambda m, b: full_logits_logprobs(m, b, with_entropy=True)
    return lambda m, b: response_logprobs(m, b, with_entropy=True, chunk_tokens=chunk)


def measure_one(path: str, grad: bool, chunk: int) -> dict[str, float]:
    """In this process: build, read the peak, run once, report the growth of the peak."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from dapo.learner.modeling import pack

    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=4 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).train(grad)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, VOCAB, (PROMPT,), generator=g).tolist() for _ in range(SEQS)]
    responses = [torch.randint(1, VOCAB, (RESPONSE,), generator=g).tolist() for _ in range(SEQS)]
    batch = pack(prompts, responses, pad_id=0, device=torch.device("cpu"))
    fn = logprob_fn(path, chunk)
    before = peak_rss_gb()
    start = time.perf_counter()
    with torch.set_grad_enabled(grad):
        logp, entropy = fn(model, batch)
        if grad:
            (logp.sum() + entropy.sum()).backward()
    seconds = time.perf_counter() - start
    return {"added_gb": peak_rss_gb() - before, "seconds": seconds, "logp_sum": float(logp.sum())}


def demo_times(rounds: int, chunk: int) -> dict[str, float]:
    """Median seconds per call at the demo's shape, both paths alternating (grad + backward, no_grad)."""
    import torch

    from dapo.data.demo import build_model, build_tokenizer
    from dapo.learner.modeling import pack

    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=0)
    vocab = len(tokenizer)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, vocab, (20,), generator=g).tolist() for _ in range(64)]
    responses = [
        torch.randint(3, vocab, (int(n),), generator=g).tolist() for n in torch.randint(8, 49, (64,))
    ]
    batch = pack(prompts, responses, pad_id=0, device=torch.device("cpu"))
    times: dict[str, list[float]] = {}
    for _ in range(rounds):
        for path in ("full", "chunked"):
            fn = logprob_fn(path, chunk)
            for grad in (False, True):
                start = time.perf_counter()
                with torch.set_grad_enabled(grad):
                    logp, entropy = fn(model, batch)
                    if grad:
                        (logp.sum() + entropy.sum()).backward()
                times.setdefault(f"{path} {'grad' if grad else 'no_grad'}", []).append(
                    time.perf_counter() - start
                )
    return {k: statistics.median(v) for k, v in times.items()}


def padding_comparison(seed: int = 0) -> dict[str, tuple[float, int, int]]:
    """{plan: (padding fraction, passes, token slots)} of one long-tailed mini-batch (module docstring)."""
    import random

    from dapo.learner.microbatch import PaddingCount, plan_micro_batches

    rng = random.Random(seed)
    prompts = [p for p in (rng.randint(50, 400) for _ in range(32)) for _ in range(16)]
    responses = [min(int(rng.expovariate(1 / 4000)) + 1, 20_480) for _ in prompts]
    out = {}
    for name, kwargs in (
        ("16 rows", {"max_rows": 16}),
        ("budget 45,056", {"max_rows": 1, "max_tokens": 45_056}),
    ):
        plan = plan_micro_batches(prompts, responses, **kwargs)
        count = PaddingCount()
        for mb in plan:
            count.add([prompts[i] for i in mb], [responses[i] for i in mb])
        out[name] = (count.fraction, len(plan), count.slots)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunk", type=int, default=1024, help="response tokens per LM-head chunk")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 on a busy machine)")
    parser.add_argument("--rounds", type=int, default=7, help="demo-shape timing rounds")
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--one", nargs=2, metavar=("PATH", "GRAD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.one:
        print(json.dumps(measure_one(args.one[0], args.one[1] == "grad", args.chunk)))
        return 0
    print(
        f"vocab {VOCAB}, Qwen2 body hidden {HIDDEN} x {LAYERS} layers, {SEQS} x ({PROMPT} + {RESPONSE})"
        f" tokens, chunk {args.chunk}, {args.threads} thread(s); full logits (B, T, V) fp32 = "
        f"{SEQS * RESPONSE * VOCAB * 4 / 1e9:.2f} GB"
    )
    print("| pass | path | peak RSS added (GB) | seconds |")
    print("|---|---|---|---|")
    for grad in ("no_grad", "grad"):
        results = {}
        for path in ("full", "chunked"):
            cmd = [
                sys.executable,
                __file__,
                "--one",
                path,
                grad,
                "--chunk",
                str(args.chunk),
                "--threads",
                str(args.threads),
            ]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO)
            results[path] = json.loads(out.stdout.strip().splitlines()[-1])
            r = results[path]
            print(
                f"| {grad}{' + backward' if grad == 'grad' else ''} | {path} | {r['added_gb']:.2f} "
                f"| {r['seconds']:.2f} |",
                flush=True,
            )
        full, chunked = results["full"], results["chunked"]
        print(
            f"  {grad}: memory full/chunked {full['added_gb'] / max(chunked['added_gb'], 1e-9):.1f}x, "
            f"time full/chunked {full['seconds'] / chunked['seconds']:.1f}x, "
            f"sum(logp) {full['logp_sum']:.2f} vs {chunked['logp_sum']:.2f}"
        )
    if not args.skip_demo:
        times = demo_times(args.rounds, args.chunk)
        print(f"demo shape (tiny_cpu model, 64 x (20 + 8..48) tokens), median of {args.rounds}:")
        for key, seconds in times.items():
            print(f"  {key}: {seconds * 1000:.1f} ms")
    print("padding of one 512-row mini-batch, paper lengths (prompt 50-400, response exp(4000) <= 20480):")
    for name, (fraction, passes, slots) in padding_comparison().items():
        print(f"  {name}: padding_frac {fraction:.3f}, {passes} passes, {slots / 1e6:.2f}M token slots")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
