"""Shared fixtures for the engine's tests: a tiny model and dataset built locally (no download)."""

from pathlib import Path

import pytest

from dapo.runconfig import RunConfig
from dapo.runconfig.presets import tiny_cpu


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory) -> Path:
    """A randomly initialised demo-architecture Llama + tokenizer, and small train/test parquet files."""
    import torch

    from dapo.data.demo import build_model, build_tokenizer, make_arithmetic_problems
    from dapo.data.problems import write_parquet

    root = tmp_path_factory.mktemp("tiny")
    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    model = build_model(tokenizer, seed=0)
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    write_parquet(make_arithmetic_problems(64, seed=1), root / "train.parquet")
    write_parquet(make_arithmetic_problems(6, seed=2), root / "test.parquet")
    return root


@pytest.fixture
def tiny_config(tiny_assets) -> RunConfig:
    """Full DAPO at a size that runs a step in a few seconds on one core."""
    return tiny_cpu().with_overrides(
        {
            "model.path": str(tiny_assets / "model"),
            "data.train_path": str(tiny_assets / "train.parquet"),
            "data.val_path": str(tiny_assets / "test.parquet"),
            "data.train_batch_size": 4,
            "data.gen_batch_size": 4,
            "rollout.n": 4,
            "rollout.max_response_length": 12,
            "algorithm.overlong_buffer_len": 4,
            "algorithm.max_num_gen_batches": 3,
            "optim.mini_batch_size": 2,
            "optim.micro_batch_size": 3,
            "optim.total_steps": 2,
            "optim.warmup_steps": 0,
            "optim.weight_decay": 0.0,
            "optim.lr": 1e-3,
            "validation.every_n_steps": 0,
            "checkpoint.every_n_steps": 1,
            "execution.torch_threads": 1,
        }
    )
