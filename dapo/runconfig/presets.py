"""Named run configurations: the demo, the paper's run and verl's reproduction of it, and the six rungs
of the paper's ablation ladder.

Presets are functions returning a validated :class:`RunConfig`. ``PRESETS`` maps names to them (the CLI's
``--preset`` and the web form's preset menu). The ablation ladder (paper Table 1) is cumulative: each rung
adds one technique to the one before, ending at full DAPO; ``ablation_ladder(base)`` applies it to any base
scale (the demo or the paper's run), so users can re-run the ablation where they can afford it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from dapo.runconfig.run import (
    AlgorithmConfig,
    CheckpointConfig,
    DataConfig,
    ExecutionConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    RunConfig,
    ValidationConfig,
)


def full_dapo(*, overlong_buffer_len: int) -> AlgorithmConfig:
    """The paper's algorithm (§8): clip 0.2 / 0.28 with dual clip c = 10, token-level loss, dynamic
    sampling on accuracy (at most 10 rounds), overlong filtering, soft overlong punishment (factor 1)."""
    return AlgorithmConfig(
        clip_low=0.2,
        clip_high=0.28,
        clip_c=10.0,
        loss_agg_mode="token-mean",
        dynamic_sampling=True,
        filter_metric="acc",
        max_num_gen_batches=10,
        overlong_filtering=True,
        overlong_buffer=True,
        overlong_buffer_len=overlong_buffer_len,
        overlong_penalty_factor=1.0,
    )


def tiny_cpu() -> RunConfig:
    """Full DAPO on the demo model and arithmetic task, sized for two CPU cores (~2.5 s a step unloaded).

    It asks for one CPU (``execution.cpus_per_worker`` 1, so torch runs on one thread): two runs train
    side by side on the demo's two cores, and on busy shared cores one thread is the faster setting anyway
    (bench/README.md, the rollout throughput table).

    The demo policy is a ~1.8M-parameter Llama, so the paper's lr of 1e-6 (tuned for 32B parameters)
    barely moves it: this preset uses 1e-4 (the measurements behind it: bench/README.md, "Choosing the
    demo's settings"). Groups of 8 and 16 kept prompts per step give 128 samples per step, and two
    optimiser steps per rollout step.
    """
    return RunConfig(
        model=ModelConfig(path="assets/demo/model", dtype="float32", device="cpu"),
        data=DataConfig(
            train_path="assets/demo/data/train.parquet",
            val_path="assets/demo/data/test.parquet",
            max_prompt_length=64,
            train_batch_size=16,
            gen_batch_size=24,
        ),
        rollout=RolloutConfig(engine="hf", n=8, temperature=1.0, max_response_length=48),
        # rounds sized to what is missing: on the hf engine a round costs its size (bench/README.md)
        algorithm=replace(full_dapo(overlong_buffer_len=8), adaptive_gen_batch=True),
        optim=OptimConfig(lr=1e-4, warmup_steps=2, mini_batch_size=8, micro_batch_size=64, total_steps=60),
        validation=ValidationConfig(every_n_steps=10, n_samples=4, temperature=1.0, top_p=1.0),
        checkpoint=CheckpointConfig(every_n_steps=10, keep_last=2),
        execution=ExecutionConfig(backend="local"),
    )


def paper_qwen32b() -> RunConfig:
    """The paper's DAPO run: Qwen2.5-32B base, DAPO-Math-17k, 128 GPUs, vLLM.

    Point ``model.path`` and ``data.*_path`` at local copies; nothing is downloaded. Overlong filtering is on
    because the paper's final row (Table 1) includes it; verl's reproduction script lacks the switch, so
    its length and clip-ratio curves differ: compare with those under ``verl_dapo_32b``.
    """
    return RunConfig(
        model=ModelConfig(path="models/Qwen2.5-32B", dtype="bfloat16", device="cuda"),
        data=DataConfig(
            train_path="data/dapo-math-17k.parquet",
            val_path="data/aime-2024.parquet",
            max_prompt_length=2048,
            train_batch_size=512,
            gen_batch_size=1536,
        ),
        rollout=RolloutConfig(
            engine="vllm",
            n=16,
            temperature=1.0,
            top_p=1.0,
            max_response_length=20480,
            tensor_parallel_size=4,
            gpu_memory_utilization=0.8,
        ),
        algorithm=full_dapo(overlong_buffer_len=4096),
        optim=OptimConfig(
            lr=1e-6,
            warmup_steps=20,
            weight_decay=0.1,
            grad_clip=1.0,
            mini_batch_size=32,
            micro_batch_size=16,
            epochs=1,
            total_steps=400,
        ),
        validation=ValidationConfig(every_n_steps=5, n_samples=32, temperature=1.0, top_p=0.7),
        checkpoint=CheckpointConfig(every_n_steps=20, keep_last=3),
        execution=ExecutionConfig(
            backend="ray",
            num_rollout_workers=32,
            num_learner_workers=128,
            colocate=True,
            gpus_per_worker=1.0,
            cpus_per_worker=8.0,
        ),
    )


def verl_dapo_32b() -> RunConfig:
    """verl's DAPO reproduction script for Qwen2.5-32B: the paper's run without overlong filtering.

    Same model, data, batch sizes, clipping, dynamic sampling and soft overlong punishment as
    ``paper_qwen32b``; what differs follows verl's recipe (run_dapo_qwen2.5_32b.sh): no overlong filtering
    (verl has no such switch, so truncated samples are trained on with their penalised reward), 10 warm-up
    steps, one validation sample per AIME problem at top_p 0.7 every 5 steps (the curve verl plots is
    mean@1, the paper's headline avg@32), a checkpoint every 25 steps, 16 nodes of 8 GPUs with vLLM at
    tensor parallel 4, gradient checkpointing, and token-budget micro-batches of one whole sequence
    (prompt 2,048 + response 20,480 tokens; verl use_dynamic_bsz, ppo_max_token_len_per_gpu). Not
    matched: verl trains on the published parquet with its ~100x repeated rows, our loader drops repeats;
    verl stops after one epoch of its data loader, this preset after ``optim.total_steps`` (400).
    """
    base = paper_qwen32b()
    return base.with_overrides(
        {
            "model.gradient_checkpointing": True,
            "algorithm.overlong_filtering": False,
            "optim.warmup_steps": 10,
            "optim.micro_batch_max_tokens": 2048 + 20480,
            "validation.n_samples": 1,
            "checkpoint.every_n_steps": 25,
        }
    )


# The cumulative rungs of paper Table 1: (name, what the rung adds, the algorithm settings it changes).
ABLATION_LADDER: list[tuple[str, str, dict[str, object]]] = [
    (
        "naive_grpo",
        "naive GRPO: symmetric clip, sequence-mean loss, no length handling, no dynamic sampling",
        {
            "clip_high": 0.2,
            "loss_agg_mode": "seq-mean-token-mean",
            "overlong_filtering": False,
            "overlong_buffer": False,
            "dynamic_sampling": False,
        },
    ),
    ("grpo_overlong_filtering", "+ overlong filtering", {"overlong_filtering": True}),
    ("grpo_clip_higher", "+ clip-higher (ε_high 0.28)", {"clip_high": 0.28}),
    ("grpo_soft_overlong", "+ soft overlong punishment", {"overlong_buffer": True}),
    ("grpo_token_level_loss", "+ token-level loss", {"loss_agg_mode": "token-mean"}),
    ("dapo_full", "+ dynamic sampling (full DAPO)", {"dynamic_sampling": True}),
]


DEMO_LADDER_SETTING: dict[str, object] = {
    "rollout.max_response_length": 27,
    "algorithm.overlong_buffer_len": 4,
    "optim.mini_batch_size": 1,
}
"""The demo's ladder setting, where every rung acts. The demo model answers in 16 to 28 tokens, so under
``tiny_cpu``'s limit of 48 no response is truncated or reaches the soft punishment's buffer (48 − 8 = 40),
and with two optimiser steps a rollout step the policy hardly leaves the clip range: the overlong
filtering, clip-higher and soft punishment rungs trained exactly as the rungs before them. Here responses
stop at 27 tokens (about a third are truncated at first; those past 23 are punished, as the paper's past
16,384 of 20,480), and each rollout step takes one optimiser step per prompt group, 16 as in the paper
(512 prompts in mini-batches of 32), so the ratio leaves [0.8, 1.2] and ε_high = 0.28 changes the
update. Measured: docs/dapo.md §9."""


def ablation_ladder(
    base: RunConfig | None = None, *, demo_setting: bool = False, steps: int | None = None
) -> list[tuple[str, RunConfig]]:
    """The six rungs of the ablation applied, cumulatively, on top of ``base`` (default: the demo).

    demo_setting: apply ``DEMO_LADDER_SETTING`` to the base first, so the length rungs act on the demo task.
    steps: each rung's ``optim.total_steps`` (the ladder's cost is six times a rung's)."""
    base = base or tiny_cpu()
    setting: dict[str, object] = dict(DEMO_LADDER_SETTING) if demo_setting else {}
    if steps is not None:
        setting["optim.total_steps"] = steps
    if setting:
        base = base.with_overrides(setting)
    overrides: dict[str, object] = {}
    rungs = []
    for name, _, changes in ABLATION_LADDER:
        overrides.update({f"algorithm.{k}": v for k, v in changes.items()})
        rungs.append((name, base.with_overrides(overrides)))
    return rungs


def _rung(index: int) -> Callable[[], RunConfig]:
    name, what, _ = ABLATION_LADDER[index]

    def preset() -> RunConfig:
        return ablation_ladder(tiny_cpu())[index][1]

    preset.__name__ = name
    preset.__doc__ = f"Ablation rung {index + 1} of 6 on the demo task: {what}."
    return preset


PRESETS: dict[str, Callable[[], RunConfig]] = {
    "tiny_cpu": tiny_cpu,
    "paper_qwen32b": paper_qwen32b,
    "verl_dapo_32b": verl_dapo_32b,
    **{name: _rung(i) for i, (name, _, _) in enumerate(ABLATION_LADDER)},
}


def get_preset(name: str) -> RunConfig:
    try:
        return PRESETS[name]()
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; valid presets: {', '.join(PRESETS)}") from None


def preset_descriptions() -> dict[str, str]:
    """{preset name: first line of its docstring}, for menus."""
    return {name: (fn.__doc__ or "").strip().splitlines()[0] for name, fn in PRESETS.items()}
