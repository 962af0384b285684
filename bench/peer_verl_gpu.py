"""Our DAPO engine against verl 0.9.1's DAPO recipe on one GPU, side by side (issue 31, item 3).

Both sides train the same model on the same data with the same batch, lengths, learning rate and sampling,
vLLM generating on both, one after the other on the one GPU (each takes most of its memory), and report
generation and update tokens/s, the step time and the trained samples per second of wall time.

- Model: a Qwen2.5-0.5B-shaped Llama (bench/gpu_common.py REAL_SHAPE, 494M parameters, bf16) with the demo's
  character tokenizer, pre-trained here for 300 steps on worked arithmetic (by estimate under a minute on
  an H100) so that its groups mix right and wrong answers: a random model answers nothing right, every
  group would be dropped by dynamic sampling, and verl's V1 trainer, which ignores
  ``max_num_gen_batches``, would generate forever. Nothing is downloaded.
- Data: the demo's arithmetic (``Compute 7+5-3.``, ``Answer: 9``), 512 problems the pre-training never saw,
  written once as verl's RLHFDataset reads it (``prompt`` chat list, ``data_source``,
  ``reward_model.ground_truth``, ``extra_info``) and once by our own writer.
- Reward: ``compute_score`` below is verl's custom reward function (``reward.custom_reward_function``) and
  calls our math_dapo verdict, so both sides score every response identically; verl's ``dapo`` reward
  manager adds the soft overlong punishment with the same formula as ours (length with the EOS token).
- verl: ``python -m verl.trainer.main_ppo`` with the overrides of :func:`verl_overrides`, its DAPO recipe
  (run_dapo_qwen2.5_32b.sh) scaled down: GRPO advantages, no KL, clip 0.2 / 0.28 (c 10), token-mean loss,
  ``algorithm.filter_groups`` on ``acc``, the ``dapo`` reward manager's overlong buffer, dynamic batch
  sizes by tokens, gradient checkpointing, FSDP, vLLM at tensor parallel 1. One departure, against us:
  sdpa attention on padded batches (``use_remove_padding=False``), because PyPI carries flash-attn as
  source only (a long CUDA build). One choice for both sides: vLLM with CUDA graphs off
  (``enforce_eager``), whose capture costs a start-up the few steps here could not repay. verl's metrics
  come from its file logger.
- Ours: the same settings through our runner (Ray backend, vLLM colocated with an FSDP learner, as
  bench/gpu_check.py's "real" step), our dynamic sampling with rounds sized to the missing groups (as
  verl V1's refill), reading our step reports.

Install, on a machine with one CUDA GPU and a package index (verl needs transformers < 5.11, so it cannot
share our GPU lock; the commands are in bench/README.md "Against verl on one GPU"):

    python3.11 -m venv var/verl-venv && var/verl-venv/bin/pip install -r bench/requirements-verl-gpu.txt
    ~/dapo-gpu/bin/python bench/peer_verl_gpu.py --gpu --verl-python var/verl-venv/bin/python
    .venv/bin/python bench/peer_verl_gpu.py --cpu     # the dry run: everything a GPU is not needed for

Prints ``RESULT {...}`` lines (as bench/gpu_check.py) and one table. A side that fails or runs out of its
time says why in one line and the other still runs.

It is longer than 400 lines because both sides' settings, and the checks that they are the same, must be
read side by side to see that the two trainers do the same work.
"""

# No ``from __future__ import annotations``: verl loads this file as its reward module without registering
# it in sys.modules, and a dataclass with postponed annotations then fails to build (Bench below).
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]  # our package, and gpu_common beside this file
REQUIREMENTS = ROOT / "bench" / "requirements-verl-gpu.txt"
SEED = 42


# ---- verl's custom reward function: this module is its file (stdlib imports only at module level) -----


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **_: Any
) -> dict[str, Any]:
    """verl's ``compute_score`` protocol, answered by our math_dapo verdict (+1 right, -1 wrong). ``acc`` is
    the metric ``algorithm.filter_groups`` keeps groups by, as in verl's own math_dapo."""
    from dapo.rewards.math_dapo import math_dapo_score

    verdict = math_dapo_score(solution_str, ground_truth)
    return {"score": verdict.score, "acc": bool(verdict.acc), "pred": verdict.pred}


# ---- the settings both sides share ----------------------------------------------------------------


@dataclass(frozen=True)
class Bench:
    """One side-by-side: the same numbers go into verl's overrides and into our config."""

    gpu: bool
    out: Path
    steps: int = 8
    prompts: int = 32  # prompts per step after dynamic sampling (verl data.train_batch_size)
    n: int = 8  # samples per prompt (verl rollout.n)
    mini: int = 8  # prompts per optimiser step (verl ppo_mini_batch_size): 4 updates a step
    max_prompt: int = 64
    max_new: int = 64
    overlong: int = 16  # the soft punishment's buffer (verl overlong_buffer_cfg.len)
    lr: float = 1e-6  # the DAPO recipe's
    gpu_memory: float = 0.5  # vLLM's share of the GPU on both sides
    max_tokens: int = 16384  # token budget of a forward/backward pass (verl ppo_max_token_len_per_gpu)
    pretrain_steps: int = 300
    pretrain_lr: float = 5e-4


def dry_run(out: Path) -> Bench:
    """The CPU dry run's sizes: an 81K-parameter model, 4 prompts x 4, 2 steps."""
    return Bench(
        gpu=False,
        out=out,
        steps=2,
        prompts=4,
        n=4,
        mini=2,
        max_new=32,
        overlong=8,
        max_tokens=4096,
        pretrain_steps=150,
        pretrain_lr=3e-3,
    )


# ---- model and data (built once, used by both sides) ------------------------------------------------


def build_data(b: Bench) -> tuple[Path, Path]:
    """(verl's parquet, ours): the same 512 demo problems in the two writers' hands."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dapo.data.demo import make_arithmetic_problems
    from dapo.data.problems import write_parquet

    problems = make_arithmetic_problems(512, seed=1)
    verl_rows = [
        {
            "data_source": p.data_source,
            "prompt": [{"role": m["role"], "content": m["content"]} for m in p.messages],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": p.ground_truth},
            "extra_info": {"index": p.index, "split": "train"},
        }
        for p in problems
    ]
    b.out.mkdir(parents=True, exist_ok=True)
    verl_file, ours_file = b.out / "verl-train.parquet", b.out / "ours-train.parquet"
    pq.write_table(pa.Table.from_pylist(verl_rows), verl_file)
    write_parquet(problems, ours_file)
    return verl_file, ours_file


def build_model(b: Bench, exclude: set[str]) -> Path:
    """The shared starting model: REAL_SHAPE (a tiny shape in the dry run), pre-trained on worked solutions
    of problems outside ``exclude`` (the training prompts), saved in bf16 (float32 on CPU)."""
    import torch
    from gpu_common import REAL_SHAPE, TINY_SHAPE
    from gpu_common import build_model as random_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dapo.data.demo import pretrain

    folder = b.out / "model"
    if (folder / "config.json").is_file():
        return folder
    shape = REAL_SHAPE if b.gpu else dict(TINY_SHAPE, vocab_size=103)
    random_dir, params = random_model(b.out, shape, "model-random")
    device = "cuda" if b.gpu else "cpu"
    if not b.gpu:
        torch.set_num_threads(1)  # two threads on shared, busy cores thrash (bench/README.md, Ray overhead)
    model = AutoModelForCausalLM.from_pretrained(random_dir, dtype=torch.float32).to(device)
    tok = AutoTokenizer.from_pretrained(random_dir)

    class OnDevice(torch.nn.Module):  # demo.pretrain builds its batches on the CPU
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, **batch: Any) -> Any:
            with torch.autocast(device, dtype=torch.bfloat16, enabled=b.gpu):
                return self.inner(**{k: v.to(device) for k, v in batch.items()})

    started = time.perf_counter()
    loss = pretrain(
        OnDevice(), tok, steps=b.pretrain_steps, seed=SEED, exclude=exclude, lr=b.pretrain_lr, progress=False
    )
    model.to(torch.bfloat16 if b.gpu else torch.float32).save_pretrained(folder)
    tok.save_pretrained(folder)
    print(
        f"model: {params / 1e6:.1f}M parameters, pre-trained {b.pretrain_steps} steps in "
        f"{time.perf_counter() - started:.0f} s, final loss {loss:.3f}",
        flush=True,
    )
    return folder


# ---- verl's side ---------------------------------------------------------------------------------


def verl_settings(b: Bench, model: Path, data: Path) -> dict[str, Any]:
    """verl's DAPO recipe at this bench's size, as hydra keys (a leading ``+`` adds a key verl's yaml does
    not declare: the reward manager and the model's config read them)."""
    actor, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    return {
        "algorithm.adv_estimator": "grpo",
        "algorithm.use_kl_in_reward": False,
        "algorithm.kl_ctrl.kl_coef": 0.0,
        "algorithm.filter_groups.enable": True,
        "algorithm.filter_groups.metric": "acc",
        "algorithm.filter_groups.max_num_gen_batches": 10,
        "data.train_files": str(data),
        "data.val_files": str(data),
        "data.prompt_key": "prompt",
        "data.max_prompt_length": b.max_prompt,
        "data.max_response_length": b.max_new,
        "data.train_batch_size": b.prompts,
        "data.truncation": "error",
        "data.seed": SEED,
        "actor_rollout_ref.model.path": str(model),
        "actor_rollout_ref.model.use_remove_padding": False,
        "actor_rollout_ref.model.enable_gradient_checkpointing": True,
        "+actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
        f"{actor}.strategy": "fsdp",
        f"{actor}.optim.lr": b.lr,
        f"{actor}.optim.lr_warmup_steps": 0,
        f"{actor}.optim.weight_decay": 0.1,
        f"{actor}.ppo_mini_batch_size": b.mini,
        f"{actor}.ppo_epochs": 1,
        f"{actor}.use_dynamic_bsz": True,
        f"{actor}.ppo_max_token_len_per_gpu": b.max_tokens,
        f"{actor}.clip_ratio_low": 0.2,
        f"{actor}.clip_ratio_high": 0.28,
        f"{actor}.clip_ratio_c": 10.0,
        f"{actor}.loss_agg_mode": "token-mean",
        f"{actor}.use_kl_loss": False,
        f"{actor}.kl_loss_coef": 0.0,
        f"{actor}.entropy_coeff": 0.0,
        f"{actor}.grad_clip": 1.0,
        f"{actor}.fsdp_config.param_offload": False,
        f"{actor}.fsdp_config.optimizer_offload": False,
        f"{rollout}.name": "vllm",
        f"{rollout}.mode": "async",
        f"{rollout}.n": b.n,
        f"{rollout}.temperature": 1.0,
        f"{rollout}.top_p": 1.0,
        f"{rollout}.top_k": -1,
        f"{rollout}.tensor_model_parallel_size": 1,
        f"{rollout}.gpu_memory_utilization": b.gpu_memory,
        f"{rollout}.enforce_eager": True,
        f"{rollout}.log_prob_use_dynamic_bsz": True,
        f"{rollout}.log_prob_max_token_len_per_gpu": b.max_tokens,
        "reward.reward_manager.name": "dapo",
        "reward.custom_reward_function.path": str(Path(__file__).resolve()),
        "reward.custom_reward_function.name": "compute_score",
        "+reward.reward_kwargs.max_resp_len": b.max_new,
        "+reward.reward_kwargs.overlong_buffer_cfg.enable": True,
        "+reward.reward_kwargs.overlong_buffer_cfg.len": b.overlong,
        "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor": 1.0,
        "+reward.reward_kwargs.overlong_buffer_cfg.log": False,
        "trainer.logger": ["console", "file"],
        "trainer.project_name": "peer_verl_gpu",
        "trainer.experiment_name": "dapo",
        "trainer.nnodes": 1,
        "trainer.n_gpus_per_node": 1,
        "trainer.total_training_steps": b.steps,
        "trainer.total_epochs": 1000,
        "trainer.val_before_train": False,
        "trainer.test_freq": -1,
        "trainer.save_freq": -1,
        "trainer.resume_mode": "disable",
        "trainer.default_local_dir": str(b.out / "verl" / "checkpoints"),
    }


def hydra_value(value: Any) -> str:
    """A value in hydra's override grammar: strings quoted, booleans lower-case, lists bracketed."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    return repr(value)


def verl_overrides(settings: dict[str, Any]) -> list[str]:
    return [f"{key}={hydra_value(value)}" for key, value in settings.items()]


def run_verl(b: Bench, python: str, model: Path, data: Path, limit_s: float) -> dict:
    """verl's trainer in its own process; each line of its file logger is a step, stamped on arrival."""
    metrics_file = b.out / "verl" / "metrics.jsonl"
    metrics_file.parent.mkdir(parents=True, exist_ok=True)
    metrics_file.unlink(missing_ok=True)
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(metrics_file), "TOKENIZERS_PARALLELISM": "false"}
    env["PYTHONPATH"] = str(ROOT)  # the reward file imports our math_dapo verdict (pure Python)
    cmd = [python, "-m", "verl.trainer.main_ppo", *verl_overrides(verl_settings(b, model, data))]
    if not Path(python).is_file():
        why = "install verl's venv (bench/README.md, 'Against verl on one GPU') or pass --verl-python"
        return {"steps": [], "error": f"no verl Python at {python}: {why}"}
    log = open(b.out / "verl" / "console.log", "w")  # noqa: SIM115  (the child writes it until it ends)
    started = time.time()
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, cwd=b.out / "verl", env=env, start_new_session=True
    )
    rows: list[dict] = []
    while proc.poll() is None and time.time() - started < limit_s:
        time.sleep(0.2)
        rows += new_lines(metrics_file, len(rows), started)
    code = stop(proc)
    rows += new_lines(metrics_file, len(rows), started)
    steps = [verl_step(r["data"], r["at"], b) for r in rows]
    error = None if len(steps) >= b.steps else stopped_why(code, b.out / "verl" / "console.log")
    return {"steps": steps, "error": error}


def stop(proc: subprocess.Popen) -> int | None:
    """End a side that outran its time with its whole process group (its Ray and vLLM processes hold the
    GPU the next side needs); the exit status, None when it had to be stopped."""
    if proc.poll() is not None:
        return proc.returncode
    try:
        os.killpg(proc.pid, 9)
    except ProcessLookupError:
        pass
    proc.wait()
    time.sleep(5)  # the GPU's memory comes back as the group's processes exit
    return None


def new_lines(path: Path, seen: int, started: float) -> list[dict]:
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    return [{**json.loads(line), "at": time.time() - started} for line in lines[seen:] if line.strip()]


def verl_step(m: dict, at: float, b: Bench) -> dict:
    """One step's figures from verl's metrics: generated samples are the trained batch plus the groups
    dynamic sampling evicted or left over, n samples each (verl 0.9.1's ``filter_groups/*_samples``
    metrics count prompt groups: its replay buffer's uids), at the trained batch's mean length."""
    trained = b.prompts * b.n
    groups = sum(
        m.get(f"training/filter_groups/{k}", 0.0) for k in ("evicted_samples", "discarded_surplus_samples")
    )
    return step_row(m, at, trained, (trained + groups * b.n) * m["response_length/mean"])


def stopped_why(code: int | None, log: Path) -> str:
    """One line for the summary: how the side ended and its last error line."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error:" in line]
    last = (errors or lines or ["no output"])[-1].strip()
    status = "stopped at its time limit" if code is None else f"exit status {code}"
    return f"{status}: {last[:240]}"


# ---- our side ------------------------------------------------------------------------------------


def our_config(b: Bench, model: Path, data: Path, overrides: dict[str, Any] | None = None) -> Any:
    """Our runner with the settings of :func:`verl_settings` (the names differ; the numbers do not)."""
    from dapo.runconfig import RunConfig

    return RunConfig().with_overrides(
        {
            "seed": SEED,
            "model.path": str(model),
            "model.dtype": "bfloat16" if b.gpu else "float32",
            "model.device": "cuda" if b.gpu else "cpu",
            "model.gradient_checkpointing": True,
            "data.train_path": str(data),
            "data.val_path": "",
            "data.max_prompt_length": b.max_prompt,
            "data.train_batch_size": b.prompts,
            "data.gen_batch_size": b.prompts,
            "rollout.engine": "vllm" if b.gpu else "hf",
            "rollout.n": b.n,
            "rollout.temperature": 1.0,
            "rollout.top_p": 1.0,
            "rollout.top_k": -1,
            "rollout.max_response_length": b.max_new,
            "rollout.gpu_memory_utilization": b.gpu_memory,
            "rollout.enforce_eager": True,
            "algorithm.clip_low": 0.2,
            "algorithm.clip_high": 0.28,
            "algorithm.clip_c": 10.0,
            "algorithm.loss_agg_mode": "token-mean",
            "algorithm.dynamic_sampling": True,
            "algorithm.adaptive_gen_batch": True,
            "algorithm.max_num_gen_batches": 10,
            "algorithm.overlong_filtering": False,
            "algorithm.overlong_buffer": True,
            "algorithm.overlong_buffer_len": b.overlong,
            "algorithm.overlong_penalty_factor": 1.0,
            "optim.lr": b.lr,
            "optim.warmup_steps": 0,
            "optim.weight_decay": 0.1,
            "optim.grad_clip": 1.0,
            "optim.mini_batch_size": b.mini,
            "optim.micro_batch_max_tokens": b.max_tokens,
            "optim.total_steps": b.steps,
            "validation.every_n_steps": 0,
            "checkpoint.every_n_steps": 0,
            "execution.backend": "ray",
            "execution.learner_strategy": "fsdp",
            "execution.colocate": True,
            "execution.gpus_per_worker": 1.0 if b.gpu else 0.0,
            "execution.cpus_per_worker": 1.0,
            "execution.torch_threads": 0 if b.gpu else 1,
            **(overrides or {}),
        }
    )


def train_ours(b: Bench, model: Path, data: Path, overrides: dict[str, Any]) -> None:
    """The child process of our side: trains and prints one ``STEP {...}`` line per step report."""
    from dapo.loop.report import Sink
    from dapo.loop.trainer import Trainer

    class Lines(Sink):
        def on_step(self, report: Any) -> None:
            line = {"at": time.time(), "metrics": report.metrics}
            print("STEP " + json.dumps(line, default=float), flush=True)

    run = Trainer(our_config(b, model, data, overrides), b.out / "ours" / "run", [Lines()]).fit()
    if run.status != "succeeded":
        raise SystemExit(f"FAIL ours: {run.error}")


def run_ours(b: Bench, model: Path, data: Path, limit_s: float, ours_set: list[str]) -> dict:
    """Our side in its own process (this file with ``--side ours``), its start the wall clock's zero."""
    (b.out / "ours").mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, __file__, "--side", "ours", "--out", str(b.out), "--steps", str(b.steps)]
    cmd += ["--cpu"] if not b.gpu else ["--gpu"]
    for item in ours_set:
        cmd += ["--ours-set", item]
    env = {**os.environ, "DAPO_VAR_DIR": str(b.out / "ours" / "var"), "TOKENIZERS_PARALLELISM": "false"}
    started = time.time()
    with open(b.out / "ours" / "console.log", "w") as log, open(b.out / "ours" / "steps.log", "w+") as lines:
        proc = subprocess.Popen(cmd, stdout=lines, stderr=log, env=env, cwd=ROOT, start_new_session=True)
        while proc.poll() is None and time.time() - started < limit_s:
            time.sleep(0.2)
        code = stop(proc)
        lines.seek(0)
        stdout = lines.read()
    steps = []
    for line in stdout.splitlines():
        if line.startswith("STEP "):
            row = json.loads(line[len("STEP ") :])
            m = row["metrics"]
            generated = m["train/response_length/mean"] * m["train/num_prompts_generated"] * b.n
            steps.append(step_row(m, row["at"] - started, m["train/num_samples_trained"], generated))
    error = None if len(steps) >= b.steps else stopped_why(code, b.out / "ours" / "console.log")
    return {"steps": steps, "error": error}


# ---- the figures ---------------------------------------------------------------------------------


def step_row(m: dict, at: float, trained: float, generated_tokens: float) -> dict:
    """One step under the names both trainers share (ours took verl's metric names)."""
    return {
        "at": at,
        "step_s": m["timing_s/step"],
        "trained": trained,
        "gen_tok_s": generated_tokens / max(m["timing_s/gen"], 1e-9),
        "update_tok_s": m["perf/total_num_tokens"] / max(m["timing_s/update_actor"], 1e-9),
        "score": m.get("critic/score/mean", 0.0),
    }


def summary(side: dict) -> dict | None:
    """Per side: generation and update tokens/s (mean over steps after the first, which warms up), step
    time p50, time to the first step and trained samples per second from process start."""
    steps = side["steps"]
    if not steps:
        return None
    timed = steps[1:] or steps
    return {
        "steps": len(steps),
        "gen_tok_s": statistics.fmean(s["gen_tok_s"] for s in timed),
        "update_tok_s": statistics.fmean(s["update_tok_s"] for s in timed),
        "step_p50_s": statistics.median(s["step_s"] for s in steps),
        "first_step_s": steps[0]["at"],
        "trained_per_s": sum(s["trained"] for s in steps) / steps[-1]["at"],
        "score_first_last": [steps[0]["score"], steps[-1]["score"]],
    }


def table(figures: dict[str, dict | None]) -> str:
    """The README's table: a row per figure, a column per side, ours against verl as a speed-up (for a
    time, verl's over ours); "failed" where a side has no steps."""
    rows = (
        ("generation tokens/s", "gen_tok_s", "{:.0f}", False),
        ("update tokens/s", "update_tok_s", "{:.0f}", False),
        ("step time p50 (s)", "step_p50_s", "{:.2f}", True),
        ("time to first step (s)", "first_step_s", "{:.1f}", True),
        ("trained samples/s from process start", "trained_per_s", "{:.1f}", False),
    )
    verl, ours = figures["verl"], figures["ours"]
    lines = ["| | verl 0.9.1 | ours | ours vs verl (speed-up) |", "|---|---|---|---|"]
    for name, key, fmt, lower_better in rows:
        v, o = (verl or {}).get(key), (ours or {}).get(key)
        cells = [fmt.format(x) if x is not None else "failed" for x in (v, o)]
        ratio = "" if not (v and o) else f"{(v / o if lower_better else o / v):.2f}x"
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {ratio} |")
    return "\n".join(lines)


# ---- the dry run's checks ----------------------------------------------------------------------------

COMPOSE = r"""
import json, sys
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

overrides = json.loads(sys.stdin.read())
with initialize_config_dir(config_dir=sys.argv[1], version_base=None):
    cfg = compose(config_name="ppo_trainer", overrides=overrides)
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config

validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
keys = [o.split("=", 1)[0].lstrip("+") for o in overrides] + sys.argv[2:]
values = {k: OmegaConf.select(cfg, k, throw_on_missing=True) for k in keys}
values = {k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for k, v in values.items()}
print(json.dumps({**values, "critic": need_critic(cfg), "reference policy": need_reference_policy(cfg)}))
"""
# verl's config and its validation import these beyond hydra; installed without their dependencies, which
# the venv takes from ours (torch, transformers, ray, numpy) through a .pth file.
CONFIG_PACKAGES = ("hydra-core", "omegaconf", "antlr4-python3-runtime", "pyyaml")
VALIDATE_PACKAGES = ("tensordict", "pyvers", "codetiming", "cloudpickle", "orjson", "pillow")


def pins() -> dict[str, str]:
    """name -> version of every ``name==version`` line of bench/requirements-verl-gpu.txt."""
    out = {}
    for line in REQUIREMENTS.read_text().splitlines():
        spec = line.split("#", 1)[0].strip()
        if "==" in spec:
            name, version = spec.split("==", 1)
            out[name.split("[", 1)[0].strip().lower()] = version.strip()
    return out


def config_python() -> tuple[Path, Path]:
    """(python, verl's source) for composing and validating verl's config without vLLM: a small venv
    (var/verl-config-venv) with the pinned hydra-core and omegaconf, the few packages verl's config code
    imports besides (pinned, without dependencies) and this interpreter's packages behind them; and verl's
    pinned wheel unpacked (var/verl-src)."""
    import sysconfig
    import zipfile

    venv, src = ROOT / "var" / "verl-config-venv", ROOT / "var" / "verl-src"
    python, versions = venv / "bin" / "python", pins()
    if not (venv / "ready").is_file():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, *(f"{n}=={versions[n]}" for n in CONFIG_PACKAGES)], check=True)
        subprocess.run([*pip, "--no-deps", *(f"{n}=={versions[n]}" for n in VALIDATE_PACKAGES)], check=True)
        purelib = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        (Path(purelib) / "zz_dapo.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        (venv / "ready").write_text("")
    if not (src / "verl" / "utils" / "config.py").is_file():
        wheels = ROOT / "var" / "verl-wheel"
        pip = [str(python), "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels)]
        subprocess.run([*pip, f"verl=={versions['verl']}"], check=True)
        with zipfile.ZipFile(next(wheels.glob(f"verl-{versions['verl']}-*.whl"))) as wheel:
            wheel.extractall(src, [n for n in wheel.namelist() if n.startswith("verl/")])
    return python, src


def check_verl_config(settings: dict[str, Any], python: Path, src: Path) -> list[str]:
    """Compose verl's ppo_trainer with our overrides as ``main_ppo``'s hydra does (an unknown key, or a
    ``+`` on a key that exists, is an error), run verl's own ``validate_config`` on it as ``main_ppo`` does
    before it starts Ray, and read every value back; returns what is wrong."""
    derived = {
        "actor_rollout_ref.rollout.prompt_length": settings["data.max_prompt_length"],
        "actor_rollout_ref.rollout.response_length": settings["data.max_response_length"],
    }
    done = subprocess.run(
        [str(python), "-c", COMPOSE, str(src / "verl" / "trainer" / "config"), *derived],
        input=json.dumps(verl_overrides(settings)),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(src)},
    )
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if line.strip()][-3:]  # the error and hydra's hint
        return [" ".join(said) or f"exit status {done.returncode}"]
    composed = json.loads(done.stdout.strip().splitlines()[-1])
    expected = {k.lstrip("+"): v for k, v in settings.items()} | derived
    expected |= {"critic": False, "reference policy": False}  # GRPO advantages, no KL: neither model is built
    return [
        f"{k}: set {v!r}, composed {composed.get(k)!r}" for k, v in expected.items() if composed.get(k) != v
    ]


def reward_cases(problems: list[Any]) -> list[tuple[str, str]]:
    """(response, ground truth) pairs a trained policy writes: right, one step off, no answer line, the
    answer with a unit, lower case, a later answer overriding an earlier one, and noise."""
    cases = []
    for p in problems:
        t = p.ground_truth
        cases += [
            (f"1+2=3\nAnswer: {t}", t),
            (f"Answer: {int(t) + 1}", t),
            (f"{t}", t),
            (f"Answer: {t} cm", t),
            (f"answer:  {t}\n", t),
            (f"Answer: 0\nAnswer: {t}", t),
            ("%$#Answer", t),
        ]
    return cases


def reward_mismatches(problems: list[Any]) -> list[str]:
    """Where verl's reward file and our trainer's scorer disagree on :func:`reward_cases` (score or acc)."""
    from dapo.rewards import build_reward
    from dapo.runconfig import DataConfig

    cases = reward_cases(problems)
    ours = build_reward(DataConfig()).score_batch([""] * len(cases), *map(list, zip(*cases, strict=True)))
    theirs = [compute_score("math_dapo", r, t) for r, t in cases]
    return [
        f"{r!r} vs {t!r}: ours {o.score}/{o.acc}, verl's file {v['score']}/{v['acc']}"
        for (r, t), o, v in zip(cases, ours, theirs, strict=True)
        if (o.score, bool(o.acc)) != (v["score"], v["acc"])
    ]


def data_mismatches(verl_file: Path, ours_file: Path) -> list[str]:
    """Where our loader reads the two files differently (prompt messages, ground truth, order)."""
    from dapo.data.problems import load_problems

    theirs, ours = load_problems(verl_file), load_problems(ours_file)
    if len(theirs) != len(ours):
        return [f"{len(theirs)} problems in {verl_file.name}, {len(ours)} in {ours_file.name}"]
    return [
        f"problem {i}: {a.messages} / {a.ground_truth} against {b.messages} / {b.ground_truth}"
        for i, (a, b) in enumerate(zip(theirs, ours, strict=True))
        if (a.messages, a.ground_truth) != (b.messages, b.ground_truth)
    ]


# ---- the run ---------------------------------------------------------------------------------------


def check(name: str, problems: list[str], failed: list[str]) -> None:
    print(f"{'ok  ' if not problems else 'FAIL'} {name}" + "".join(f"\n     {p}" for p in problems[:8]))
    if problems:
        failed.append(name)


def dry_checks(b: Bench, model: Path, verl_file: Path, ours_file: Path) -> list[str]:
    from dapo.data.problems import load_problems

    failed: list[str] = []
    check("data: verl's file and ours hold the same problems", data_mismatches(verl_file, ours_file), failed)
    problems = load_problems(ours_file, limit=40)
    check(
        f"reward: verl's file scores {7 * len(problems)} responses as ours",
        reward_mismatches(problems),
        failed,
    )
    settings = verl_settings(b, model, verl_file)
    try:
        found = check_verl_config(settings, *config_python())
    except (subprocess.CalledProcessError, OSError, StopIteration) as exc:
        found = [f"could not set up the config check (network? see var/verl-config-venv): {exc}"]
    check(
        f"verl config: {len(settings)} overrides compose in verl {pins()['verl']}'s ppo_trainer and pass "
        "its validate_config",
        found,
        failed,
    )
    return failed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--gpu", action="store_true", help="the side-by-side on one CUDA GPU")
    mode.add_argument("--cpu", action="store_true", help="the dry run: builds and checks, ours on CPU")
    p.add_argument(
        "--out", type=Path, help="model (reused when there), data, logs (default var/bench/peer-verl-MODE)"
    )
    p.add_argument("--steps", type=int, help="steps per side (default 8; 2 in the dry run)")
    p.add_argument("--budget-s", type=float, help="wall budget for everything (default 470; 4x on CPU)")
    p.add_argument("--verl-python", default=str(ROOT / "var" / "verl-venv" / "bin" / "python"))
    p.add_argument("--ours-set", action="append", default=[], metavar="FIELD=JSON", help="our config on top")
    p.add_argument("--side", choices=["ours"], help=argparse.SUPPRESS)  # the child process of our side
    args = p.parse_args()
    out = args.out or ROOT / "var" / "bench" / f"peer-verl-{'gpu' if args.gpu else 'cpu'}"
    b = Bench(gpu=True, out=out) if args.gpu else dry_run(out)
    b = replace(b, steps=args.steps or b.steps)
    verl_file, ours_file, model = out / "verl-train.parquet", out / "ours-train.parquet", out / "model"
    if args.side:
        train_ours(
            b, model, ours_file, {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.ours_set)}
        )
        return 0
    if b.gpu and not __import__("torch").cuda.is_available():
        sys.exit("FAIL: no CUDA device; run on a machine with one GPU, or use --cpu for the dry run")
    started, budget = time.time(), args.budget_s or (470.0 if b.gpu else 4 * 470.0)
    verl_file, ours_file = build_data(b)
    from dapo.data.problems import load_problems

    model = build_model(b, {q.prompt_text for q in load_problems(ours_file)})
    failed = [] if b.gpu else dry_checks(b, model, verl_file, ours_file)
    sides: dict[str, dict] = {}
    if b.gpu:
        left = budget - (time.time() - started)
        sides["verl"] = run_verl(b, args.verl_python, model, verl_file, left / 2)
    sides["ours"] = run_ours(b, model, ours_file, budget - (time.time() - started), args.ours_set)
    figures = {name: summary(side) for name, side in sides.items()}
    for name, side in sides.items():
        if side["error"]:
            print(f"FAIL {name}: {len(side['steps'])} of {b.steps} steps; {side['error']}")
            failed.append(name)
        print(
            "RESULT " + json.dumps({"side": name, "mode": "gpu" if b.gpu else "cpu", **(figures[name] or {})})
        )
    if b.gpu:
        print(f"\n{b.prompts} prompts x {b.n}, {b.max_new} new tokens at most, {b.steps} steps a side\n")
        print(table(figures))
    elapsed = time.time() - started
    print(f"\n{len(failed)} failed ({', '.join(failed) or 'none'}); {elapsed:.0f} s; output in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
