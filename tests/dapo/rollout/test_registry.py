"""The engine registry: names, the error for an unknown name, and vLLM imported only when chosen."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from dapo.rollout import ENGINES, RolloutEngine, create_engine

REPO = Path(__file__).resolve().parents[3]


def test_it_registers_hf_cpu_and_vllm():
    assert {"hf", "cpu", "vllm"} <= set(ENGINES)


def test_an_unknown_name_raises_value_error_listing_the_valid_names():
    with pytest.raises(ValueError, match="unknown rollout engine 'sglang'") as info:
        create_engine("sglang", eos_token_ids=[2], pad_token_id=0)
    for name in ENGINES:
        assert name in str(info.value)


def test_cpu_is_an_alias_of_the_hf_engine():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    engine = create_engine("cpu", model=LlamaForCausalLM(config), eos_token_ids=[2], pad_token_id=0)
    assert isinstance(engine, RolloutEngine) and engine.name == "hf"


def test_importing_the_package_imports_neither_vllm_nor_ray():
    code = "import sys, dapo.rollout; print(sorted(m for m in ('vllm', 'ray') if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert result.stdout.strip() == "[]"
