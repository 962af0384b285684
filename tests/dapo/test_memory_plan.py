"""The memory plan: hand-computed figures for a Qwen2.5-7B-shaped model, parameter counts against real
transformers models, the launch check and its message, and no torch in the module."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dapo.learner import memory_plan as mp
from dapo.runconfig import ConfigError, RunConfig

GIB = 2**30
QWEN7B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
}


def qwen_config(**overrides) -> RunConfig:
    base = {
        "model.path": "models/qwen7b",
        "model.dtype": "bfloat16",
        "model.device": "cuda",
        "data.max_prompt_length": 1024,
        "rollout.max_response_length": 3072,
        "rollout.engine": "vllm",
        "rollout.gpu_memory_utilization": 0.5,
        "optim.micro_batch_size": 2,
        "execution.gpu_memory_gb": 80,
    }
    return RunConfig().with_overrides({**base, **overrides})


def terms(plan: mp.MemoryPlan) -> dict[str, int]:
    return {t.key: t.bytes for t in plan.terms}


def test_qwen7b_parameter_count_by_hand():
    h, i, layers, v = 3584, 18944, 28, 152064
    kv = 4 * 128  # 4 kv heads x head_dim 128 (3584 / 28)
    attention = h * h + h + 2 * (h * kv + kv) + h * h  # q (+bias), k and v (+bias), o
    mlp = 3 * h * i  # gate, up, down
    layer = attention + mlp + 2 * h  # two RMSNorms
    assert layer == 233_057_792
    total = layers * layer + 2 * v * h + h  # embeddings, untied head, final norm
    assert total == 7_615_616_512  # the 7.62e9 of Qwen2.5-7B
    shape = mp.model_shape(QWEN7B)
    assert (shape.head_dim, shape.qkv_bias, shape.layer_parameters) == (128, True, layer)
    assert shape.parameters == total


def test_qwen7b_on_one_gpu_by_hand_does_not_fit_and_says_what_to_change():
    plan = mp.estimate(qwen_config(), QWEN7B)
    p = 7_615_616_512
    tokens = 2 * (1024 + 3072)  # micro_batch_size x (prompt + response), padded
    per_token_layer = 4 * 3584 + 2 * (28 + 4) * 128 + 4 * 18944  # norms/proj inputs, q k v o, MLP
    assert per_token_layer == 98_304
    want = {
        "parameters": p * 2,  # bf16
        "gradients": p * 2,
        "optimizer": p * 12,  # fp32 master + m + v
        "activations": tokens * 28 * per_token_layer * 2,
        "logprob_chunks": 1024 * 152064 * 4 * 4,  # chunk capped at 1024 of the 6144 response tokens
        "vllm": int(0.5 * 80 * GIB),
    }
    assert terms(plan) == want
    assert want["optimizer"] / GIB == pytest.approx(85.11, abs=0.01)
    assert want["activations"] / GIB == pytest.approx(42.0, abs=0.01)
    assert plan.activations_with_checkpointing == 28 * tokens * 3584 * 2 + tokens * per_token_layer * 2
    assert plan.total_bytes == sum(want.values())
    assert plan.total_bytes / GIB == pytest.approx(197.81, abs=0.01)
    assert not plan.fits and plan.biggest().key == "optimizer"
    setting, message = plan.error()
    assert setting == "execution.learner_strategy"
    assert "needs 197.8 GiB per GPU, more than the 80 GiB declared" in message
    assert "optimiser state 85.1 GiB: set execution.learner_strategy=fsdp or more learners" in message
    with pytest.raises(ConfigError) as caught:
        mp.check_fits(qwen_config(), QWEN7B)
    assert caught.value.errors == {"execution.learner_strategy": message}


def test_fsdp_over_8_learners_with_checkpointing_by_hand_fits():
    config = qwen_config(
        **{
            "execution.backend": "ray",
            "execution.num_learner_workers": 8,
            "execution.learner_strategy": "fsdp",
            "model.gradient_checkpointing": True,
        }
    )
    plan = mp.estimate(config, QWEN7B)
    shard = 951_952_064  # ceil(7,615,616,512 / 8)
    tokens = 8192
    gathered = (2 * 152064 * 3584 + 3584 + 2 * 233_057_792) * 2  # root + two layers, bf16
    want = {
        "parameters": shard * 2,
        "gradients": shard * 2,
        "optimizer": shard * 12,
        "fsdp_gathered": gathered,
        "activations": 28 * tokens * 3584 * 2 + tokens * 98_304 * 2,  # layer inputs + one layer live
        "logprob_chunks": 1024 * 152064 * 16,
        "vllm": int(0.5 * 80 * GIB),
    }
    assert terms(plan) == want
    assert plan.total_bytes == sum(want.values()) == 67_039_330_304  # 62.4 GiB: fits in 80
    assert plan.total_bytes / GIB == pytest.approx(62.44, abs=0.01)
    assert plan.fits and plan.error() is None and mp.check_fits(config, QWEN7B) == plan


def test_cpu_offload_moves_the_sharded_states_off_the_gpu():
    common = {
        "execution.backend": "ray",
        "execution.num_learner_workers": 2,
        "execution.learner_strategy": "fsdp",
    }
    on = mp.estimate(qwen_config(**common, **{"execution.fsdp_cpu_offload": True}), QWEN7B)
    off = mp.estimate(qwen_config(**common), QWEN7B)
    moved = ("parameters", "gradients", "optimizer")
    assert [t.key for t in on.terms if not t.on_gpu] == list(moved)
    assert off.total_bytes - on.total_bytes == sum(terms(off)[k] for k in moved)
    assert terms(on) == terms(off)  # the figures are listed, only not counted on the GPU


def test_ddp_learners_each_hold_everything_plus_the_gradient_buckets():
    config = qwen_config(**{"execution.backend": "ray", "execution.num_learner_workers": 4})
    t = terms(mp.estimate(config, QWEN7B))
    assert t["parameters"] == t["ddp_buckets"] == 7_615_616_512 * 2
    assert t["optimizer"] == 7_615_616_512 * 12


def test_the_hf_kv_cache_and_the_activations_are_never_held_together():
    plan = mp.estimate(qwen_config(**{"rollout.engine": "hf", "rollout.max_batch_size": 64}), QWEN7B)
    t = terms(plan)
    assert t["kv_cache"] == 64 * 4096 * (2 * 28 * 4 * 128 * 2)  # rows x tokens x K and V per layer, bf16
    assert "vllm" not in t
    training = t["activations"] + t["logprob_chunks"]
    assert plan.total_bytes == sum(t.values()) - t["kv_cache"] - training + max(t["kv_cache"], training)
    default_rows = mp.estimate(qwen_config(**{"rollout.engine": "hf"}), QWEN7B)
    assert terms(default_rows)["kv_cache"] == 24 * 8 * 4096 * (2 * 28 * 4 * 128 * 2)  # gen_batch_size x n


def test_a_token_budget_sets_the_tokens_of_a_micro_batch():
    plan = mp.estimate(qwen_config(**{"optim.micro_batch_max_tokens": 16384}), QWEN7B)
    assert plan.tokens_per_micro_batch == 16384  # rows of similar length packed up to the budget
    assert terms(plan)["activations"] == 16384 * 28 * 98_304 * 2
    assert terms(plan)["logprob_chunks"] == 1024 * 152064 * 16
    one_row = mp.estimate(qwen_config(**{"optim.micro_batch_max_tokens": 4096}), QWEN7B)
    assert one_row.tokens_per_micro_batch == 4096  # the smallest budget: one whole sequence


def test_the_log_prob_chunk_is_the_configured_one():
    plan = mp.estimate(qwen_config(**{"optim.logprob_chunk_tokens": 256}), QWEN7B)
    assert terms(plan)["logprob_chunks"] == 256 * 152064 * 4 * 4
    short = mp.estimate(
        qwen_config(**{"rollout.max_response_length": 100, "optim.micro_batch_size": 3}), QWEN7B
    )
    assert terms(short)["logprob_chunks"] == 300 * 152064 * 16  # fewer response tokens than a chunk


@pytest.mark.parametrize(
    "config",
    [
        {
            "model_type": "llama",
            "hidden_size": 64,
            "intermediate_size": 96,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 101,
            "tie_word_embeddings": True,
        },
        {
            "model_type": "qwen2",
            "hidden_size": 64,
            "intermediate_size": 96,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "vocab_size": 111,
            "tie_word_embeddings": False,
        },
    ],
)
def test_parameter_count_matches_a_real_transformers_model(config):
    import transformers

    kind = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[config["model_type"]]
    hf_config = kind(**{k: v for k, v in config.items() if k != "model_type"})
    model = transformers.AutoModelForCausalLM.from_config(hf_config)
    assert mp.model_shape(hf_config.to_dict()).parameters == sum(p.numel() for p in model.parameters())


def test_the_demo_model_fits_and_unplannable_or_cpu_runs_are_not_checked():
    demo = mp.read_model_config(Path("assets/demo/model"))
    assert demo is not None and mp.model_shape(demo).parameters > 0
    gpu = RunConfig().with_overrides({"model.device": "cuda"})
    assert mp.check_fits(gpu, demo).fits
    assert mp.check_fits(qwen_config(**{"model.device": "cpu"}), QWEN7B) is None
    assert mp.check_fits(gpu, {"architectures": ["LlamaForCausalLM"]}) is None  # sizes unknown
    assert mp.check_fits(gpu, None) is None
    with pytest.raises(mp.PlanError, match="lacks hidden_size"):
        mp.model_shape({"num_attention_heads": 2})


def test_the_plan_table_and_dict():
    plan = mp.estimate(qwen_config(), QWEN7B)
    text = plan.table()
    assert "7,615,616,512 parameters (7.62B)" in text and "optimiser state" in text and "does NOT fit" in text
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["fits"] is False and data["error"] == plan.error()[1]
    assert [t["key"] for t in data["terms"]][:3] == ["parameters", "gradients", "optimizer"]


def test_the_module_imports_no_torch():
    code = (
        "import sys, dapo.learner.memory_plan;"
        " print([m for m in ('torch', 'transformers') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_cli_prints_the_plan_and_refuses_a_gpu_run_that_cannot_fit(tmp_path, capsys):
    from dapo import train

    assert train.main(["--preset", "tiny_cpu", "--plan"]) == 0
    out = capsys.readouterr().out
    assert "1,790,976 parameters" in out and "total per GPU" in out and ": fits" in out
    args = ["--preset", "tiny_cpu", "--set", "model.device=cuda", "--set", "execution.gpu_memory_gb=0.01"]
    assert train.main([*args, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "model.gradient_checkpointing: needs 0.4 GiB per GPU, more than the 0.01 GiB declared" in err
    assert not (tmp_path / "run").exists()  # refused before anything was written
    assert train.main(["--preset", "tiny_cpu", "--set", "model.path=/nonexistent", "--plan"]) == 2
