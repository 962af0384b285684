"""The vLLM rollout engine: the GPU production engine (imported only when the "vllm" engine is chosen).

Targets vLLM 0.10.2 - 0.12 (the V1 engine; `vllm.LLM` offline API). What it relies on, all documented API:
- `LLM(model, tensor_parallel_size, gpu_memory_utilization, enforce_eager, dtype, seed, enable_sleep_mode,
  worker_extension_cls, logprobs_mode)`; `LLM.generate(list of TokensPrompt dicts, list of SamplingParams)`;
- `SamplingParams(n, temperature, top_p, top_k, max_tokens, logprobs=0, seed, stop_token_ids, detokenize)`;
- weight sync through `LLM.collective_rpc(method_name, args)`, calling a method of our worker extension
  class (vLLM mixes it into every worker), which feeds `worker.model_runner.model.load_weights(...)` —
  the path of vLLM's own RLHF examples, independent of executor internals (`driver_worker` differs per
  version and does not exist in the worker processes of V1). Tensors cannot travel through V1's untyped
  RPC decoder, so the state dict goes through a safetensors file (in /dev/shm by default) and only its
  path travels; every worker of the node reads it and `load_weights` shards it for tensor parallelism;
- `LLM.sleep(level=1)` / `LLM.wake_up()` (needs enable_sleep_mode=True) and `LLM.reset_prefix_cache()`
  after new weights, so no prefix computed with old weights is reused.
Log-probs: with vLLM >= 0.10.2 we ask for logprobs_mode="processed_logprobs", i.e. log softmax(logits / T)
as the interface wants, exact whenever top-k/top-p are off (training); with truncation vLLM renormalises
over the kept tokens. Greedy (T=0 or top_k=1) runs as vLLM greedy: log-probs of temperature 1.
"""

from __future__ import annotations

import logging
import os
import tempfile
import uuid
from collections.abc import Sequence
from typing import Any

import torch
import vllm
from packaging.version import Version

from dapo.rollout.base import Completion, RolloutEngine, SamplingParams, Weights, check_prompts, named_tensors

logger = logging.getLogger(__name__)

WORKER_EXTENSION = f"{__name__}.WeightSyncExtension"
_FINISH_REASONS = {"stop": "eos", "length": "length"}  # vLLM finish_reason -> ours ("abort" is an error)


class WeightSyncExtension:
    """Mixed into every vLLM worker via `worker_extension_cls`; `self` is the worker."""

    def dapo_load_weights(self, path: str) -> None:
        """Stream the tensors of a safetensors file into the worker's model (HF parameter names)."""
        from safetensors import safe_open

        runner = self.model_runner  # type: ignore[attr-defined]
        model = runner.get_model() if hasattr(runner, "get_model") else runner.model  # unwraps CUDA graphs
        device = str(getattr(self, "device", "cpu"))
        with safe_open(path, framework="pt", device=device) as f:
            model.load_weights(weights=((name, f.get_tensor(name)) for name in f.keys()))


class VLLMEngine(RolloutEngine):
    """Rollouts with vLLM on GPUs.

    Args:
        model_path: local HF model directory (weights, config, tokenizer unless skip_tokenizer_init).
        model: must be None (vLLM loads its own copy; send the learner's weights with update_weights).
        eos_token_ids: ids that end a sample (passed as stop_token_ids, on top of the model's own EOS).
        pad_token_id: unused by vLLM (no padding), kept for the common signature.
        device: ignored (vLLM places itself on the visible GPUs).
        dtype: weight/activation dtype ("bfloat16" in production; "auto", "float16", "float32").
        seed: vLLM's global seed (used by calls without a seed).
        tensor_parallel_size, gpu_memory_utilization, enforce_eager, enable_sleep_mode: as vllm.LLM.
        weight_sync_dir: where update_weights writes its file (default /dev/shm, else the temp dir).
        llm_kwargs: further vllm.LLM arguments (max_model_len, skip_tokenizer_init, ...).
    """

    name = "vllm"

    def __init__(
        self,
        *,
        model_path: str | None,
        model: torch.nn.Module | None = None,
        eos_token_ids: Sequence[int],
        pad_token_id: int,
        device: str = "cuda",
        dtype: str = "bfloat16",
        seed: int = 0,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.5,
        enforce_eager: bool = False,
        enable_sleep_mode: bool = False,
        weight_sync_dir: str | None = None,
        **llm_kwargs: Any,
    ) -> None:
        if model is not None or model_path is None:
            raise ValueError("the vllm engine loads `model_path` itself; pass model=None and sync weights")
        if not eos_token_ids:
            raise ValueError("eos_token_ids must name at least one token id")
        self.eos_token_ids = sorted(set(int(t) for t in eos_token_ids))
        self.pad_token_id = int(pad_token_id)
        self.enable_sleep_mode = enable_sleep_mode
        self.weight_sync_dir = weight_sync_dir or (
            "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        )
        if Version(vllm.__version__) >= Version("0.10.2"):
            llm_kwargs.setdefault("logprobs_mode", "processed_logprobs")
        else:
            logger.warning("vLLM %s < 0.10.2: log-probs are those of temperature 1", vllm.__version__)
        self.llm = vllm.LLM(
            model=model_path,
            tensor_parallel_size=tensor_parallel_size,
            dtype=dtype,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            enable_sleep_mode=enable_sleep_mode,
            worker_extension_cls=WORKER_EXTENSION,
            **llm_kwargs,
        )
        self._asleep = False

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        """See `RolloutEngine.generate`: one vLLM call for the whole batch, outputs in input order."""
        check_prompts(prompts)
        self.wake_up()
        requests, sampling = self._requests(prompts, params)
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        return [self._completion(c) for out in outputs for c in sorted(out.outputs, key=lambda c: c.index)]

    def update_weights(self, weights: Weights) -> None:
        """Write the weights to a safetensors file, load it in every worker, drop the prefix cache."""
        from safetensors.torch import save_file

        self.wake_up()
        path = os.path.join(self.weight_sync_dir, f"dapo-weights-{uuid.uuid4().hex}.safetensors")
        try:
            save_file(_host_copy(weights), path)
            self.llm.collective_rpc("dapo_load_weights", args=(path,))
        finally:
            if os.path.exists(path):
                os.unlink(path)
        self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        """Offload weights to host memory and free the KV cache (vLLM sleep level 1)."""
        if not self.enable_sleep_mode:
            logger.warning("vllm engine: sleep() ignored, the engine was built without enable_sleep_mode")
            return
        if not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def wake_up(self) -> None:
        """Reload the weights and KV cache after `sleep` (no-op when awake)."""
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def close(self) -> None:
        """Shut the engine core (and its worker processes) down and release GPU memory; idempotent."""
        if self.llm is None:
            return
        engine_core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if engine_core is not None and hasattr(engine_core, "shutdown"):
            engine_core.shutdown()
        self.llm = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _requests(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> tuple[list, list]:
        """(TokensPrompt dicts, vllm.SamplingParams) with one entry per request, prompt-major.

        Greedy runs as n copies of each prompt with n=1 (some vLLM versions reject n > 1 when greedy).
        A call seed s gives request i the seed s + i * n; vLLM seeds sample j of a request with
        seed + j, so every sample of the call has its own stream.
        """
        copies, n = (params.n, 1) if params.greedy else (1, params.n)
        requests = [{"prompt_token_ids": list(p)} for p in prompts for _ in range(copies)]
        sampling = [self._sampling(params, n, i) for i in range(len(requests))]
        return requests, sampling

    def _sampling(self, params: SamplingParams, n: int, index: int) -> vllm.SamplingParams:
        """The vllm.SamplingParams of request `index`; disabled top-k/top-p are left at vLLM's default."""
        kwargs: dict[str, Any] = {
            "n": n,
            "max_tokens": params.max_new_tokens,
            "logprobs": 0,
            "detokenize": False,
            "stop_token_ids": list(self.eos_token_ids),
        }
        if params.greedy:
            kwargs["temperature"] = 0.0
        else:
            kwargs["temperature"] = params.temperature
            if params.top_p < 1.0:
                kwargs["top_p"] = params.top_p
            if params.top_k > 0:
                kwargs["top_k"] = params.top_k
            if params.seed is not None:
                kwargs["seed"] = params.seed + index * n
        return vllm.SamplingParams(**kwargs)

    @staticmethod
    def _completion(output: Any) -> Completion:
        """vllm CompletionOutput -> Completion (the sampled token's log-prob from each step's dict)."""
        if output.finish_reason not in _FINISH_REASONS:
            raise RuntimeError(f"vLLM request ended with finish_reason={output.finish_reason!r}")
        token_ids = [int(t) for t in output.token_ids]
        logprobs = [float(step[t].logprob) for step, t in zip(output.logprobs, token_ids, strict=True)]
        return Completion(token_ids, logprobs, _FINISH_REASONS[output.finish_reason])


def _host_copy(weights: Weights) -> dict[str, torch.Tensor]:
    """Contiguous host copies for safetensors, one per distinct tensor (tied aliases are sent once)."""
    seen: set[tuple[str, int, torch.dtype, tuple[int, ...]]] = set()
    out: dict[str, torch.Tensor] = {}
    for name, tensor in named_tensors(weights):
        key = (str(tensor.device), tensor.data_ptr(), tensor.dtype, tuple(tensor.shape))
        if key in seen:
            continue
        seen.add(key)
        out[name] = tensor.detach().to("cpu", copy=True).contiguous()
    return out
