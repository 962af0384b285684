#!/usr/bin/env bash
# One-GPU check of the DAPO stack, in under 8 minutes, with no downloads (install: requirements-gpu.lock):
#   1. environment: torch, CUDA device, the vLLM release (one that dapo/rollout/vllm.py supports);
#   2. engine conformance tests on CUDA (pytest -m "gpu or vllm": hf-cuda and vllm);
#   3. DAPO steps in one process (bf16, a ~25M-parameter Llama, demo tokenizer, hf engine);
#   4. the same on the Ray backend (a local Ray, one worker holding the GPU);
#   5. a Qwen2.5-0.5B-shaped random model (bf16, vocabulary 151,936, built from a config): vLLM and the
#      hf engine on the same 64 prompts x 8 samples (tokens/s, log-prob gap to the learner), then vLLM's
#      weight sync from a learner on the GPU (seconds; the gap must close);
#   6. DAPO steps on that model: Ray backend, vLLM colocated with an FSDP learner on the one GPU (rollout
#      and learner tokens/s, learner MFU, peak GPU memory of all processes).
#
#   bench/gpu_check.sh            # on a machine with a CUDA GPU
#   bench/gpu_check.sh --cpu      # dry run of the same steps on CPU with tiny models, hf engine for vLLM
#
# Environment: PYTHON (default .venv/bin/python, else python3), OUT_DIR (default a new /tmp/dapo-gpu-*),
# BUDGET_S (default 470, 4x in the dry run: the whole check stops there), STEPS (default "1 2 3 4 5 6": the
# steps to run). Prints "RESULT {...}" lines for bench/README.md and a summary with one line per step; a
# failed step says why in one line, the next step still runs, and the exit status is 1 when any failed.
set -uo pipefail
cd "$(dirname "$0")/.."

MODE=gpu
if [[ "${1:-}" == "--cpu" ]]; then MODE=cpu; fi
PY=${PYTHON:-.venv/bin/python}
if [[ ! -x "$PY" ]]; then PY=python3; fi
OUT=${OUT_DIR:-$(mktemp -d /tmp/dapo-gpu-XXXXXX)}
SCALE=1  # the dry run gives every step 4x its time: a busy 2-core VM, not a GPU node
if [[ $MODE == cpu ]]; then SCALE=4; fi
BUDGET_S=${BUDGET_S:-$((470 * SCALE))}
STEPS=${STEPS:-1 2 3 4 5 6}
mkdir -p "$OUT"
export DAPO_VAR_DIR="$OUT/var" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false
started=$SECONDS
SUMMARY=()
FAILED=0

step() {  # step NAME LIMIT_S COMMAND...: run with a time limit, keep its log, record one summary line
  local name=$1 limit=$(($2 * SCALE))
  shift 2
  if [[ " $STEPS " != *" ${name%% *} "* ]]; then
    SUMMARY+=("skip  $name (not in STEPS)")
    return
  fi
  local left=$((BUDGET_S - (SECONDS - started)))
  if ((left < 15)); then
    SUMMARY+=("FAIL  $name: not run, the ${BUDGET_S} s budget is spent")
    FAILED=1
    return
  fi
  ((limit > left)) && limit=$left
  local log="$OUT/step-${name%% *}.log" t0=$SECONDS
  echo "== $name (limit ${limit} s)"
  timeout "$limit" "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]} reason
  if ((rc == 0)); then
    SUMMARY+=("ok    $name ($((SECONDS - t0)) s)")
    return
  fi
  FAILED=1
  if ((rc == 124)); then
    reason="stopped after ${limit} s (time limit)"
  else
    reason=$(grep -E '^FAIL |^(FAILED|ERROR) tests/|^[A-Za-z_.]*(Error|Exception): ' "$log" | tail -n 1)
    reason=${reason:-"exit status $rc, no error line: see $log"}
  fi
  SUMMARY+=("FAIL  $name: ${reason:0:240}")
}

echo "== output in $OUT ($MODE mode)"
step "1 environment" 60 "$PY" bench/gpu_check.py env "$MODE"
step "2 engine conformance" 180 "$PY" -m pytest tests/dapo/rollout -m "gpu or vllm" -q -rs -p no:cacheprovider
step "3 DAPO steps, one process" 90 "$PY" bench/gpu_check.py steps "$MODE" "$OUT" local
if "$PY" -c "import ray" 2>/dev/null; then
  step "4 DAPO steps, Ray" 120 "$PY" bench/gpu_check.py steps "$MODE" "$OUT" ray
  step "5 vLLM vs hf, weight sync (0.5B shape)" 150 "$PY" bench/gpu_check.py engines "$MODE" "$OUT"
  step "6 DAPO steps, vLLM + FSDP (0.5B shape)" 240 "$PY" bench/gpu_check.py real "$MODE" "$OUT"
else
  step "5 vLLM vs hf, weight sync (0.5B shape)" 150 "$PY" bench/gpu_check.py engines "$MODE" "$OUT"
  SUMMARY+=("FAIL  4 and 6: ray is not installed (pip install -r requirements-gpu.lock)")
  FAILED=1
fi

echo
echo "== summary ($MODE mode, $((SECONDS - started)) s, outputs and logs in $OUT)"
printf '%s\n' "${SUMMARY[@]}"
exit $FAILED
