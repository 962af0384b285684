"""The sections of a run config (``model``, ``data``, ``rollout``, ``algorithm``, ``optim``, ``validation``,
``checkpoint``, ``execution``, ``logging``): frozen dataclasses validated on construction. Each field's
attribute docstring is its documentation (``dapo.runconfig.docs.field_docs``). Import them from
``dapo.runconfig``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dapo.runconfig.base import MAX_INT, Checks


@dataclass(frozen=True)
class ModelConfig:
    path: str = "assets/demo/model"
    """Local HuggingFace model directory (config.json, weights, tokenizer). Never downloaded from a hub."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter dtype of the policy (bfloat16 on GPUs; float32 on CPU)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the learner and the hf rollout engine run; auto = cuda when available, else cpu."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory (slower)."""

    def __post_init__(self) -> None:
        c = Checks()
        c.require(bool(self.path.strip()), "path", "must name a local model directory")
        c.done()


@dataclass(frozen=True)
class DataConfig:
    train_path: str = "assets/demo/data/train.parquet"
    """Training problems: DAPO parquet schema or JSONL with prompt/answer fields."""
    val_path: str = "assets/demo/data/test.parquet"
    """Held-out problems for validation (empty string: no validation set)."""
    val_paths: tuple[str, ...] = ()
    """Further validation files, after val_path. With more than one file each reports its own metrics,
    val/<file stem>/acc/mean@k and the rest (a file whose rows name several data_source values: one set
    per stem-data_source); with one file, per data_source column. verl data.val_files (a list)."""
    reward_fn: str = "math_dapo"
    """Reward by name (dapo.rewards), or several separated by commas, summed with reward_weights:
    math_dapo (+1 if the last "Answer:" matches, else -1), math_verify, boxed_exact, multiple_choice,
    regex, json_match, http (a reward service), or an allowed plugin package.module:callable. The first
    named gives acc and pred. verl reward_model.reward_manager / custom_reward_function; TRL reward_funcs."""
    reward_weights: str = ""
    """Weights of the rewards in reward_fn, one number each, separated by commas (empty: 1 each); the
    sequence score is the weighted sum. TRL reward_weights."""
    reward_pattern: str = ""
    """regex reward: the pattern whose last match in the response (its first group, or all of it) must
    equal the ground truth, e.g. "Final answer: (\\S+)"."""
    reward_url: str = ""
    """http reward: the reward service's URL; one an administrator listed in DAPO_REWARD_URLS.
    OpenRLHF --remote_rm_url."""
    reward_timeout_s: float = 30.0
    """http reward: seconds to wait for one batch's reply."""
    reward_retries: int = 2
    """http reward: retries of a failed batch (with a growing pause) before the run fails."""
    reward_batch_size: int = 64
    """http reward: samples per POST to the reward service."""
    max_prompt_length: int = 256
    """Longest prompt in tokens, chat template applied; longer is an error. verl data.max_prompt_length."""
    train_batch_size: int = 16
    """Prompts per training step after dynamic sampling (paper 512). verl data.train_batch_size."""
    gen_batch_size: int = 24
    """Prompts per generation round under dynamic sampling (paper 1536). verl data.gen_batch_size."""
    shuffle: bool = True
    """Shuffle the training problems each epoch (seeded)."""

    @property
    def validation_files(self) -> list[str]:
        """Every validation file: val_path (when set), then val_paths."""
        return [p for p in (self.val_path, *self.val_paths) if p]

    def __post_init__(self) -> None:
        from dapo.rewards import reward_errors  # torch-free; imports no plugin

        c = Checks()
        c.require(bool(self.train_path.strip()), "train_path", "must name a dataset file")
        c.require(len(self.val_paths) <= 32, "val_paths", "must list at most 32 files")
        c.require(all(p.strip() for p in self.val_paths), "val_paths", "must not hold an empty path")
        c.require(
            len(set(self.validation_files)) == len(self.validation_files),
            "val_paths",
            "must not repeat a file (val_path included)",
        )
        for name, message in reward_errors(self).items():
            c.require(False, name, message)
        c.require(0.0 < self.reward_timeout_s <= 3600, "reward_timeout_s", "must be in (0, 3600]")
        c.require(0 <= self.reward_retries <= 10, "reward_retries", "must be in [0, 10]")
        c.require(1 <= self.reward_batch_size <= 100_000, "reward_batch_size", "must be in [1, 100000]")
        c.require(1 <= self.max_prompt_length <= 1_000_000, "max_prompt_length", "must be in [1, 1000000]")
        c.require(1 <= self.train_batch_size <= 1_000_000, "train_batch_size", "must be in [1, 1000000]")
        c.require(1 <= self.gen_batch_size <= 1_000_000, "gen_batch_size", "must be in [1, 1000000]")
        c.done()


@dataclass(frozen=True)
class RolloutConfig:
    engine: Literal["hf", "cpu", "vllm"] = "hf"
    """Rollout engine by name: hf (torch/transformers with a KV cache, CPU or GPU), cpu (the same hf
    engine under an older name) or vllm (GPU)."""
    n: int = 8
    """Samples per prompt, the group size G (paper 16). verl rollout.n; TRL num_generations."""
    temperature: float = 1.0
    """Sampling temperature for training rollouts (paper 1.0)."""
    top_p: float = 1.0
    """Nucleus sampling for training rollouts (paper 1.0)."""
    top_k: int = -1
    """Top-k sampling for training rollouts; -1 disables it."""
    max_response_length: int = 48
    """Hard cap on generated tokens, L_max in the paper (paper 20480). verl data.max_response_length."""
    tensor_parallel_size: int = 1
    """vLLM tensor parallelism per rollout worker (paper 4)."""
    gpu_memory_utilization: float = 0.5
    """vLLM: fraction of GPU memory for weights and KV cache."""
    enforce_eager: bool = False
    """vLLM: disable CUDA graphs (the reference warns they can change results)."""
    max_batch_size: int = 0
    """hf engine: sequences decoded at once (0 = all); lowers peak memory on large batches."""
    one_step_off_policy: bool = False
    """Generate the next step's batch while this step trains, with the weights from before this step's
    update, so generation and update overlap: from step 2 on each batch is exactly one step stale
    (rollout/staleness) and the importance ratio uses the generator's log-probs (no old-log-prob
    forward). Needs a second copy of the weights: the local backend's hf engine keeps one; on Ray, set
    execution.colocate off. Off (default): on-policy."""

    def __post_init__(self) -> None:
        c = Checks()
        c.require(1 <= self.n <= 4096, "n", "must be in [1, 4096]")
        c.require(0.0 < self.temperature <= 10.0, "temperature", "must be in (0, 10]")
        c.require(0.0 < self.top_p <= 1.0, "top_p", "must be in (0, 1]")
        c.require(self.top_k == -1 or 1 <= self.top_k <= MAX_INT, "top_k", "must be -1 (off) or >= 1")
        c.require(
            1 <= self.max_response_length <= 1_000_000, "max_response_length", "must be in [1, 1000000]"
        )
        c.require(1 <= self.tensor_parallel_size <= 1024, "tensor_parallel_size", "must be in [1, 1024]")
        c.require(0.0 < self.gpu_memory_utilization <= 1.0, "gpu_memory_utilization", "must be in (0, 1]")
        c.require(0 <= self.max_batch_size <= MAX_INT, "max_batch_size", "must be >= 0")
        c.done()


@dataclass(frozen=True)
class AlgorithmConfig:
    clip_low: float = 0.2
    """ε_low in DAPO: the ratio is clipped below at 1 − ε_low. verl clip_ratio_low; TRL epsilon."""
    clip_high: float = 0.28
    """ε_high in DAPO (clip-higher): clipped above at 1 + ε_high. verl clip_ratio_high; TRL epsilon_high."""
    clip_c: float | None = 10.0
    """Dual-clip bound c for negative advantages (reference runs use 10; the paper has none); null
    disables it. verl clip_ratio_c."""
    loss_agg_mode: Literal[
        "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
    ] = "token-mean"
    """Loss aggregation: token-mean (DAPO token-level loss), seq-mean-token-mean (GRPO), seq-mean-token-sum,
    seq-mean-token-sum-norm (Dr. GRPO)."""
    policy_loss: Literal["dapo"] = "dapo"
    """Policy loss by name (dapo.algo.loss registry ``POLICY_LOSSES``): dapo = the decoupled-clip surrogate
    with dual clip (paper eq. 8); GRPO and Dr. GRPO are the same loss with other clip_*/loss_agg_mode
    settings. verl actor.policy_loss.loss_mode."""
    advantage_estimator: Literal["grpo"] = "grpo"
    """Advantage estimator by name (dapo.algo.advantage registry): grpo = group-normalised outcome reward."""
    norm_adv_by_std: bool = True
    """Divide group advantages by the group's std (GRPO/DAPO); off gives Dr. GRPO's score − mean."""
    dynamic_sampling: bool = True
    """Dynamic sampling: drop groups whose filter metric is the same for every sample, refill from new rounds.
    verl algorithm.filter_groups.enable."""
    filter_metric: Literal["acc", "score", "seq_reward"] = "acc"
    """Metric whose group std must be > 0 to keep a group: acc (correctness), score (±1 before the overlong
    penalty) or seq_reward (after it). verl filter_groups.metric."""
    max_num_gen_batches: int = 10
    """Most generation rounds per step (<= 0: unlimited). On the limit we train on what we have and warn.
    With adaptive_gen_batch the limit is on prompts: max_num_gen_batches x gen_batch_size."""
    adaptive_gen_batch: bool = False
    """Dynamic sampling (ours): size each round to the groups still missing, ceil(missing / kept fraction)
    prompts plus a half-sigma cushion, at most gen_batch_size, instead of always gen_batch_size. The trained
    batch is the same in law (the first train_batch_size groups that pass the filter); fewer groups are
    generated only to be discarded as surplus, at the cost of more, smaller rounds: worth it where a
    round costs its size (the hf engine on CPU), less so where it costs its longest sample (vLLM).
    train/num_gen_batches then counts these smaller rounds, which verl's metric of that name does not."""
    overlong_filtering: bool = False
    """Overlong filtering (paper §3.4): truncated samples (no EOS by L_max) are masked out of the loss."""
    overlong_buffer: bool = True
    """Soft overlong punishment (paper eq. 13): a length penalty in the last overlong_buffer_len tokens."""
    overlong_buffer_len: int = 8
    """Buffer C of the soft overlong punishment, in tokens (paper 4096)."""
    overlong_penalty_factor: float = 1.0
    """Factor f of the soft overlong punishment (paper 1.0)."""

    def __post_init__(self) -> None:
        c = Checks()
        c.require(0.0 < self.clip_low < 1.0, "clip_low", f"must be in (0, 1), got {self.clip_low}")
        c.require(0.0 < self.clip_high <= 10.0, "clip_high", f"must be in (0, 10], got {self.clip_high}")
        c.require(
            self.clip_high >= self.clip_low,
            "clip_high",
            f"must be >= clip_low ({self.clip_low}), got {self.clip_high}",
        )
        c.require(
            self.clip_c is None or 1.0 < self.clip_c <= 1e6, "clip_c", "must be > 1 (or null to disable)"
        )
        c.require(-1 <= self.max_num_gen_batches <= 10_000, "max_num_gen_batches", "must be in [-1, 10000]")
        c.require(0 <= self.overlong_buffer_len <= 1_000_000, "overlong_buffer_len", "must be >= 0")
        c.require(
            0.0 <= self.overlong_penalty_factor <= 100.0, "overlong_penalty_factor", "must be in [0, 100]"
        )
        c.require(
            not self.overlong_buffer or self.overlong_buffer_len >= 1,
            "overlong_buffer_len",
            "must be >= 1 when overlong_buffer is on",
        )
        c.done()


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 2e-5
    """AdamW learning rate (paper 1e-6 for a 32B model)."""
    warmup_steps: int = 2
    """Linear warm-up, in rollout steps (paper 20; the reference script 10)."""
    lr_schedule: Literal["constant", "cosine"] = "constant"
    """Learning rate after warm-up: constant (the paper) or cosine decay to 10% over total_steps."""
    weight_decay: float = 0.1
    """AdamW weight decay (paper 0.1)."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value (paper 1.0)."""
    mini_batch_size: int = 8
    """Prompts per optimiser step; train_batch_size / mini_batch_size updates per rollout step (paper 32).
    verl ppo_mini_batch_size."""
    micro_batch_size: int = 32
    """Sequences per forward/backward pass (gradient accumulation); does not change the result.
    verl ppo_micro_batch_size_per_gpu."""
    micro_batch_max_tokens: int = 0
    """Token budget of a forward/backward pass instead of a row count (0: off, micro_batch_size rows):
    rows sorted by length are packed while rows x padded width (prompt + response) stays within it, so
    similar lengths share a pass and padding drops; does not change the result. At least
    data.max_prompt_length + rollout.max_response_length. verl use_dynamic_bsz +
    ppo_max_token_len_per_gpu."""
    logprob_chunk_tokens: int = 1024
    """Response tokens per LM-head chunk when computing log-probs and entropy: the head's memory is
    chunk x vocabulary (1024 x 151,936 fp32 logits: 0.6 GB); does not change the result."""
    epochs: int = 1
    """Passes over each rollout batch (paper 1). verl ppo_epochs."""
    total_steps: int = 60
    """Rollout steps to train for."""

    def __post_init__(self) -> None:
        c = Checks()
        c.require(0.0 < self.lr <= 1.0, "lr", f"must be in (0, 1], got {self.lr}")
        c.require(0 <= self.warmup_steps <= MAX_INT, "warmup_steps", "must be >= 0")
        c.require(0.0 <= self.weight_decay <= 10.0, "weight_decay", "must be in [0, 10]")
        c.require(
            len(self.betas) == 2 and all(0.0 <= b < 1.0 for b in self.betas),
            "betas",
            "must be two numbers in [0, 1)",
        )
        c.require(0.0 < self.grad_clip <= 1e6, "grad_clip", "must be > 0")
        c.require(1 <= self.mini_batch_size <= 1_000_000, "mini_batch_size", "must be in [1, 1000000]")
        c.require(1 <= self.micro_batch_size <= 1_000_000, "micro_batch_size", "must be in [1, 1000000]")
        c.require(0 <= self.micro_batch_max_tokens <= MAX_INT, "micro_batch_max_tokens", "must be >= 0")
        c.require(
            1 <= self.logprob_chunk_tokens <= 1_000_000, "logprob_chunk_tokens", "must be in [1, 1000000]"
        )
        c.require(1 <= self.epochs <= 100, "epochs", "must be in [1, 100]")
        c.require(1 <= self.total_steps <= 10_000_000, "total_steps", "must be in [1, 10000000]")
        c.done()


@dataclass(frozen=True)
class ValidationConfig:
    every_n_steps: int = 10
    """Validate every N rollout steps (0: never); also before the first step and after the last."""
    n_samples: int = 4
    """Samples per validation problem n (paper 32; verl's script 1): val/acc/mean@n (avg@n), std@n,
    best@k/worst@k/maj@k and the unbiased pass@k for k = 2, 4, ..., n, per source too (docs/metrics.md)."""
    temperature: float = 1.0
    """Sampling temperature for validation (paper 1.0)."""
    top_p: float = 1.0
    """Nucleus sampling for validation (paper 0.7)."""
    max_problems: int = 0
    """Validate on the first N problems of each validation file (0: all)."""

    def __post_init__(self) -> None:
        c = Checks()
        c.require(0 <= self.every_n_steps <= MAX_INT, "every_n_steps", "must be >= 0")
        c.require(1 <= self.n_samples <= 1024, "n_samples", "must be in [1, 1024]")
        c.require(0.0 < self.temperature <= 10.0, "temperature", "must be in (0, 10]")
        c.require(0.0 < self.top_p <= 1.0, "top_p", "must be in (0, 1]")
        c.require(0 <= self.max_problems <= MAX_INT, "max_problems", "must be >= 0")
        c.done()


@dataclass(frozen=True)
class CheckpointConfig:
    every_n_steps: int = 10
    """Save a resumable checkpoint every N steps (0: only at the end)."""
    keep_last: int = 2
    """Checkpoints to keep on disk (older ones are deleted; 0 keeps all)."""
    save_optimizer: bool = True
    """Include the optimiser state (needed for an exact resume)."""

    def __post_init__(self) -> None:
        c = Checks()
        c.require(0 <= self.every_n_steps <= MAX_INT, "every_n_steps", "must be >= 0")
        c.require(0 <= self.keep_last <= 10_000, "keep_last", "must be in [0, 10000]")
        c.done()


@dataclass(frozen=True)
class ExecutionConfig:
    backend: Literal["local", "ray"] = "local"
    """local: the whole loop in this process. ray: rollout workers, learners and reward tasks as Ray actors
    (RAY_ADDRESS selects a cluster; unset starts a local Ray)."""
    num_rollout_workers: int = 1
    """Ray: rollout workers (data-parallel over prompts), one engine each."""
    num_learner_workers: int = 1
    """Ray: learner workers (torch distributed data parallel: gloo on CPU, nccl on GPU)."""
    colocate: bool = True
    """Ray: learner and rollout engine share an actor and its weights (verl's hybrid engine); off = separate
    actors with a weight broadcast after each update."""
    cpus_per_worker: float = 1.0
    """CPUs reserved for each worker (Ray: its bundle; local: the run's process, torch_threads unset)."""
    gpus_per_worker: float = 0.0
    """Ray: GPUs reserved for each worker (0 on CPU machines)."""
    max_step_retries: int = 2
    """Ray: retries of a step whose actor died before the run fails."""
    torch_threads: int = 0
    """torch intra-op threads per process, and the CPUs a local run asks for (0: locally cpus_per_worker
    rounded up, one by default, so two runs share two cores; on Ray what Ray gives each actor)."""
    gpu_memory_gb: float = 80.0
    """Memory of one GPU in GiB: a GPU run whose memory plan (python -m dapo.train --plan) needs more is
    refused at launch, naming the biggest term and the setting that lowers it."""
    learner_strategy: Literal["ddp", "fsdp"] = "ddp"
    """How learners hold the model. ddp: each a whole copy of weights, gradients and AdamW state (16 bytes
    a parameter in fp32). fsdp: PyTorch FSDP2, each of W learners keeps 1/W of them, one unit per decoder
    layer, bf16 compute with fp32 gradient reduction on GPU; needs backend ray (any learner count).
    verl actor.strategy=fsdp2."""
    fsdp_cpu_offload: bool = False
    """fsdp: keep the parameter shards and the optimiser state in host memory, moved to the GPU per layer
    as needed (slower, fits bigger models). verl fsdp_config.param_offload + optimizer_offload."""

    def __post_init__(self) -> None:
        c = Checks()
        c.require(
            self.learner_strategy != "fsdp" or self.backend == "ray",
            "learner_strategy",
            "fsdp needs backend 'ray' (its learners join a process group); use backend='ray'",
        )
        c.require(
            not self.fsdp_cpu_offload or self.learner_strategy == "fsdp",
            "fsdp_cpu_offload",
            "needs learner_strategy 'fsdp'",
        )
        c.require(1 <= self.num_rollout_workers <= 4096, "num_rollout_workers", "must be in [1, 4096]")
        c.require(1 <= self.num_learner_workers <= 4096, "num_learner_workers", "must be in [1, 4096]")
        c.require(0.0 <= self.cpus_per_worker <= 1024, "cpus_per_worker", "must be in [0, 1024]")
        c.require(0.0 <= self.gpus_per_worker <= 64, "gpus_per_worker", "must be in [0, 64]")
        c.require(0 <= self.max_step_retries <= 100, "max_step_retries", "must be in [0, 100]")
        c.require(0 <= self.torch_threads <= 1024, "torch_threads", "must be in [0, 1024]")
        c.require(0.0 < self.gpu_memory_gb <= 100_000, "gpu_memory_gb", "must be in (0, 100000]")
        c.done()


@dataclass(frozen=True)
class LoggingConfig:
    samples_per_step: int = -1
    """Training samples of each step handed to the sinks and stored (-1: all, kept and discarded groups
    alike). N >= 0 keeps whole groups up to N samples, the trained groups first, then the discarded ones;
    the inspector says how many of each discard reason were not stored."""
    token_data_samples_per_step: int = 8
    """Samples per step that keep per-token data (tokens, log-probs, entropy, ratio) for the token view."""
    hardware_interval_s: float = 5.0
    """Seconds between hardware samples (CPU, memory, GPU) of each process of the run (0: none)."""

    def __post_init__(self) -> None:
        c = Checks()
        c.require(0 <= self.hardware_interval_s <= 3600, "hardware_interval_s", "must be 0 (off) to 3600")
        c.require(-1 <= self.samples_per_step <= MAX_INT, "samples_per_step", "must be -1 (all) or >= 0")
        c.require(
            0 <= self.token_data_samples_per_step <= MAX_INT, "token_data_samples_per_step", "must be >= 0"
        )
        c.done()


SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "data": DataConfig,
    "rollout": RolloutConfig,
    "algorithm": AlgorithmConfig,
    "optim": OptimConfig,
    "validation": ValidationConfig,
    "checkpoint": CheckpointConfig,
    "execution": ExecutionConfig,
    "logging": LoggingConfig,
}
