"""Rollout throughput: our hf engine vs transformers' `model.generate()` on the same model and batch.

Generated tokens per second (EOS included, padding after EOS excluded) for one DAPO-sized rollout batch
(default 32 prompts x G=8 samples, max_new_tokens 48, temperature 1.0, no top-k/top-p). Model: the demo
model when built (assets/demo/model or var/demo/model) with its arithmetic prompts and EOS; else a random
Llama of the same shape (4 layers, hidden 192, ~2M parameters) with random 20-40 token prompts, once with
one EOS id (an untrained model rarely stops: most rows run to the cap) and once with five (rows stop at
mixed lengths, as a trained policy does). Contenders run side by side, alternating, after a warm-up, for
several repeats; the table shows medians and the 1-minute load average (other processes share the CPUs).
"no compaction" is our engine keeping finished rows in the batch (fed with pad); generate() runs with the
model's default attention (sdpa) and with "eager", the kernel our engine picks on CPU.

    .venv/bin/python bench/rollout_throughput.py                 # threads 1 and 2, 5 repeats
    .venv/bin/python bench/rollout_throughput.py --threads 1 --repeats 3

`--fast-decode on|off` runs our engine with or without its fast decode path (`dapo/rollout/fast_decode.py`;
default: the engine's own choice, on for supported models on CPU). `--fast-decode both` instead times our
engine alone, with the path and without, calls interleaved (the order alternating), and prints the median
milliseconds per `generate()` call of each and whether both sampled the same tokens. `--problems` takes the
prompts from a dataset file (rendered as training renders them) instead of the demo's; `--prompts 8,16`
runs several batch sizes:

    taskset -c 1 .venv/bin/python bench/rollout_throughput.py --model-path var/bench/peer/assets/model \
        --problems var/bench/peer/assets/train.parquet --prompts 8,16 --max-new-tokens 32 --seed 1 \
        --threads 1 --repeats 9 --fast-decode both
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dapo.rollout import SamplingParams, create_engine  # noqa: E402
from dapo.rollout.hf import left_pad  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEMO_MODELS = (ROOT / "assets" / "demo" / "model", ROOT / "var" / "demo" / "model")  # committed, or built
PAD, EOS = 0, 2
Scenario = tuple[str, list[list[int]], list[int]]  # (label, prompts, EOS ids)


def load_model(path: Path | None, random_model: bool) -> tuple[torch.nn.Module, object | None, str]:
    """(model, tokenizer or None, description): the demo model if built, else a random Llama of its shape."""
    path = path or next((p for p in DEMO_MODELS if p.is_dir()), None)
    if path is not None and not random_model:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval()
        return model, AutoTokenizer.from_pretrained(path, local_files_only=True), str(path)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=103,
        hidden_size=192,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        bos_token_id=1,
        eos_token_id=EOS,
    )
    return LlamaForCausalLM(config).eval(), None, "random Llama (demo shape)"


def scenarios(tokenizer, vocab: int, num: int) -> list[Scenario]:
    """The demo's arithmetic prompts with its EOS when a tokenizer is there; else random prompts of
    20-40 tokens with 1 EOS id (an untrained model rarely stops) and with 5 (rows stop at mixed lengths)."""
    g = random.Random(0)
    if tokenizer is not None:  # "Compute 12+7-3." as dapo.data.demo writes its problems
        texts = [f"Compute {g.randint(0, 99)}+{g.randint(0, 99)}-{g.randint(0, 99)}." for _ in range(num)]
        chat = [{"role": "user", "content": t} for t in texts]
        rendered = [
            tokenizer.apply_chat_template([m], tokenize=False, add_generation_prompt=True) for m in chat
        ]
        prompts = [list(tokenizer(r, add_special_tokens=False)["input_ids"]) for r in rendered]
        return [("demo prompts", prompts, [int(tokenizer.eos_token_id)])]
    prompts = [[1] + [g.randrange(3, vocab) for _ in range(g.randint(19, 39))] for _ in range(num)]
    return [("random, 1 EOS id", prompts, [EOS]), ("random, 5 EOS ids", prompts, [EOS, 3, 4, 5, 6])]


def problem_prompts(tokenizer, path: Path, num: int) -> list[Scenario]:
    """The first `num` problems of a dataset file, rendered and tokenised as training does."""
    from dapo.data.problems import encode_prompts, load_problems

    prompts = encode_prompts(tokenizer, load_problems(path, limit=num), max_prompt_length=1 << 20)
    return [(f"{path.stem} prompts", prompts, [int(tokenizer.eos_token_id)])]


def compare_fast_decode(
    model, prompts: list[list[int]], params: SamplingParams, eos: list[int], repeats: int
) -> tuple[float, float, bool]:
    """(fast ms, off ms, same samples): median ms per generate() call of our engine with and without the
    fast decode path, calls interleaved with the order alternating, after one warm-up call each; and
    whether the warm-up calls (same seed) sampled the same tokens."""
    fast = create_engine("hf", model=model, eos_token_ids=eos, pad_token_id=PAD, fast_decode=True)
    off = create_engine("hf", model=model, eos_token_ids=eos, pad_token_id=PAD, fast_decode=False)
    same = [c.token_ids for c in fast.generate(prompts, params)] == [
        c.token_ids for c in off.generate(prompts, params)
    ]
    times: dict[str, list[float]] = {"fast": [], "off": []}
    for repeat in range(repeats):
        order = [("fast", fast), ("off", off)]
        for name, engine in order if repeat % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            engine.generate(prompts, params)
            times[name].append(time.perf_counter() - start)
    return statistics.median(times["fast"]) * 1e3, statistics.median(times["off"]) * 1e3, same


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
        do_sample=True,
        temperature=params.temperature,
        top_k=0,
        top_p=1.0,
        num_return_sequences=params.n,
        max_new_tokens=params.max_new_tokens,
        eos_token_id=eos,
        pad_token_id=PAD,
    )
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
    parser.add_argument("--model-path", type=Path, default=None, help="default: the demo model if built")
    parser.add_argument("--random-model", action="store_true", help="a random Llama even if a demo exists")
    parser.add_argument("--prompts", default="32", help="comma-separated numbers of prompts")
    parser.add_argument("--problems", type=Path, default=None, help="prompts from this dataset file")
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0, help="SamplingParams.seed")
    parser.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fast-decode", choices=["auto", "on", "off", "both"], default="auto")
    args = parser.parse_args()

    model, tokenizer, source = load_model(args.model_path, args.random_model)
    params = SamplingParams(n=args.group, temperature=1.0, max_new_tokens=args.max_new_tokens, seed=args.seed)
    print(f"model: {source}, {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")
    for num_prompts in [int(p) for p in args.prompts.split(",")]:
        print(f"\nbatch: {num_prompts} prompts x G={args.group}, max_new_tokens={args.max_new_tokens}, T=1.0")
        if args.problems is not None:
            cases = problem_prompts(tokenizer, args.problems, num_prompts)
        else:
            cases = scenarios(tokenizer, model.config.vocab_size, num_prompts)
        if args.fast_decode == "both":
            table_fast_decode(model, cases, params, args)
        else:
            table(model, cases, params, args)


def table_fast_decode(model, cases: list[Scenario], params: SamplingParams, args: argparse.Namespace) -> None:
    """Our engine with and without the fast decode path: median ms per call, speed-up, same samples."""
    header = f"{'threads':>7} {'scenario':>18} {'fast ms':>8} {'off ms':>8} "
    header += f"{'speed-up':>8} {'same':>5} {'load':>5}"
    print(header + "\n" + "-" * len(header))
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        for label, prompts, eos in cases:
            fast, off, same = compare_fast_decode(model, prompts, params, eos, args.repeats)
            print(
                f"{threads:>7} {label:>18} {fast:>8.1f} {off:>8.1f} {off / fast:>7.2f}x {str(same):>5} "
                f"{os.getloadavg()[0]:>5.1f}",
                flush=True,
            )


def table(model, cases: list[Scenario], params: SamplingParams, args: argparse.Namespace) -> None:
    """Our engine against generate(): median tokens/s of each contender."""
    fast_decode = {"auto": None, "on": True, "off": False}[args.fast_decode]
    header = (
        f"{'threads':>7} {'scenario':>18} {'ours tok/s':>10} {'no compaction':>13} {'generate()':>10} "
        f"{'gen. eager':>10} {'ours/gen.':>9} {'ours/eager':>10} {'load':>5}"
    )
    print(header + "\n" + "-" * len(header))
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        for label, prompts, eos in cases:
            r = measure(runners(model, prompts, params, eos, fast_decode), args.repeats)
            print(
                f"{threads:>7} {label:>18} {r['ours']:>10.0f} {r['masked']:>13.0f} {r['generate']:>10.0f} "
                f"{r['eager']:>10.0f} {r['ours'] / r['generate']:>8.2f}x {r['ours'] / r['eager']:>9.2f}x "
                f"{os.getloadavg()[0]:>5.1f}",
                flush=True,
            )


def runners(
    model, prompts: list[list[int]], params: SamplingParams, eos: list[int], fast_decode: bool | None = None
) -> dict:
    """The four contenders of one table row, as zero-argument callables returning generated tokens."""
    common = dict(model=model, eos_token_ids=eos, pad_token_id=PAD, fast_decode=fast_decode)
    ours = create_engine("hf", **common)
    masked = create_engine("hf", compact_threshold=1, **common)
    return {
        "ours": lambda: run_ours(ours, prompts, params),
        "masked": lambda: run_ours(masked, prompts, params),
        "generate": lambda: run_hf_generate(model, prompts, params, eos),
        "eager": lambda: run_hf_generate(model, prompts, params, eos, "eager"),
    }


if __name__ == "__main__":
    main()
