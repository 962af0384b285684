"""Our DAPO trainer against TRL's GRPOTrainer set up as DAPO, side by side (issues 14 and 31).

Both train the same fresh model on the same task of this file's own (not the demo's: a different
tokenizer, chat template, model shape and task), one core each (``taskset`` and one torch thread),
started at the same instant for the same wall budget, then ONE evaluator (ours, HF generate) judges both
saved models on the same held-out problems at T=1 (4 samples each) and greedily.

Three tasks (``--task``), none of them one the trainer was tuned on (see each class for its details):

- ``digitsum`` (the default and the first): digit sums of 3-5 digit numbers, answers of at most 25
  tokens, a character-level Llama;
- ``long``: prompts of about 200 tokens and answers of about 180 (at most 256): the digit sum of a
  14-digit number worked digit by digit, after an example; a character-level Llama of another shape with
  grouped-query attention;
- ``bpe``: word problems under a byte-level BPE tokenizer trained from the task's text, a ChatML
  template and a Qwen2 model.

Each model is pre-trained briefly on worked solutions of other problems, a third of them with one step
off, so that its sampled accuracy sits between 0 and 1 and both trainers have room to raise it.

TRL is pinned in bench/requirements-peer.txt for this benchmark, installed into its own venv that reuses
this project's torch and transformers; without that venv the TRL side runs from .venv, whose dev lock pins
the same trl for the TRL integration's test (the runtime lock never holds it):

    python3.11 -m venv var/peer-venv
    echo "$PWD/.venv/lib/python3.11/site-packages" > var/peer-venv/lib/python3.11/site-packages/zz_main.pth
    var/peer-venv/bin/pip install -r bench/requirements-peer.txt
    .venv/bin/python bench/peer_trl.py --budget-s 600

Settings shared by both (the issue's): 8 prompts x 8 samples a step, at most 32 new tokens, T=1, lr 2e-5
constant, AdamW with no weight decay, grad clip 1, clip 0.2 / 0.28, token-mean loss, no KL, truncated
samples masked from the loss (TRL ``mask_truncated_completions``, our overlong filtering), seed 42. Ours
adds dynamic sampling (its rounds count as generated samples); TRL trains on every group.

It is longer than 400 lines because both trainers' setups must be read side by side to see that they
are the same task.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUT = ROOT / "var" / "bench" / "peer"
PEER_PYTHON = ROOT / "var" / "peer-venv" / "bin" / "python"
SPECIAL = ("<pad>", "<bos>", "<eos>", "<unk>")
ALPHABET = "\n 0123456789+-=,.:?ADQSWadefghilmnorstuw"
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}Q: {{ m['content'] }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}A: {% endif %}"
)
GROUP, PROMPTS, LR, SEED = 8, 8, 2e-5, 42


# ---- the tasks and their models ----------------------------------------------------------------


class Task:
    """One task of the comparison: its problems (an integer item each), worked solutions, tokenizer and
    model. Items are drawn from a space far larger than the splits, so pre-training sees other items."""

    name = ""
    max_prompt = 64
    max_new = 32
    pretrain_steps = 300

    def draw(self, rng: random.Random) -> int:
        raise NotImplementedError

    def question(self, item: int) -> str:
        raise NotImplementedError

    def truth(self, item: int) -> str:
        raise NotImplementedError

    def worked(self, item: int, rng: random.Random | None = None, noise: float = 0.0) -> str:
        """The solution ending in ``Answer: N``; with probability ``noise`` one step is off."""
        raise NotImplementedError

    def tokenizer(self, corpus: list[str]) -> Any:
        raise NotImplementedError

    def model_config(self, tok: Any) -> Any:
        raise NotImplementedError

    def problem(self, index: int, item: int) -> Any:
        from dapo.data.problems import Problem

        messages = [{"role": "user", "content": self.question(item)}]
        return Problem(index=index, messages=messages, ground_truth=self.truth(item))

    def splits(self, n_train: int, n_test: int) -> tuple[list[int], list[int]]:
        rng = random.Random(self.name)
        items: dict[int, None] = {}
        while len(items) < n_train + n_test:
            items[self.draw(rng)] = None
        ordered = list(items)
        return ordered[:n_train], ordered[n_train:]


def running_sums(digits: list[int], rng: random.Random | None, noise: float) -> list[int]:
    """The running sums of ``digits``; with probability ``noise`` one of them (not the first) is off by 1
    or 2, and the ones after it follow from it."""
    wrong = rng.randrange(1, len(digits)) if rng is not None and rng.random() < noise else -1
    sums = [digits[0]]
    for i, d in enumerate(digits[1:], start=1):
        sums.append(sums[-1] + d + (rng.choice([-2, -1, 1, 2]) if i == wrong and rng is not None else 0))
    return sums


def char_tokenizer(alphabet: str, max_length: int) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate([*SPECIAL, *alphabet])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(list(SPECIAL))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=max_length,
    )


def token_ids(tok: Any) -> dict[str, int]:
    return {f"{n}_token_id": getattr(tok, f"{n}_token_id") for n in ("bos", "eos", "pad")}


class DigitSum(Task):
    """The bench's first task, "digit sum" of 3 to 5 digit numbers: ``Q: What is the digit sum of 4719?``
    -> the running sums ``4,11,12,21`` and a last line ``Answer: 21`` (at most 25 tokens). A
    character-level Llama (hidden 160, 4 layers, 5 heads)."""

    name, max_prompt, max_new = "digitsum", 64, 32

    def draw(self, rng: random.Random) -> int:
        return rng.randrange(100, 100_000)

    def splits(self, n_train: int, n_test: int) -> tuple[list[int], list[int]]:
        rng = random.Random("digit-sum")  # the first task's own draw, kept: its assets and figures stand
        numbers = rng.sample(range(100, 100_000), n_train + n_test)
        return numbers[:n_train], numbers[n_train:]

    def question(self, item: int) -> str:
        return f"What is the digit sum of {item}?"

    def truth(self, item: int) -> str:
        return str(sum(map(int, str(item))))

    def worked(self, item: int, rng: random.Random | None = None, noise: float = 0.0) -> str:
        sums = running_sums([int(d) for d in str(item)], rng, noise)
        return ",".join(map(str, sums)) + f"\nAnswer: {sums[-1]}"

    def tokenizer(self, corpus: list[str]) -> Any:
        return char_tokenizer(ALPHABET, 128)

    def model_config(self, tok: Any) -> Any:
        from transformers import LlamaConfig

        return LlamaConfig(
            vocab_size=len(tok),
            hidden_size=160,
            intermediate_size=448,
            num_hidden_layers=4,
            num_attention_heads=5,
            num_key_value_heads=5,
            max_position_embeddings=128,
            tie_word_embeddings=True,
            **token_ids(tok),
        )


class LongDigits(Task):
    """Longer prompts and responses: the digit sum of a 14-digit number, with an instruction and a worked
    example of another number in the prompt (about 200 characters), answered digit by digit
    (``4 total 4, 7 total 11, ...`` then ``Answer: 63``: about 180 tokens, at most 256). A
    character-level Llama of another shape (hidden 128, 6 layers, 4 heads with 2 key/value heads)."""

    name, max_prompt, max_new = "long", 256, 256
    DIGITS = 14
    ALPHABET = "\n ,.0123456789:AENQabcdefghilmnoprstuwx"

    def draw(self, rng: random.Random) -> int:
        return rng.randrange(10 ** (self.DIGITS - 1), 10**self.DIGITS)

    def steps(self, digits: list[int], sums: list[int]) -> str:
        return ", ".join(f"{d} total {s}" for d, s in zip(digits, sums, strict=True))

    def question(self, item: int) -> str:
        example = random.Random(item).randrange(100_000, 1_000_000)
        digits = [int(d) for d in str(example)]
        sums = running_sums(digits, None, 0.0)
        return (
            "Add the digits of a number one at a time, with the running total after each, then the answer. "
            f"Example, {example}: {self.steps(digits, sums)}. Answer: {sums[-1]}. Now {item}."
        )

    def truth(self, item: int) -> str:
        return str(sum(map(int, str(item))))

    def worked(self, item: int, rng: random.Random | None = None, noise: float = 0.0) -> str:
        digits = [int(d) for d in str(item)]
        sums = running_sums(digits, rng, noise)
        return f"{self.steps(digits, sums)}\nAnswer: {sums[-1]}"

    def tokenizer(self, corpus: list[str]) -> Any:
        return char_tokenizer(self.ALPHABET, 640)

    def model_config(self, tok: Any) -> Any:
        from transformers import LlamaConfig

        return LlamaConfig(
            vocab_size=len(tok),
            hidden_size=128,
            intermediate_size=384,
            num_hidden_layers=6,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=640,
            tie_word_embeddings=True,
            **token_ids(tok),
        )


class WordProblems(Task):
    """Word problems under a BPE tokenizer trained from the task's own text (byte-level, 400 tokens,
    numbers split as BPE splits them), a ChatML template, and a Qwen2 model (hidden 192, 3 layers, 6 heads
    with 2 key/value heads): ``Mia has 12 apples. She finds 7 more. She loses 5. How many apples does Mia
    have now?`` -> ``12 + 7 = 19. 19 - 5 = 14.`` and ``Answer: 14`` (2-3 steps of 1-9, starting at 2-19).
    Pre-trained for 600 steps: at 300 its sampled accuracy was near 0."""

    name, max_prompt, max_new, pretrain_steps = "bpe", 96, 48, 600
    NAMES = (("Mia", "She"), ("Leo", "He"), ("Ava", "She"), ("Sam", "He"), ("Zoe", "She"), ("Max", "He"))
    THINGS = ("apples", "coins", "books", "stamps", "shells", "marbles", "pencils", "cards")
    MORE = ("finds", "buys", "gets", "wins")
    LESS = ("gives away", "loses", "sells", "uses")
    TEMPLATE = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )

    def draw(self, rng: random.Random) -> int:
        return rng.randrange(10**12)

    def plan(self, item: int) -> tuple[str, str, str, int, list[tuple[str, int]]]:
        rng = random.Random(item)
        name, pronoun = rng.choice(self.NAMES)
        thing = rng.choice(self.THINGS)
        start = rng.randrange(2, 20)
        ops, total = [], start
        for _ in range(rng.choice([2, 3])):
            if total > 3 and rng.random() < 0.5:
                n = rng.randrange(1, min(10, total))
                ops.append((rng.choice(self.LESS), -n))
            else:
                n = rng.randrange(1, 10)
                ops.append((rng.choice(self.MORE), n))
            total += ops[-1][1]
        return name, pronoun, thing, start, ops

    def question(self, item: int) -> str:
        name, pronoun, thing, start, ops = self.plan(item)
        said = " ".join(f"{pronoun} {verb} {abs(n)}{' more' if n > 0 else ''}." for verb, n in ops)
        return f"{name} has {start} {thing}. {said} How many {thing} does {name} have now?"

    def truth(self, item: int) -> str:
        _, _, _, start, ops = self.plan(item)
        return str(start + sum(n for _, n in ops))

    def worked(self, item: int, rng: random.Random | None = None, noise: float = 0.0) -> str:
        _, _, _, start, ops = self.plan(item)
        wrong = rng.randrange(len(ops)) if rng is not None and rng.random() < noise else -1
        lines, total = [], start
        for i, (_, n) in enumerate(ops):
            after = total + n + (rng.choice([-2, -1, 1, 2]) if i == wrong and rng is not None else 0)
            lines.append(f"{total} {'+' if n > 0 else '-'} {abs(n)} = {after}.")
            total = after
        return " ".join(lines) + f"\nAnswer: {total}"

    def tokenizer(self, corpus: list[str]) -> Any:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast

        special = ["<pad>", "<|im_start|>", "<|im_end|>", "<unk>"]
        backend = Tokenizer(models.BPE(unk_token="<unk>"))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=400, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
        backend.train_from_iterator(corpus, trainer=trainer)
        return PreTrainedTokenizerFast(
            tokenizer_object=backend,
            bos_token="<|im_start|>",
            eos_token="<|im_end|>",
            pad_token="<pad>",
            unk_token="<unk>",
            chat_template=self.TEMPLATE,
            model_max_length=192,
        )

    def model_config(self, tok: Any) -> Any:
        from transformers import Qwen2Config

        return Qwen2Config(
            vocab_size=len(tok),
            hidden_size=192,
            intermediate_size=512,
            num_hidden_layers=3,
            num_attention_heads=6,
            num_key_value_heads=2,
            max_position_embeddings=192,
            tie_word_embeddings=True,
            **token_ids(tok),
        )


TASKS: dict[str, Task] = {t.name: t for t in (DigitSum(), LongDigits(), WordProblems())}
TASK: Task = TASKS["digitsum"]
"""The task of this process (``--task``)."""


def build(out: Path, steps: int) -> dict:
    """Tokenizer, pre-trained model and data of TASK into ``out`` (kept once built). Pre-training sees
    worked solutions of items outside both splits, a third of them with one step off, so that the
    model's sampled accuracy sits between 0 and 1 and both trainers have room to raise it."""
    manifest = out / "manifest.json"
    if manifest.is_file():
        return json.loads(manifest.read_text())
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from dapo.data.problems import render_prompt, write_parquet

    torch.set_num_threads(1)
    train, test = TASK.splits(4000, 256)
    seen = set(train) | set(test)
    rng = random.Random("pretrain")

    def fresh(draws: random.Random) -> int:
        while (item := TASK.draw(draws)) in seen:  # pre-training never sees a train or test problem
            pass
        return item

    other = random.Random("corpus")  # the tokenizer's text (a BPE task's): its own draws, not pre-training's
    corpus = [
        f"{TASK.question(i)}\n{TASK.worked(i, other, 1 / 3)}" for i in (fresh(other) for _ in range(3000))
    ]
    tok = TASK.tokenizer(corpus)
    config = TASK.model_config(tok)
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config)
    ids = token_ids(tok)
    model.generation_config = GenerationConfig(
        do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=TASK.max_new, **ids
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 30) * (1 - 0.9 * s / steps))
    model.train()
    for _ in range(steps):
        rows, starts = [], []
        while len(rows) < 32:
            n = fresh(rng)
            p = tok.encode(render_prompt(tok, TASK.problem(0, n)), add_special_tokens=False)
            r = tok.encode(TASK.worked(n, rng, noise=1 / 3), add_special_tokens=False) + [tok.eos_token_id]
            rows.append(p + r)
            starts.append(len(p))
        width = max(map(len, rows))
        x = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
        pos = torch.arange(width)
        mask = (pos < torch.tensor([[len(r)] for r in rows])).long()
        labels = x.masked_fill((pos < torch.tensor([[s] for s in starts])) | (mask == 0), -100)
        loss = model(input_ids=x, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if sched.last_epoch % 50 == 0:
            print(f"pre-train step {sched.last_epoch}/{steps}: loss {loss.item():.3f}", file=sys.stderr)
    model.eval()
    model.save_pretrained(out / "model")
    tok.save_pretrained(out / "model")
    write_parquet([TASK.problem(i, n) for i, n in enumerate(train)], out / "train.parquet")
    write_parquet([TASK.problem(i, n) for i, n in enumerate(test)], out / "test.parquet")
    info = {
        "task": TASK.name,
        "params": sum(p.numel() for p in model.parameters()),
        "pretrain_steps": steps,
        "loss": loss.item(),
    }
    manifest.write_text(json.dumps(info))
    return info


# ---- the two trainers (each in its own process, on its own core) ------------------------------


def our_config(assets: Path, overrides: dict[str, Any] | None = None) -> Any:
    """Our trainer's settings for the task; ``overrides`` (``--ours-set``) on top, e.g. one-step
    off-policy generation."""
    from dapo.runconfig.presets import get_preset

    return get_preset("tiny_cpu").with_overrides(
        {
            "seed": SEED,
            "model.path": str(assets / "model"),
            "data.train_path": str(assets / "train.parquet"),
            "data.val_path": str(assets / "test.parquet"),
            "data.train_batch_size": PROMPTS,
            "data.gen_batch_size": PROMPTS,
            "data.max_prompt_length": TASK.max_prompt,
            "rollout.n": GROUP,
            "rollout.max_response_length": TASK.max_new,
            "algorithm.overlong_buffer": False,
            "algorithm.overlong_filtering": True,
            "optim.lr": LR,
            "optim.warmup_steps": 0,
            "optim.weight_decay": 0.0,
            "optim.total_steps": 1_000_000,
            "optim.mini_batch_size": PROMPTS,
            "optim.micro_batch_size": PROMPTS * GROUP,
            "validation.every_n_steps": 0,
            "checkpoint.every_n_steps": 0,
            "execution.torch_threads": 1,
            **(overrides or {}),
        }
    )


def barrier(which: str, planned: float) -> tuple[float, float]:
    """Wait until both trainers are loaded (each writes a ready file), then start together: at the
    planned instant, or at once if the later one was ready after it (a loaded machine). Returns (the
    start, how late it is against the plan); each trainer's budget and rates count from that start."""
    (OUT / f"{which}.ready").write_text("")
    other = OUT / ("trl.ready" if which == "ours" else "ours.ready")
    while not other.exists():
        time.sleep(0.02)
    now = time.time()
    time.sleep(max(0.0, planned - now))
    return max(now, planned), max(0.0, now - planned)


def run_ours(assets: Path, out: Path, start: float, budget: float, overrides: dict[str, Any]) -> dict:
    from dapo.cluster.backends import LocalBackend
    from dapo.loop.report import Sink
    from dapo.loop.trainer import Trainer

    config = our_config(assets, overrides)
    backend = LocalBackend(config)

    class Budget(Sink):
        def __init__(self) -> None:
            self.steps, self.trained, self.generated, self.last = 0, 0.0, 0.0, start
            self.phases: dict[str, float] = {}
            self.ends: list[float] = []
            self.per_step: list[dict[str, float]] = []

        def on_step(self, report: Any) -> None:
            m = report.metrics
            self.steps, self.last = self.steps + 1, time.time()
            self.ends.append(self.last)
            self.trained += m.get("train/num_samples_trained", 0.0)
            self.generated += m.get("train/num_prompts_generated", 0.0) * GROUP
            for k, v in m.items():
                if k.startswith("timing_s/"):
                    self.phases[k] = self.phases.get(k, 0.0) + v
            kept = {k[len("timing_s/") :]: v for k, v in m.items() if k.startswith("timing_s/")}
            kept["rounds"] = m.get("train/num_gen_batches", 0.0)
            self.per_step.append(kept)

        def should_stop(self) -> bool:
            return time.time() > start + budget

    sink = Budget()
    start, late = barrier("ours", start)
    sink.last = start
    Trainer(config, out / "run", [sink], backend=backend).fit()
    backend.save_pretrained(out / "final")
    wall = sink.last - start
    phases = {k: round(v / max(sink.steps, 1), 4) for k, v in sorted(sink.phases.items())}
    return {
        "steps": sink.steps,
        "trained": sink.trained,
        "generated": sink.generated,
        "wall": wall,
        "phases": phases,
        "late": late,
        "ends": [t - start for t in sink.ends],
        "per_step": sink.per_step,
    }


def run_trl(assets: Path, out: Path, start: float, budget: float) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from dapo.data.problems import load_problems
    from dapo.rewards import build_reward
    from dapo.runconfig import DataConfig

    torch.set_num_threads(1)
    scorer = build_reward(DataConfig())
    problems = load_problems(str(assets / "train.parquet"))
    data = Dataset.from_list([{"prompt": p.messages, "answer": p.ground_truth} for p in problems])

    def reward(completions: list, answer: list, **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [r.score for r in scorer.score_batch([""] * len(texts), texts, answer)]

    class Budget(TrainerCallback):
        last = start
        ends: list[float] = []

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            Budget.last = time.time()
            Budget.ends.append(Budget.last)
            if time.time() > start + budget:
                control.should_training_stop = True

    args = GRPOConfig(
        output_dir=str(out / "run"),
        per_device_train_batch_size=PROMPTS * GROUP,
        num_generations=GROUP,
        max_completion_length=TASK.max_new,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        mask_truncated_completions=True,
        num_iterations=1,
        max_steps=1_000_000,
        save_strategy="no",
        report_to="none",
        logging_steps=1_000_000,
        use_cpu=True,
        seed=SEED,
        dataloader_num_workers=0,
        disable_dropout=True,
    )
    model = AutoModelForCausalLM.from_pretrained(assets / "model", dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(assets / "model")
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=data,
        processing_class=tok,
        callbacks=[Budget()],
    )
    start, late = barrier("trl", start)
    Budget.last = start
    trainer.train()
    trainer.save_model(str(out / "final"))
    tok.save_pretrained(out / "final")
    steps = trainer.state.global_step
    samples = steps * PROMPTS * GROUP
    return {
        "steps": steps,
        "trained": samples,
        "generated": samples,
        "wall": Budget.last - start,
        "late": late,
        "ends": [t - start for t in Budget.ends],
    }


# ---- one evaluator for both -------------------------------------------------------------------


def evaluate(model_dir: Path, assets: Path, problems_n: int = 256) -> dict[str, float]:
    """Held-out accuracy of a saved model on the first ``problems_n`` held-out problems: mean over 4 samples
    at T=1, and greedy (HF generate, 64 prompts at a time)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dapo.data.problems import encode_prompts, load_problems
    from dapo.rewards import build_reward
    from dapo.runconfig import DataConfig

    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    problems = load_problems(str(assets / "test.parquet"))[:problems_n]
    prompts = encode_prompts(tok, problems, TASK.max_prompt)
    scorer = build_reward(DataConfig())
    out = {}
    for name, samples, sample in (("acc_t1", 4, True), ("acc_greedy", 1, False)):
        texts = []
        for at in range(0, len(prompts), 64):
            chunk = prompts[at : at + 64]
            width = max(map(len, chunk))
            x = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in chunk])
            mask = (x != tok.pad_token_id).long()
            with torch.no_grad():
                y = model.generate(
                    input_ids=x,
                    attention_mask=mask,
                    do_sample=sample,
                    num_return_sequences=samples,
                    max_new_tokens=TASK.max_new,
                    temperature=1.0,
                    top_p=1.0,
                    top_k=0,
                    pad_token_id=tok.pad_token_id,
                )
            texts += tok.batch_decode(y[:, width:], skip_special_tokens=True)
        truths = [p.ground_truth for p in problems for _ in range(samples)]
        results = scorer.score_batch([""] * len(texts), texts, truths)
        out[name] = sum(r.acc for r in results) / len(results)
    return out


# ---- where our step's time goes -----------------------------------------------------------------


def profile(assets: Path, steps: int) -> None:
    """Our trainer on this task, one thread: mean seconds per phase over ``steps`` steps as before (the
    old-log-prob forward run, every prompt run once per sample), with the forward skipped, and as shipped
    (prompts shared too), one after the other in one process; then torch.profiler's top operators of one
    more step as shipped."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    import dapo.learner.actor as actor_module
    import dapo.loop.trainer as trainer_module
    from dapo.cluster.backends import LocalBackend
    from dapo.loop.trainer import Trainer

    torch.set_num_threads(1)
    config = our_config(assets)
    shipped, shares = trainer_module.old_policy_is_current, actor_module.shares_prompts
    table: dict[str, dict[str, float]] = {}
    variants = (
        ("before: old forward, packed prompts", lambda *a, **k: False, lambda *a: False),
        ("old forward skipped", shipped, lambda *a: False),
        ("and prompts shared (now)", shipped, shares),
    )
    for name, rule, share in variants:  # bench only: the shipped rules swapped out
        trainer_module.old_policy_is_current = rule  # type: ignore[assignment]
        actor_module.shares_prompts = share  # type: ignore[assignment]
        trainer = Trainer(config, OUT / "profile", [], backend=LocalBackend(config))
        trainer._setup()
        totals: dict[str, float] = {}
        for _ in range(steps):
            for k, v in trainer.train_step().items():
                if k.startswith("timing_s/"):
                    totals[k[len("timing_s/") :]] = totals.get(k[len("timing_s/") :], 0.0) + v / steps
        table[name] = totals
    trainer_module.old_policy_is_current, actor_module.shares_prompts = shipped, shares
    phases = sorted({k for t in table.values() for k in t})
    print("| phase (mean s per step) | " + " | ".join(table) + " |\n|---|" + "---|" * len(table))
    for k in phases:
        print(f"| {k} | " + " | ".join(f"{t.get(k, 0.0):.3f}" for t in table.values()) + " |")
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        trainer.train_step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


# ---- the side-by-side run ---------------------------------------------------------------------


def quantiles(values: list[float]) -> tuple[float, float, float]:
    """p50, p90 and max (nearest rank); zeros for an empty list."""
    if not values:
        return 0.0, 0.0, 0.0
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    return rank(0.5), rank(0.9), ordered[-1]


def step_times(run: dict) -> list[float]:
    """Seconds between one step's end and the next (the first step's own time is ``ends[0]``)."""
    ends = run.get("ends") or []
    return [b - a for a, b in zip(ends, ends[1:], strict=False)]


def tails(runs: dict[str, dict]) -> str:
    """Where the wall time went: time to the first step, step-time p50/p90/max and the share of the wall
    spent in steps slower than twice the median, for both; then our phases' p50/p90/max and our five
    slowest steps with their phases and generation rounds."""
    lines = ["| | TRL | ours |", "|---|---|---|"]
    stats = {}
    for which, run in runs.items():
        ends = run.get("ends") or []
        steps = step_times(run)
        p50, p90, top = quantiles(steps)
        slow = sum(t for t in steps if t > 2 * p50)
        stats[which] = (ends[0] if ends else 0.0, p50, p90, top, slow / max(run["wall"], 1e-9))
    names = ("time to the first step (s)", "step p50 (s)", "step p90 (s)", "step max (s)")
    for i, name in enumerate(names):
        lines.append(f"| {name} | {stats['trl'][i]:.2f} | {stats['ours'][i]:.2f} |")
    lines.append(f"| wall share in steps > 2x p50 | {stats['trl'][4]:.1%} | {stats['ours'][4]:.1%} |")
    per_step = runs["ours"].get("per_step") or []
    phases = sorted({k for row in per_step for k in row if k != "rounds"})
    lines += ["", "| our phase (s) | p50 | p90 | max |", "|---|---|---|---|"]
    for k in phases + ["rounds"]:
        p50, p90, top = quantiles([row.get(k, 0.0) for row in per_step])
        lines.append(f"| {k} | {p50:.3f} | {p90:.3f} | {top:.3f} |")
    ends = runs["ours"].get("ends") or []
    walls = [b - a for a, b in zip([0.0, *ends], ends, strict=False)]
    slowest = sorted(range(1, len(walls)), key=walls.__getitem__, reverse=True)[:5]  # the first: above
    lines.append("\nour slowest steps after the first (step: wall s, phases s, rounds):")
    for i in sorted(slowest):
        row = per_step[i] if i < len(per_step) else {}
        shown = ", ".join(f"{k} {v:.2f}" for k, v in sorted(row.items()) if k != "rounds" and v >= 0.05)
        lines.append(f"  {i + 1}: {walls[i]:.2f} s ({shown}; rounds {row.get('rounds', 0):.0f})")
    return "\n".join(lines)


def table(root: Path) -> str:
    """One table of every side-by-side run kept under ``root`` (``*/result-load*.json``: the last run of
    each task at each ``--load``): the update's batch per second of wall time for both and their ratio,
    held-out accuracy at T=1 and greedy, step p50 and the load average at the start and the end."""
    lines = [
        "| task | busy | load avg | steps TRL / ours | trained/s TRL | ours | ratio "
        "| T=1 base / TRL / ours | greedy base / TRL / ours | step p50 TRL / ours (s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in sorted(root.glob("*/result-load*.json")):
        r = json.loads(path.read_text())
        runs, acc, base = r["runs"], r["acc"], r["base"]
        rate = {w: runs[w]["trained"] / runs[w]["wall"] for w in runs}
        p50 = {w: quantiles(step_times(runs[w]))[0] for w in runs}
        n = r.get("eval_problems", 256)
        lines.append(
            f"| {r['task']} | {r['busy']} | {r['load'][0]:.1f} -> {r['load'][1]:.1f} "
            f"| {runs['trl']['steps']} / {runs['ours']['steps']} | {rate['trl']:.1f} | {rate['ours']:.1f} "
            f"| {rate['ours'] / rate['trl']:.2f}x "
            f"| {base['acc_t1']:.3f} / {acc['trl']['acc_t1']:.3f} / {acc['ours']['acc_t1']:.3f} (4 x {n}) "
            f"| {base['acc_greedy']:.3f} / {acc['trl']['acc_greedy']:.3f} / {acc['ours']['acc_greedy']:.3f} "
            f"| {p50['trl']:.2f} / {p50['ours']:.2f} |"
        )
    return "\n".join(lines)


def busy(count: int) -> list[subprocess.Popen]:
    """``count`` processes that spin on whatever core the OS gives them: a competing load."""
    spin = "while True:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]


def peer_python() -> Path:
    """The TRL side's Python: the peer venv when it exists, else this one when it has TRL (the dev lock
    pins the same trl 1.16.0 since the TRL integration's test)."""
    if PEER_PYTHON.is_file():
        return PEER_PYTHON
    import importlib.util

    if importlib.util.find_spec("trl") is not None:
        return Path(sys.executable)
    sys.exit(f"{PEER_PYTHON} is missing and TRL is not installed: see this file's docstring")


def child(which: str, core: int, start: float, budget: float, ours_set: list[str]) -> subprocess.Popen:
    """One trainer in its own process on ``core``, on TASK, writing its log into OUT."""
    python = str(peer_python() if which == "trl" else Path(sys.executable))
    cmd = [
        "taskset",
        "-c",
        str(core),
        python,
        __file__,
        "--child",
        which,
        "--start",
        str(start),
        "--out",
        str(OUT),
        "--budget-s",
        str(budget),
        "--task",
        TASK.name,
    ]
    for item in ours_set if which == "ours" else []:
        cmd += ["--ours-set", item]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    log = open(OUT / f"{which}.log", "w")  # noqa: SIM115  (the child writes it until it ends)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT, env=env)


def result_of(proc: subprocess.Popen, which: str) -> dict:
    stdout, _ = proc.communicate()
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"the {which} run failed; see {OUT / (which + '.log')}")


def main() -> int:
    global OUT, TASK
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=sorted(TASKS), default="digitsum", help="the task (module docstring)")
    p.add_argument("--budget-s", type=float, default=600.0)
    p.add_argument(
        "--pretrain-steps", type=int, help="the model's pre-training (default: the task's, 300 or 600)"
    )
    p.add_argument("--child", choices=["ours", "trl"])
    p.add_argument("--start", type=float, default=0.0)
    p.add_argument(
        "--out",
        type=Path,
        help="assets, runs and logs (default var/bench/peer, var/bench/peer-TASK for the others)",
    )
    p.add_argument("--profile", type=int, metavar="STEPS", help="profile our step instead (see profile())")
    p.add_argument(
        "--ours-set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="our trainer's config (VALUE as JSON), e.g. rollout.one_step_off_policy=true",
    )
    p.add_argument(
        "--cores",
        default="0,1",
        help="the cores of ours and of TRL (default 0,1; swap them to "
        "see how much the cores' other load moves the ratio)",
    )
    p.add_argument(
        "--load",
        type=int,
        default=0,
        metavar="N",
        help="N busy processes competing for the cores while both train (the same load for both)",
    )
    p.add_argument(
        "--eval-problems",
        type=int,
        default=256,
        choices=range(1, 257),
        metavar="N",
        help="judge both on the first N of the 256 held-out problems (default all; the long task's "
        "answers make a full pass take minutes a model)",
    )
    p.add_argument(
        "--table",
        action="store_true",
        help="print one table of the last run of every task at every --load kept under var/bench, and exit",
    )
    args = p.parse_args()
    if args.table:
        print(table(OUT.parent))
        return 0
    overrides = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.ours_set)}
    TASK = TASKS[args.task]
    OUT = args.out or (OUT if TASK.name == "digitsum" else OUT.with_name(f"peer-{TASK.name}"))
    assets = OUT / "assets"
    if args.profile:
        build(assets, args.pretrain_steps or TASK.pretrain_steps)
        profile(assets, args.profile)
        return 0
    if args.child:
        if args.child == "ours":
            result = run_ours(assets, OUT / args.child, args.start, args.budget_s, overrides)
        else:
            result = run_trl(assets, OUT / args.child, args.start, args.budget_s)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    peer_python()  # refuses before minutes of set-up when TRL is nowhere
    OUT.mkdir(parents=True, exist_ok=True)
    info = build(assets, args.pretrain_steps or TASK.pretrain_steps)
    load = os.getloadavg()
    for which in ("ours", "trl"):
        (OUT / f"{which}.ready").unlink(missing_ok=True)
    start = time.time() + 75.0  # both load their model and stack first, then start on the same instant
    cores = [int(c) for c in args.cores.split(",")]
    pairs = zip(("ours", "trl"), cores, strict=True)
    procs = {w: child(w, core, start, args.budget_s, args.ours_set) for w, core in pairs}
    competing = busy(args.load)
    try:
        runs = {w: result_of(proc, w) for w, proc in procs.items()}
        end_load = os.getloadavg()[0]
    finally:
        for proc in competing:
            proc.kill()
    acc = {w: evaluate(OUT / w / "final", assets, args.eval_problems) for w in runs}
    # the starting model's scores: the same in every run judged on as many problems (named by their count:
    # a base_eval.json of before is of the evaluator that judged all prompts in one batch, other draws)
    base_file = assets / f"base_eval_{args.eval_problems}.json"
    if not base_file.is_file():
        base_file.write_text(json.dumps(evaluate(assets / "model", assets, args.eval_problems)))
    base = json.loads(base_file.read_text())
    print(
        f"\nours with {overrides or 'the defaults'}; cores ours/TRL {args.cores}; {args.load} busy processes"
    )
    print(
        f"task {TASK.name}; model {info['params'] / 1e6:.2f}M parameters; budget {args.budget_s:.0f} s each; "
        f"load average at start {load[0]:.1f} / {load[1]:.1f}, at end {end_load:.1f}"
    )
    print(f"held-out before training: T=1 {base['acc_t1']:.3f}, greedy {base['acc_greedy']:.3f}")
    print("| | TRL | ours | ratio |\n|---|---|---|---|")
    rate = {w: (r["trained"] / r["wall"], r["generated"] / r["wall"]) for w, r in runs.items()}
    print(f"| steps | {runs['trl']['steps']} | {runs['ours']['steps']} | |")
    for i, name in enumerate(("samples trained per second", "samples generated per second")):
        t, o = rate["trl"][i], rate["ours"][i]
        print(f"| {name} | {t:.1f} | {o:.1f} | {o / t:.2f}x |")
    print(
        f"| held-out accuracy, T=1 (4 x {args.eval_problems}) "
        f"| {acc['trl']['acc_t1']:.3f} | {acc['ours']['acc_t1']:.3f} | |"
    )
    print(
        f"| held-out accuracy, greedy | {acc['trl']['acc_greedy']:.3f} | {acc['ours']['acc_greedy']:.3f} | |"
    )
    print("late at the start (s):", {w: round(r["late"], 1) for w, r in runs.items()})
    print("our mean seconds per step by phase:", json.dumps(runs["ours"]["phases"]))
    print("\n" + tails(runs))
    kept = [] if overrides else [f"result-load{args.load}.json"]  # --table: the shipped settings' runs
    result = {
        "runs": runs,
        "acc": acc,
        "base": base,
        "info": info,
        "ours_set": overrides,
        "cores": args.cores,
        "load": [load[0], end_load],
        "busy": args.load,
        "task": TASK.name,
        "eval_problems": args.eval_problems,
    }
    text = json.dumps(result, indent=1)
    for name in ["result.json", *kept]:
        (OUT / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
