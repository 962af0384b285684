"""A real TRL GRPOTrainer run of a few steps on a tiny model, with dapo's PlatformCallback: run by
tests/dapo/integrations/test_trl.py in a Python that has TRL (``python trl_job.py URL TOKEN OUT``).

The model is a character-level Llama (hidden 32, 2 layers) built from a config, untrained: the test is of
what reaches the platform, not of learning. Two reward functions, so the samples carry a score per function.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

from dapo.integrations.trl import PlatformCallback

SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]
ALPHABET = " 0123456789+=?QA:"


def tiny() -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    vocab = {t: i for i, t in enumerate([*SPECIAL, *ALPHABET])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(SPECIAL)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    ids = {f"{n}_token_id": getattr(tok, f"{n}_token_id") for n in ("bos", "eos", "pad")}
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        **ids,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config), tok


def exact(completions: list[str], answer: list[str], **kwargs: object) -> list[float]:
    return [1.0 if c.strip().startswith(a) else 0.0 for c, a in zip(completions, answer, strict=True)]


def brevity(completions: list[str], **kwargs: object) -> list[float]:
    return [-len(c) / 8 for c in completions]


def main(url: str, token: str, out: str) -> None:
    torch.set_num_threads(1)
    model, tok = tiny()
    rows = [{"prompt": f"Q:{a}+{b}=?A:", "answer": str(a + b)} for a in range(4) for b in range(4)]
    args = GRPOConfig(
        output_dir=out,
        max_steps=3,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        learning_rate=1e-3,
        loss_type="dapo",
        epsilon_high=0.28,
        beta=0.0,
        logging_steps=1,
        log_completions=True,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
        reward_weights=[1.0, 0.5],
        disable_tqdm=True,
    )
    callback = PlatformCallback(url=url, token=token, name="trl tiny grpo")
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[exact, brevity],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        callbacks=[callback],
    )
    trainer.train()
    print(json.dumps({"run_id": callback.run_id, "sent": callback.sender.sent}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
    Path(sys.argv[3], "done").write_text("ok")
