"""Rollout throughput: our hf engine vs transformers' `model.generate()` on the same model and batch.

Generated tokens per second (EOS included, padding after EOS excluded) for one DAPO-sized rollout batch
(default 32 prompts x G=8 samples, max_new_tokens 48, temperature 1.0, no top-k/top-p), on the demo model
(assets/demo/model when it exists, else a random Llama of the same shape: 4 layers, hidden 192, ~2M
parameters). Engines run side by side, alternating, several repeats; the table shows medians.
"ours, no compaction" keeps finished rows in the batch (fed with pad) to measure compaction; generate()
runs with the model's default attention (sdpa) and with "eager", the kernel our engine picks on CPU.
Two EOS settings: the model's EOS alone (an untrained model rarely stops: most rows run to the cap) and
five EOS ids (rows stop at mixed lengths, as a trained policy does).

    .venv/bin/python bench/rollout_throughput.py                 # threads 1 and 2, 5 repeats
    .venv/bin/python bench/rollout_throughput.py --threads 1 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, GenerationConfig, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dapo.rollout import SamplingParams, create_engine  # noqa: E402
from dapo.rollout.hf import left_pad  # noqa: E402

DEMO_MODEL = Path(__file__).resolve().parents[1] / "assets" / "demo" / "model"
PAD, EOS = 0, 2


def load_model(path: Path | None) -> tuple[torch.nn.Module, str]:
    """The demo model if present, else a random Llama of the demo's shape (no download)."""
    path = path or (DEMO_MODEL if DEMO_MODEL.is_dir() else None)
    if path is not None:
        return AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval(), str(path)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=103, hidden_size=192, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=256, tie_word_embeddings=True,
        pad_token_id=PAD, bos_token_id=1, eos_token_id=EOS,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval(), "random Llama (demo shape)"


def make_prompts(num: int, vocab: int, seed: int) -> list[list[int]]:
    """Prompts of 20-40 tokens (the demo's arithmetic prompts are of that size)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(20, 41, (num,), generator=g).tolist()
    return [[1] + torch.randint(3, vocab, (n - 1,), generator=g).tolist() for n in lengths]


def run_ours(engine, prompts: list[list[int]], params: SamplingParams) -> int:
    """Generated tokens of one engine call."""
    return sum(len(c.token_ids) for c in engine.generate(prompts, params))


def run_hf_generate(
    model, prompts: list[list[int]], params: SamplingParams, eos: list[int], attn: str = "sdpa"
) -> int:
    """Generated tokens of one `model.generate()` call: up to and including each row's first EOS."""
    model.set_attn_implementation(attn)
    ids, mask, _ = left_pad(prompts, PAD, torch.device("cpu"))
    config = GenerationConfig(
        do_sample=True, temperature=params.temperature, top_k=0, top_p=1.0, num_return_sequences=params.n,
        max_new_tokens=params.max_new_tokens, eos_token_id=eos, pad_token_id=PAD,
    )  # fmt: skip
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    model.set_attn_implementation("sdpa")
    new = out[:, ids.shape[1] :]  # (P*n, T)
    is_eos = torch.isin(new, torch.tensor(eos))
    first = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, new.shape[1])
    return int(first.sum())


def measure(runners: dict[str, Callable[[], int]], repeats: int) -> dict[str, float]:
    """Median tokens/s of each runner; runners alternate within every repeat (after one warm-up each)."""
    for run in runners.values():
        run()
    rates: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeats):
        for name, run in runners.items():
            start = time.perf_counter()
            tokens = run()
            rates[name].append(tokens / (time.perf_counter() - start))
    return {name: statistics.median(r) for name, r in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-path", type=Path, default=None)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    model, source = load_model(args.model_path)
    prompts = make_prompts(args.prompts, model.config.vocab_size, seed=0)
    params = SamplingParams(n=args.group, temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    print(f"model: {source}, {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")
    print(f"batch: {args.prompts} prompts x G={args.group}, max_new_tokens={args.max_new_tokens}, T=1.0\n")
    header = (
        f"{'threads':>7} {'EOS ids':>7} {'ours tok/s':>10} {'no compaction':>13} {'generate()':>10} "
        f"{'gen. eager':>10} {'ours/gen.':>9} {'ours/eager':>10}"
    )
    print(header + "\n" + "-" * len(header))
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        for eos in ([EOS], [EOS, 3, 4, 5, 6]):
            ours = create_engine("hf", model=model, eos_token_ids=eos, pad_token_id=PAD)
            masked = create_engine(
                "hf", model=model, eos_token_ids=eos, pad_token_id=PAD, compact_threshold=1
            )
            rates = measure(
                {
                    "ours": lambda e=ours: run_ours(e, prompts, params),
                    "masked": lambda e=masked: run_ours(e, prompts, params),
                    "generate": lambda eos=eos: run_hf_generate(model, prompts, params, eos),
                    "eager": lambda eos=eos: run_hf_generate(model, prompts, params, eos, "eager"),
                },
                args.repeats,
            )
            r = rates
            print(
                f"{threads:>7} {len(eos):>7} {r['ours']:>10.0f} {r['masked']:>13.0f} {r['generate']:>10.0f} "
                f"{r['eager']:>10.0f} {r['ours'] / r['generate']:>8.2f}x {r['ours'] / r['eager']:>9.2f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
