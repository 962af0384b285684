"""The demo task, built locally with no download: arithmetic problems, a tokenizer and a tiny Llama.

`python -m dapo.data.demo --out DIR [--seed 0] [--steps N]` writes, deterministically for a seed:

    DIR/model/            a HuggingFace model directory (LlamaForCausalLM, safetensors, tokenizer)
    DIR/data/train.parquet, DIR/data/test.parquet   DAPO-Math-17k schema (docs/dapo.md §7)
    DIR/manifest.json     seed, sizes, parameter count, base accuracy, build seconds

The problems are 2-3 operand additions and subtractions ("Compute 12+7-3."); a response ends with the
line "Answer: N", which the `math_dapo` reward scores (docs/dapo.md §6). The model is pre-trained
briefly on worked solutions, some with a deliberately wrong step, so that its accuracy sampled at
temperature 1.0 sits well between 0 and 1: DAPO has room to raise it within minutes on two CPU cores.

It is a little longer than 400 lines: the demo's data, tokenizer and pre-trained model are built together,
deterministically from one seed, and a change to one needs the others in view.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import time
from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from dapo.data.problems import Problem, encode_prompts, render_prompt, write_parquet

DEMO_DIR_DEFAULT = "var/demo"
DEMO_DATA_SOURCE = "math_dapo"
"""The reward that scores the demo problems (verl selects the reward by data_source)."""
PROMPT_TEMPLATE = "Compute {expression}."
MAX_OPERAND = 12
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% else %}{{ '\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)
PRETRAIN_STEPS = 1500
"""Default pre-training steps (batch 64): the shipped model's base accuracy comes from this many."""
PRETRAIN_NOISE = 0.5
"""Fraction of pre-training solutions with one wrong step (off by 1 to 3, carried to the answer).

Why half: the base policy then knows the arithmetic (its greedy answer is right on ~80% of the test
problems) but, sampled at temperature 1.0, copies the corpus's slips and is right on only ~40%. That is
the gap RL closes first at any scale, sharpening pass@k into pass@1, and it is wide enough for DAPO to
show +30 points within minutes on two CPU cores (bench/README.md, "Choosing the demo's settings")."""
MAX_NEW_TOKENS = 48
"""Generation cap when measuring base accuracy; the longest worked solution is ~40 tokens."""
Expression = tuple[tuple[int, ...], tuple[str, ...]]
"""Operands and the operators between them: ((12, 7, 3), ("+", "-")) is 12+7-3."""


def expression_text(expression: Expression) -> str:
    """'12+7-3' for ((12, 7, 3), ('+', '-'))."""
    operands, operators = expression
    return str(operands[0]) + "".join(op + str(x) for op, x in zip(operators, operands[1:], strict=True))


def partial_results(expression: Expression) -> list[int]:
    """The value after each operator, left to right: [19, 16] for 12+7-3; the last is the answer."""
    operands, operators = expression
    value, results = operands[0], []
    for op, x in zip(operators, operands[1:], strict=True):
        value = value + x if op == "+" else value - x
        results.append(value)
    return results


def random_expression(
    rng: random.Random, *, max_value: int = MAX_OPERAND, operands: Sequence[int] = (2, 3)
) -> Expression:
    """Draw `rng.choice(operands)` integers in [0, max_value] joined by + or -, redrawing until no
    partial result is negative (school arithmetic: one symbol per sign keeps the task easy to learn)."""
    n = rng.choice(list(operands))
    while True:
        values = tuple(rng.randint(0, max_value) for _ in range(n))
        expression = values, tuple(rng.choice("+-") for _ in range(n - 1))
        if min(partial_results(expression)) >= 0:
            return expression


def make_problem(index: int, expression: Expression) -> Problem:
    """A `Problem` in the demo's prompt format with the value as its ground truth."""
    messages = [{"role": "user", "content": PROMPT_TEMPLATE.format(expression=expression_text(expression))}]
    return Problem(index, messages, str(partial_results(expression)[-1]), DEMO_DATA_SOURCE)


def make_arithmetic_problems(
    n: int,
    seed: int,
    *,
    max_value: int = MAX_OPERAND,
    operands: Sequence[int] = (2, 3),
    exclude: Collection[str] = (),
) -> list[Problem]:
    """`n` distinct problems, none whose prompt text ("Compute 12+7-3.") is in `exclude`; deterministic
    for a seed."""
    rng = random.Random(seed)
    seen = set(exclude)
    problems: list[Problem] = []
    for _ in range(100 * n + 1000):
        if len(problems) == n:
            return problems
        problem = make_problem(len(problems), random_expression(rng, max_value=max_value, operands=operands))
        if problem.prompt_text not in seen:
            seen.add(problem.prompt_text)
            problems.append(problem)
    raise ValueError(f"could not draw {n} distinct problems with max_value={max_value}, operands={operands}")


def worked_solution(expression: Expression, *, error: int = 0, error_step: int = 0) -> str:
    """'12+7=19, 19-3=16\\nAnswer: 16'; a non-zero `error` is added to the result of step `error_step`
    and carried through the later steps (a plausible wrong solution)."""
    operands, operators = expression
    value, steps = operands[0], []
    for step, (op, x) in enumerate(zip(operators, operands[1:], strict=True)):
        result = (value + x if op == "+" else value - x) + (error if step == error_step else 0)
        steps.append(f"{value}{op}{x}={result}")
        value = result
    return ", ".join(steps) + f"\nAnswer: {value}"


def noisy_solution(expression: Expression, rng: random.Random, noise: float) -> str:
    """A worked solution that, with probability `noise`, has one step off by 1 to 3."""
    if rng.random() >= noise:
        return worked_solution(expression)
    error = rng.choice((-3, -2, -1, 1, 2, 3))
    return worked_solution(expression, error=error, error_step=rng.randrange(len(expression[1])))


# ------------------------------------------------------------------------------- tokenizer & model


def build_tokenizer() -> Any:
    """A character-level `PreTrainedTokenizerFast`: the special tokens, newline and printable ASCII.

    Ids: <pad> 0, <s> 1, </s> 2, <unk> 3, <|system|> 4, <|user|> 5, <|assistant|> 6, then characters.
    Each character is one token (a WordLevel model over a one-character split), so digits are tokens.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    characters = ["\n"] + [chr(c) for c in range(32, 127)]
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *characters])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=256,
    )


def build_model(tokenizer: Any, seed: int) -> Any:
    """A ~1.8M-parameter `LlamaForCausalLM` (4 layers, hidden 192), initialised from `seed`, whose
    generation config samples at temperature 1.0 with no top-k or top-p cut.

    Llama, not Qwen2: transformers maps a qwen2 directory to its own tokenizer class, which changes ids.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    ids = {f"{name}_token_id": getattr(tokenizer, f"{name}_token_id") for name in ("bos", "eos", "pad")}
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=192,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        **ids,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=MAX_NEW_TOKENS, **ids
    )
    return model


# ------------------------------------------------------------------------------------- pre-training


def _training_batch(
    tokenizer: Any, rng: random.Random, size: int, noise: float, exclude: Collection[str]
) -> Any:
    """(input_ids, attention_mask, labels) of `size` fresh worked problems, right-padded; only the
    response tokens (and the EOS) carry a loss."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    sequences: list[Any] = []  # 1-D LongTensors
    prompt_lengths: list[int] = []
    while len(sequences) < size:
        expression = random_expression(rng)
        problem = make_problem(0, expression)
        if problem.prompt_text not in exclude:
            prompt = render_prompt(tokenizer, problem)
            prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
            response_ids = tokenizer.encode(noisy_solution(expression, rng, noise), add_special_tokens=False)
            sequences.append(torch.tensor([*prompt_ids, *response_ids, tokenizer.eos_token_id]))
            prompt_lengths.append(len(prompt_ids))
    input_ids = pad_sequence(sequences, batch_first=True, padding_value=tokenizer.pad_token_id)  # (B, T)
    positions = torch.arange(input_ids.shape[1])  # (T,)
    attention_mask = (positions < torch.tensor([[len(s)] for s in sequences])).long()  # (B, T)
    is_response = positions >= torch.tensor([[p] for p in prompt_lengths])  # (B, T)
    labels = input_ids.masked_fill(~(is_response & attention_mask.bool()), -100)  # (B, T)
    return input_ids, attention_mask, labels


def pretrain(
    model: Any,
    tokenizer: Any,
    *,
    steps: int,
    seed: int,
    exclude: Collection[str] = (),
    batch_size: int = 64,
    lr: float = 3e-3,
    noise: float = PRETRAIN_NOISE,
    progress: bool = True,
) -> float:
    """Supervised next-token training on worked solutions of fresh problems whose prompt text is not in
    `exclude`, a fraction `noise` of them with a wrong step; AdamW, linear warm-up then cosine decay to a
    tenth. Returns the mean loss of the last 20 steps."""
    import torch
    from tqdm import tqdm

    rng = random.Random(f"pretrain-{seed}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = max(1, min(50, steps // 10))

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    model.train()
    losses: list[float] = []
    bar = tqdm(range(steps), desc="pre-train", disable=not progress)
    for _ in bar:
        input_ids, attention_mask, labels = _training_batch(tokenizer, rng, batch_size, noise, exclude)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()
    tail = losses[-20:]
    return sum(tail) / len(tail) if tail else float("nan")


def measure_accuracy(
    model: Any, tokenizer: Any, problems: Sequence[Problem], *, samples: int = 4, greedy: bool = False
) -> float:
    """Mean `math_dapo` accuracy (docs/dapo.md §6) over `samples` completions per problem sampled at
    temperature 1.0, or over one greedy completion."""
    import torch

    from dapo.rewards import math_dapo_score

    samples = 1 if greedy else samples
    prompts = [tokenizer.encode(render_prompt(tokenizer, p), add_special_tokens=False) for p in problems]
    width = max(len(p) for p in prompts)
    input_ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])  # (N, P)
    attention_mask = (torch.arange(width) >= torch.tensor([[width - len(p)] for p in prompts])).long()
    with torch.no_grad():  # sampling settings: the model's generation config (see build_model)
        output = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            do_sample=not greedy,
            num_return_sequences=samples,
        )
    responses = tokenizer.batch_decode(output[:, width:], skip_special_tokens=True)
    truths = [p.ground_truth for p in problems for _ in range(samples)]
    correct = [math_dapo_score(r, t).acc for r, t in zip(responses, truths, strict=True)]
    return sum(correct) / len(correct)


def make_splits(seed: int, train_size: int, test_size: int) -> tuple[list[Problem], list[Problem]]:
    """(train, test): distinct problems drawn together, then split at random, so the two splits share
    no expression and follow the same distribution."""
    problems = make_arithmetic_problems(train_size + test_size, seed=seed)
    in_test = set(random.Random(f"split-{seed}").sample(range(len(problems)), test_size))
    train: list[Problem] = []
    test: list[Problem] = []
    for i, problem in enumerate(problems):
        split = test if i in in_test else train
        split.append(replace(problem, index=len(split)))
    return train, test


def build_demo(
    out_dir: str | Path,
    *,
    seed: int = 0,
    pretrain_steps: int = PRETRAIN_STEPS,
    train_size: int = 2000,
    test_size: int = 200,
    threads: int = 2,
    progress: bool = True,
) -> dict:
    """Build the demo (data, tokenizer, pre-trained model, manifest) into `out_dir`; return the manifest.

    Steps: 1. disjoint train and test splits; 2. the tokenizer and a fresh model; 3. pre-training on
    worked solutions of problems outside the test split; 4. base accuracy on the test split; 5. save.
    The manifest is written last: its presence marks a complete build.
    """
    started, cpu_started = time.perf_counter(), time.process_time()
    train, test = make_splits(seed, train_size, test_size)
    model, tokenizer, loss, accuracy, greedy = _pretrained_model(
        seed, pretrain_steps, test, threads, progress
    )
    out = Path(out_dir)
    _save_model(model, tokenizer, out / "model")
    write_parquet(train, out / "data" / "train.parquet")
    write_parquet(test, out / "data" / "test.parquet")
    manifest = {
        "seed": seed,
        "train_size": len(train),
        "test_size": len(test),
        "params": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "max_prompt_tokens": max(map(len, encode_prompts(tokenizer, train + test, 1 << 20))),
        "pretrain_steps": pretrain_steps,
        "pretrain_noise": PRETRAIN_NOISE,
        "pretrain_final_loss": round(loss, 4),
        "base_accuracy": accuracy,
        "base_accuracy_greedy": greedy,
        "eval": {"split": "test", "temperature": 1.0, "top_p": 1.0, "samples_per_problem": 4},
        "threads": threads,
        "build_seconds": round(time.perf_counter() - started, 1),
        "build_cpu_seconds": round(time.process_time() - cpu_started, 1),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _pretrained_model(seed: int, steps: int, test: list[Problem], threads: int, progress: bool) -> tuple:
    """(model, tokenizer, final loss, accuracy at T=1.0 over 4 samples, greedy accuracy) on `threads`."""
    import torch

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        tokenizer = build_tokenizer()
        model = build_model(tokenizer, seed)
        exclude = {p.prompt_text for p in test}
        loss = pretrain(model, tokenizer, steps=steps, seed=seed, exclude=exclude, progress=progress)
        torch.manual_seed(seed)
        accuracy = measure_accuracy(model, tokenizer, test, samples=4)
        greedy = measure_accuracy(model, tokenizer, test, greedy=True)
    finally:
        torch.set_num_threads(previous_threads)
    return model, tokenizer, loss, accuracy, greedy


def _save_model(model: Any, tokenizer: Any, model_dir: Path) -> None:
    """A standard HuggingFace directory: config, safetensors weights, generation config, tokenizer."""
    if model_dir.exists():
        shutil.rmtree(model_dir)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)


def ensure_demo(out_dir: str | Path = DEMO_DIR_DEFAULT, *, seed: int = 0, progress: bool = False) -> Path:
    """The demo directory, built first when its manifest is missing (a finished build is kept)."""
    out = Path(out_dir)
    if not (out / "manifest.json").is_file():
        build_demo(out, seed=seed, progress=progress)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: build the demo into --out and print its manifest."""
    parser = argparse.ArgumentParser(prog="python -m dapo.data.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=DEMO_DIR_DEFAULT, help="output directory (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data, initialisation and training")
    parser.add_argument("--steps", type=int, default=PRETRAIN_STEPS, help="pre-training steps (%(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: %(default)s)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    manifest = build_demo(
        args.out, seed=args.seed, pretrain_steps=args.steps, threads=args.threads, progress=not args.quiet
    )
    print(json.dumps(manifest, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
