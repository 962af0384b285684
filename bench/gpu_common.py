"""What the GPU check's steps share (bench/gpu_check.py, bench/gpu_engines.py): model shapes, the random
models and the problems they run on, and the RESULT line every step prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def llama_shape(hidden: int, mlp: int, layers: int, heads: int, kv_heads: int, vocab: int) -> dict[str, int]:
    return dict(
        hidden_size=hidden,
        intermediate_size=mlp,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        vocab_size=vocab,
        max_position_embeddings=4096,
    )


# Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 query / 2 KV heads, MLP 4864, vocabulary 151,936, tied
# embeddings: 494M parameters), as a Llama: a qwen2 folder would make transformers load its own tokenizer
# class over the demo's character tokenizer. Random weights, bf16, built here: nothing is downloaded.
REAL_SHAPE = llama_shape(896, 4864, 24, 14, 2, 151_936)
SMALL_SHAPE = llama_shape(512, 1408, 8, 8, 8, 103)  # 25M parameters, the demo tokenizer's vocabulary
TINY_SHAPE = llama_shape(64, 128, 2, 2, 1, 4096)


def result(**figures: Any) -> None:
    print("RESULT " + json.dumps(figures), flush=True)


def build_model(out: Path, shape: dict, name: str) -> tuple[Path, int]:
    """A random LlamaForCausalLM of `shape` with the demo tokenizer, saved in bf16; (folder, parameters)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from dapo.data.demo import build_tokenizer

    folder = out / name
    tok = build_tokenizer()
    cfg = LlamaConfig(
        **shape,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    if not (folder / "config.json").is_file():
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
    return folder, params


def problems_file(out: Path) -> Path:
    from dapo.data.demo import make_arithmetic_problems
    from dapo.data.problems import write_parquet

    path = out / "train.parquet"
    if not path.is_file():
        write_parquet(make_arithmetic_problems(256, seed=1), path)
    return path
