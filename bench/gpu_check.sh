#!/usr/bin/env bash
# One-GPU check of the DAPO stack, in under 8 minutes, with no downloads:
#   1. environment: torch, CUDA device, vLLM (optional);
#   2. engine conformance tests on CUDA (pytest -m "gpu or vllm": hf-cuda, and vllm where installed);
#   3. DAPO steps in one process on the GPU (bf16, a ~25M-parameter Llama built here from a config, the demo's
#      character tokenizer and arithmetic problems): rollout and training tokens/s;
#   4. DAPO steps on the Ray backend (a local Ray, one worker holding the GPU): the same figures.
#
#   bench/gpu_check.sh            # on a machine with a CUDA GPU
#   bench/gpu_check.sh --cpu      # dry run of the same steps on CPU with a tiny model (checks the script)
#
# Environment: PYTHON (default .venv/bin/python, else python3), OUT_DIR (default a new /tmp/dapo-gpu-*).
# Prints a JSON line "RESULT {...}" per training phase, for bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=gpu
if [[ "${1:-}" == "--cpu" ]]; then MODE=cpu; fi
PY=${PYTHON:-.venv/bin/python}
if [[ ! -x "$PY" ]]; then PY=python3; fi
OUT=${OUT_DIR:-$(mktemp -d /tmp/dapo-gpu-XXXXXX)}
mkdir -p "$OUT"
export DAPO_VAR_DIR="$OUT/var" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
started=$SECONDS

echo "== 1/4 environment ($MODE mode, output in $OUT)"
"$PY" - "$MODE" <<'EOF'
import importlib.util, sys
import torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, cuda available: {torch.cuda.is_available()}")
if torch.cuda.is_available():
    print(f"device: {torch.cuda.get_device_name(0)}, bf16 supported: {torch.cuda.is_bf16_supported()}")
for name in ("vllm", "ray", "transformers"):
    spec = importlib.util.find_spec(name)
    version = __import__(name).__version__ if spec else "not installed"
    print(f"{name}: {version}")
if sys.argv[1] == "gpu" and not torch.cuda.is_available():
    sys.exit("no CUDA device: run on a GPU machine, or use --cpu for a dry run")
EOF

echo "== 2/4 engine conformance on CUDA"
timeout 300 "$PY" -m pytest tests/dapo/rollout -m "gpu or vllm" -q -rs -p no:cacheprovider

steps() {  # $1 = backend (local | ray)
  timeout 240 "$PY" - "$MODE" "$OUT" "$1" <<'EOF'
import json, sys
from pathlib import Path

mode, out, backend = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
gpu = mode == "gpu"

from dapo.config import (AlgorithmConfig, CheckpointConfig, DataConfig, ExecutionConfig, ModelConfig,
                         OptimConfig, RolloutConfig, RunConfig, ValidationConfig)
from dapo.report import Sink
from dapo.trainer import Trainer


def build_assets() -> tuple[Path, Path]:
    """A random Llama (~25M parameters on GPU, ~0.1M in the dry run) with the demo tokenizer; 256 problems."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from dapo.data import write_parquet
    from dapo.demo import build_tokenizer, make_arithmetic_problems

    model_dir, data = out / "model", out / "train.parquet"
    if not (model_dir / "config.json").is_file():
        tok = build_tokenizer()
        hidden, layers = (512, 8) if gpu else (64, 2)
        cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 11 // 4,
                          num_hidden_layers=layers, num_attention_heads=hidden // 64,
                          num_key_value_heads=hidden // 64, max_position_embeddings=512,
                          tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                          eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        torch.manual_seed(0)
        LlamaForCausalLM(cfg).save_pretrained(model_dir)
        tok.save_pretrained(model_dir)
        write_parquet(make_arithmetic_problems(256, seed=1), data)
    return model_dir, data


class Figures(Sink):
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def on_step(self, report) -> None:
        m = report.metrics
        generated = m["train/response_length/mean"] * m["train/num_prompts_generated"] * n
        self.rows.append({
            "step": report.step,
            "step_s": m["timing_s/step"] - m.get("timing_s/save_checkpoint", 0.0),
            "rollout_tok_s": generated / max(m["timing_s/gen"], 1e-9),
            "train_tok_s": m["perf/total_num_tokens"] / max(m["timing_s/update_actor"], 1e-9),
            "logprob_tok_s": m["perf/total_num_tokens"] / max(m["timing_s/old_log_prob"], 1e-9),
            "max_memory_gb": m.get("perf/max_memory_allocated_gb", 0.0),
        })


model_dir, data = build_assets()
n, prompts, steps = (8, 32, 4) if gpu else (2, 4, 2)
config = RunConfig(
    model=ModelConfig(path=str(model_dir), dtype="bfloat16" if gpu else "float32", device="cuda" if gpu else "cpu"),
    data=DataConfig(train_path=str(data), val_path="", max_prompt_length=64, train_batch_size=prompts,
                    gen_batch_size=prompts),
    rollout=RolloutConfig(engine="hf", n=n, max_response_length=128 if gpu else 16),
    algorithm=AlgorithmConfig(dynamic_sampling=False, overlong_buffer_len=16 if gpu else 4),
    optim=OptimConfig(lr=1e-5, warmup_steps=0, mini_batch_size=prompts // 4, micro_batch_size=64,
                      total_steps=steps),
    validation=ValidationConfig(every_n_steps=0),
    checkpoint=CheckpointConfig(every_n_steps=0, keep_last=1),
    execution=ExecutionConfig(backend=backend, cpus_per_worker=1.0, gpus_per_worker=1.0 if gpu else 0.0,
                              torch_threads=0 if gpu else 1),
    seed=0,
)
figures = Figures()
result = Trainer(config, out / f"run-{backend}", [figures]).fit()
if result.status != "succeeded":
    sys.exit(f"{backend} run failed: {result.error}")
for row in figures.rows:
    print(f"step {row['step']}: {row['step_s']:.2f} s, rollout {row['rollout_tok_s']:.0f} tok/s, "
          f"training {row['train_tok_s']:.0f} tok/s, log-probs {row['logprob_tok_s']:.0f} tok/s")
timed = figures.rows[1:] or figures.rows  # the first step warms up kernels and allocators
summary = {k: sum(r[k] for r in timed) / len(timed) for k in timed[0] if k != "step"}
print("RESULT " + json.dumps({"mode": mode, "backend": backend, "samples_per_step": prompts * n, **summary}))
EOF
}

echo "== 3/4 DAPO steps, one process"
steps local

echo "== 4/4 DAPO steps, Ray backend (one worker)"
if "$PY" -c "import ray" 2>/dev/null; then steps ray; else echo "ray not installed: skipped"; fi

echo "== done in $((SECONDS - started)) s; outputs in $OUT"
