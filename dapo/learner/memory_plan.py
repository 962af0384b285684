"""A memory plan before launch: per-GPU memory of a run, from its config and the model's config.json.

No weights are loaded and nothing here imports torch (the web process shows the plan beside the new-run
form). Every figure is a formula of the model's shape and the config; what each assumes:

- **Parameters** in ``model.dtype`` (b bytes each: 4 float32, 2 bfloat16/float16); **gradients** in the
  same dtype. The parameter count is the decoder's: embeddings, per layer q/k/v/o (q/k/v biases for
  Qwen2, ``attention_bias``), gate/up/down, two RMSNorms (and Qwen3's q/k norms), the final norm, and an
  LM head unless ``tie_word_embeddings``.
- **Optimiser state** (AdamW): fp32 m and v, 8 bytes a parameter; training in bf16/fp16 adds an fp32
  master copy of the weights, 12 bytes a parameter (the mixed-precision layout; an upper bound for a
  learner that keeps its moments in the parameter dtype).
- **ddp** (several learners): every GPU holds all of the above, plus DDP's gradient buckets, a second copy
  of the gradients (``gradient_as_bucket_view`` off, torch's default). **fsdp**: parameters, gradients and
  optimiser state are divided by the number of learners, plus the unsharded units being computed: the
  root (embeddings, head, final norm) and two decoder layers (the one running, the one prefetched).
  FSDP's CPU offload moves the sharded parameters, gradients and optimiser state to host memory.
- **Activations** saved for backward per decoder layer and token, in elements: the input of each of the
  two norms and of the attention and MLP projections (4h), q, k, v and the attention output
  (2·heads·d + 2·kv_heads·d; a flash / memory-efficient kernel keeps no seq×seq matrix) and the MLP's
  gate, up, SiLU and product (4i). Without gradient checkpointing every layer keeps them; with it each
  layer keeps its input (h) and one layer's are live while it is recomputed. Tokens per micro-batch:
  ``optim.micro_batch_size`` × (``data.max_prompt_length`` + ``rollout.max_response_length``), padded to
  the longest; with the token budget ``optim.micro_batch_max_tokens`` set, the budget (or one whole
  sequence, when longer).
- **Log-prob chunks**: the LM head runs on ``optim.logprob_chunk_tokens`` response tokens at a time:
  chunk × vocab × 4 bytes × 4 (fp32 (chunk, vocab) buffers alive at once: a plain linear head's
  closed-form backward keeps two, the no-grad pass a few; a head of another kind, checkpointed, ~5).
- **Rollout**: vLLM colocated with the learner (the local backend, or ``execution.colocate``) reserves
  ``rollout.gpu_memory_utilization`` of the GPU for itself; the hf engine's KV cache
  (2 · layers · kv_heads · d · b per token of every sequence decoded at once) is never held together
  with the training activations, so the larger of the two counts.

The sum is compared with ``execution.gpu_memory_gb`` (GiB, the declared memory of one GPU).

It is a little longer than 400 lines: every figure is one formula of the model's shape, and they are
only summed right when read together.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dapo.runconfig import ConfigError, RunConfig

GIB = 2**30
LOGPROB_FACTOR = 4
"""Full-vocabulary fp32 tensors of one chunk alive at once (see the module docstring)."""
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
SCALE_FIX = "set execution.learner_strategy=fsdp or more learners (execution.num_learner_workers)"


class PlanError(ValueError):
    """The model's config.json does not say enough to plan (a missing size, a mixture of experts)."""


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    qkv_bias: bool
    qk_norm: bool

    @property
    def layer_parameters(self) -> int:
        h, d = self.hidden, self.head_dim
        q, kv = self.heads * d, self.kv_heads * d
        attention = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.qkv_bias else 0)
        return attention + 3 * h * self.intermediate + 2 * h + (2 * d if self.qk_norm else 0)

    @property
    def root_parameters(self) -> int:
        """Embeddings, the final norm and the LM head (when not tied)."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    @property
    def parameters(self) -> int:
        return self.layers * self.layer_parameters + self.root_parameters

    @property
    def activation_elements(self) -> int:
        """Elements one decoder layer saves for backward, per token."""
        return 4 * self.hidden + 2 * (self.heads + self.kv_heads) * self.head_dim + 4 * self.intermediate


def model_shape(config_json: Mapping[str, Any]) -> ModelShape:
    """The decoder's shape from a HuggingFace config.json (a multimodal one's ``text_config``)."""
    cfg = config_json.get("text_config") if isinstance(config_json.get("text_config"), Mapping) else None
    cfg = cfg or config_json
    if cfg.get("num_experts") or cfg.get("num_local_experts"):
        raise PlanError("mixture-of-experts models are not planned")
    names = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    missing = [n for n in names if not isinstance(cfg.get(n), int) or cfg[n] <= 0]
    if missing:
        raise PlanError(f"the model's config.json lacks {', '.join(missing)}")
    heads = cfg["num_attention_heads"]
    kind = str(cfg.get("model_type", ""))
    bias = cfg.get("attention_bias")
    return ModelShape(
        hidden=cfg["hidden_size"],
        intermediate=cfg["intermediate_size"],
        layers=cfg["num_hidden_layers"],
        heads=heads,
        kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // heads),
        vocab=cfg["vocab_size"],
        tied=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=bool(bias) if bias is not None else kind == "qwen2",
        qk_norm=kind.startswith("qwen3"),
    )


def read_model_config(model_dir: str | Path) -> dict[str, Any] | None:
    """The model folder's config.json, or None when there is none (or it is not a JSON object)."""
    try:
        data = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class Term:
    key: str
    label: str
    bytes: int
    detail: str
    fix: str
    """What lowers it, as a sentence that names the setting to change."""
    setting: str
    """That setting: a launch error is reported against it."""
    on_gpu: bool = True

    @property
    def gib(self) -> float:
        return self.bytes / GIB


@dataclass(frozen=True)
class MemoryPlan:
    strategy: str
    learners: int
    parameters: int
    tokens_per_micro_batch: int
    terms: tuple[Term, ...]
    gpu_bytes: int
    activations_without_checkpointing: int
    activations_with_checkpointing: int

    @property
    def total_bytes(self) -> int:
        """Per-GPU peak: every GPU term, except that the hf KV cache and the training activations and
        log-prob chunks are never held at once (the larger of the two counts)."""
        on_gpu = {t.key: t.bytes for t in self.terms if t.on_gpu}
        training = on_gpu.pop("activations", 0) + on_gpu.pop("logprob_chunks", 0)
        return sum(on_gpu.values()) - on_gpu.get("kv_cache", 0) + max(training, on_gpu.get("kv_cache", 0))

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.gpu_bytes

    def biggest(self) -> Term:
        return max((t for t in self.terms if t.on_gpu), key=lambda t: t.bytes)

    def error(self) -> tuple[str, str] | None:
        """(the setting to change, the message) when the plan does not fit; None when it does."""
        if self.fits:
            return None
        big = self.biggest()
        message = (
            f"needs {self.total_bytes / GIB:.1f} GiB per GPU, more than the {self.gpu_bytes / GIB:g} GiB "
            f"declared (execution.gpu_memory_gb); biggest: {big.label} {big.gib:.1f} GiB: {big.fix}"
        )
        return big.setting, message

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "learners": self.learners,
            "parameters": self.parameters,
            "tokens_per_micro_batch": self.tokens_per_micro_batch,
            "terms": [{**asdict(t), "gib": round(t.gib, 3)} for t in self.terms],
            "total_gib": round(self.total_bytes / GIB, 3),
            "gpu_gib": round(self.gpu_bytes / GIB, 3),
            "activations_gib": {
                "without_checkpointing": round(self.activations_without_checkpointing / GIB, 3),
                "with_checkpointing": round(self.activations_with_checkpointing / GIB, 3),
            },
            "fits": self.fits,
            "error": (self.error() or (None, None))[1],
        }

    def table(self) -> str:
        """The plan as text, one term a line (the CLI's ``--plan``)."""
        lines = [
            f"memory plan: {self.parameters:,} parameters ({self.parameters / 1e9:.2f}B), "
            f"{self.strategy} over {self.learners} learner(s), "
            f"{self.tokens_per_micro_batch:,} tokens per micro-batch",
            f"{'term':28s} {'GiB':>9s}  how",
        ]
        for t in self.terms:
            where = "" if t.on_gpu else " (host memory, not counted)"
            lines.append(f"{t.label:28s} {t.gib:9.2f}  {t.detail}{where}")
        a, b = self.activations_without_checkpointing / GIB, self.activations_with_checkpointing / GIB
        lines.append(
            f"{'(activations)':28s} {'':9s}  {a:.2f} GiB without gradient checkpointing, {b:.2f} with"
        )
        verdict = "fits" if self.fits else "does NOT fit"
        lines.append(
            f"{'total per GPU':28s} {self.total_bytes / GIB:9.2f}  of {self.gpu_bytes / GIB:g} GiB: {verdict}"
        )
        if (err := self.error()) is not None:
            lines.append(err[1])
        return "\n".join(lines)


def learner_strategy(config: RunConfig) -> str:
    return str(getattr(config.execution, "learner_strategy", "ddp"))


def cpu_offload(config: RunConfig) -> bool:
    ex = config.execution
    return bool(getattr(ex, "fsdp_cpu_offload", False))


def estimate(config: RunConfig, config_json: Mapping[str, Any]) -> MemoryPlan:
    """The per-GPU memory plan of ``config`` for the model whose config.json is ``config_json``."""
    shape = model_shape(config_json)
    b = DTYPE_BYTES[config.model.dtype]
    n_params = shape.parameters
    learners = config.execution.num_learner_workers if config.execution.backend == "ray" else 1
    strategy = learner_strategy(config)
    fsdp = strategy == "fsdp"
    shards = learners if fsdp else 1
    offload = fsdp and cpu_offload(config)
    sharded = math.ceil(n_params / shards)
    per = f" / {shards} learners" if shards > 1 else ""
    if fsdp:
        fix_states = (
            "add learners (execution.num_learner_workers) or offload to the CPU (execution.fsdp_cpu_offload)"
        )
        state_setting = "execution.num_learner_workers"
    else:
        fix_states, state_setting = SCALE_FIX, "execution.learner_strategy"
    optim_bytes = 12 if b < 4 else 8
    optim_how = "fp32 master weights + fp32 m and v" if b < 4 else "fp32 m and v"
    terms = [
        Term(
            "parameters",
            "parameters",
            sharded * b,
            f"{n_params:,} x {b} B{per}",
            fix_states,
            state_setting,
            not offload,
        ),
        Term(
            "gradients",
            "gradients",
            sharded * b,
            f"{n_params:,} x {b} B{per}",
            fix_states,
            state_setting,
            not offload,
        ),
        Term(
            "optimizer",
            "optimiser state",
            sharded * optim_bytes,
            f"AdamW: {n_params:,} x {optim_bytes} B ({optim_how}){per}",
            fix_states,
            state_setting,
            not offload,
        ),
    ]
    if fsdp:
        gathered = (shape.root_parameters + 2 * shape.layer_parameters) * b
        terms.append(
            Term(
                "fsdp_gathered",
                "FSDP unsharded units",
                gathered,
                "root (embeddings, head, norm) + 2 decoder layers",
                "raise execution.gpu_memory_gb if the GPUs have more, or use a smaller model",
                "execution.gpu_memory_gb",
            )
        )
    elif learners > 1:
        terms.append(
            Term(
                "ddp_buckets",
                "DDP gradient buckets",
                n_params * b,
                f"{n_params:,} x {b} B",
                SCALE_FIX,
                "execution.learner_strategy",
            )
        )
    seq = config.data.max_prompt_length + config.rollout.max_response_length
    budget = config.optim.micro_batch_max_tokens  # at least one whole sequence (validated)
    tokens = max(budget, seq) if budget > 0 else config.optim.micro_batch_size * seq
    per_layer = tokens * shape.activation_elements * b
    without = shape.layers * per_layer
    with_ckpt = shape.layers * tokens * shape.hidden * b + per_layer
    if config.model.gradient_checkpointing:
        act = Term(
            "activations",
            "activations (checkpointed)",
            with_ckpt,
            f"{tokens:,} tokens x ({shape.layers} x {shape.hidden:,} + {shape.activation_elements:,})"
            f" x {b} B",
            "lower optim.micro_batch_size or set the token budget optim.micro_batch_max_tokens",
            "optim.micro_batch_size",
        )
    else:
        act = Term(
            "activations",
            "activations",
            without,
            f"{tokens:,} tokens x {shape.layers} layers x {shape.activation_elements:,} x {b} B",
            f"set model.gradient_checkpointing=true ({with_ckpt / GIB:.1f} GiB with it)",
            "model.gradient_checkpointing",
        )
    terms.append(act)
    response_tokens = (
        tokens if budget > 0 else config.optim.micro_batch_size * config.rollout.max_response_length
    )
    chunk = max(1, min(config.optim.logprob_chunk_tokens, response_tokens))
    terms.append(
        Term(
            "logprob_chunks",
            "log-prob chunks",
            chunk * shape.vocab * 4 * LOGPROB_FACTOR,
            f"{chunk:,} tokens x {shape.vocab:,} vocab x 4 B x {LOGPROB_FACTOR}",
            "lower optim.micro_batch_size (fewer response tokens per micro-batch)",
            "optim.micro_batch_size",
        )
    )
    terms.extend(_rollout_terms(config, shape, b, seq))
    return MemoryPlan(
        strategy=strategy,
        learners=learners,
        parameters=n_params,
        tokens_per_micro_batch=tokens,
        terms=tuple(terms),
        gpu_bytes=int(config.execution.gpu_memory_gb * GIB),
        activations_without_checkpointing=without,
        activations_with_checkpointing=with_ckpt,
    )


def _rollout_terms(config: RunConfig, shape: ModelShape, b: int, seq: int) -> list[Term]:
    shared = config.execution.backend == "local" or config.execution.colocate
    if not shared:
        return []  # the rollout engines run on GPUs of their own
    if config.rollout.engine == "vllm":
        util = config.rollout.gpu_memory_utilization
        return [
            Term(
                "vllm",
                "vLLM rollout share",
                int(util * config.execution.gpu_memory_gb * GIB),
                f"rollout.gpu_memory_utilization {util:g} of the GPU",
                "lower rollout.gpu_memory_utilization or set execution.colocate=false",
                "rollout.gpu_memory_utilization",
            )
        ]
    workers = config.execution.num_rollout_workers if config.execution.backend == "ray" else 1
    rows = config.rollout.max_batch_size or math.ceil(config.data.gen_batch_size * config.rollout.n / workers)
    per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * b
    return [
        Term(
            "kv_cache",
            "hf rollout KV cache",
            rows * seq * per_token,
            f"{rows:,} sequences x {seq:,} tokens x {per_token:,} B",
            "set rollout.max_batch_size (sequences decoded at once)",
            "rollout.max_batch_size",
        )
    ]


def check_fits(config: RunConfig, config_json: Mapping[str, Any] | None) -> MemoryPlan | None:
    """Raise ConfigError({setting: message}) when a GPU run cannot fit its declared GPU memory.

    A CPU run (``model.device`` cpu), or a model whose config.json is missing or unplannable, is not
    checked (returns None); otherwise returns the plan."""
    if config.model.device == "cpu" or config_json is None:
        return None
    try:
        plan = estimate(config, config_json)
    except PlanError:
        return None
    if (err := plan.error()) is not None:
        raise ConfigError({err[0]: err[1]})
    return plan
