"""The vLLM rollout engine: the GPU production engine (imported only when the "vllm" engine is chosen).

Supports vLLM 0.33.x (`SUPPORTED_VLLM`; requirements-gpu.lock pins 0.33.0, the V1 engine and its
`vllm.LLM` offline API); any other installed release fails at construction with its version in the
message. What it relies on, public API of 0.33 but for the logits scale of the temperature fold:
- `LLM(model, tensor_parallel_size, gpu_memory_utilization, enforce_eager, dtype, seed, enable_sleep_mode,
  worker_extension_cls, logprobs_mode)`; `LLM.generate(list of TokensPrompt dicts, list of SamplingParams)`;
- `Worker.get_model()` and `vllm.model_executor.layers.logits_processor.LogitsProcessor.scale` (the
  temperature fold, below);
- `SamplingParams(n, temperature, top_p, top_k, max_tokens, logprobs=0, seed, stop_token_ids, detokenize)`;
  finish reasons "stop" and "length" (ours: "eos", "length"); "abort", "error" and "repetition" fail the
  call with the reason in the message;
- weight sync through `LLM.collective_rpc(method_name, args)` calling our worker extension (vLLM mixes it
  into every worker), which hands an iterator to `Worker.reload_weights(weights_iterator=...,
  is_checkpoint_format=True)`: vLLM's wrapped reload (its layer-wise reload lifecycle in the worker's
  config context, so post-processed and quantised layers are rebuilt as at load time). The iterator
  reads the tensors from a Unix socket as this process sends them, one at a time (`weight_stream.py`):
  no model-sized file, no /dev/shm, no whole second copy anywhere; an FSDP learner's layers are sent as
  they are gathered. Control travels through vLLM's RPC (socket path and token), data beside it.
  vLLM's other RL path, its weight-transfer engine (`weight_transfer_config`, backends ipc / nccl), needs
  the sender's tensors on the workers' GPUs (ipc) or a NCCL group with every worker (nccl) and a list of
  every parameter before the first is sent; the stream works from any process of the node, with CPU or
  GPU tensors, and learns the names as they come;
- `LLM.sleep(level=1)` / `LLM.wake_up(tags)` (needs enable_sleep_mode=True): a weight update wakes the
  weights only, the next `generate` the KV cache; `LLM.reset_prefix_cache()` after new weights, so no
  prefix computed with old weights is reused.
Log-probs, one definition for every engine (`Completion.logprobs`, verl's): log softmax(logits / T) over
the WHOLE vocabulary, before top-k/top-p truncation. vLLM 0.33 offers (its `Sampler`, v1/sample/sampler.py)
"raw_logprobs", log softmax of the logits its model's `LogitsProcessor` returns, before temperature and
truncation, and "processed_logprobs", after temperature AND after top-k/top-p (renormalised over the kept
tokens: biased whenever truncation is on). Neither is log softmax(logits / T) under truncation, so the
engine runs vLLM with logprobs_mode="raw_logprobs" and folds the temperature into the logits: before a
call at a new temperature T, every worker sets its `LogitsProcessor.scale` to (its scale at load) / T
(`WeightSyncExtension.dapo_fold_temperature`; a plain attribute read at each step, outside CUDA graphs),
and the request asks vLLM for temperature 1. vLLM then samples top-k/top-p from softmax(logits / T),
exactly as at temperature T, and its raw log-probs are log softmax(logits / T). The cost: in bfloat16 the
scaled logits are rounded once more (at T = 1, the training default, nothing is scaled). Greedy (T=0 or
top_k=1) runs as vLLM greedy: log-probs of temperature 1 at T=0, of T when top_k=1.
Weight names: the learner's in-memory state is sent in the checkpoint's layout (`checkpoint_names`:
transformers 5 fuses a mixture-of-experts model's experts in memory, vLLM loads the per-expert files).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
import vllm
from packaging.version import Version

from dapo.rollout import weight_stream
from dapo.rollout.base import Completion, RolloutEngine, SamplingParams, Weights, check_prompts, named_tensors
from dapo.rollout.checkpoint_names import CheckpointFormat

logger = logging.getLogger(__name__)

SUPPORTED_VLLM = ("0.33",)
"""The vLLM releases (major.minor) this engine supports; requirements-gpu.lock pins one of them."""
WORKER_EXTENSION = f"{__name__}.WeightSyncExtension"
LOGPROBS_MODE = "raw_logprobs"
"""vLLM's log-probs before its temperature and truncation; the temperature is folded into the logits."""
_FINISH_REASONS = {"stop": "eos", "length": "length"}  # vLLM finish_reason -> ours; others are errors


def check_version(version: str) -> None:
    """Raise RuntimeError, naming `version`, unless it is a release of SUPPORTED_VLLM."""
    parsed = Version(version)
    if f"{parsed.major}.{parsed.minor}" not in SUPPORTED_VLLM:
        supported = ", ".join(f"{v}.x" for v in SUPPORTED_VLLM)
        raise RuntimeError(
            f"vLLM {version} is installed, but the vllm engine supports vLLM {supported} only: install the "
            "GPU lock (`pip install -r requirements-gpu.lock`, docs/cluster.md, 'vLLM on GPUs')"
        )


class WeightSyncExtension:
    """Mixed into every vLLM worker via `worker_extension_cls`; `self` is the worker."""

    def dapo_reload_weights(self, path: str, token: str) -> int:
        """Reload the model from the weight stream at `path` through vLLM's wrapped reload; returns the
        number of tensors received (the sender checks it)."""
        device = getattr(self, "device", "cpu")
        stream = weight_stream.receive(path, token, device)
        received = 0

        def counted() -> Iterator[tuple[str, torch.Tensor]]:
            nonlocal received
            for pair in stream:
                received += 1
                yield pair

        try:
            self.reload_weights(weights_iterator=counted(), is_checkpoint_format=True)  # type: ignore[attr-defined]
        finally:
            stream.close()  # hang up at once, also on an error: the sender must not wait on us
        return received

    def dapo_fold_temperature(self, temperature: float) -> int:
        """Make the model's logits logits / ``temperature``: every `LogitsProcessor` gets its scale at load
        divided by ``temperature`` (1 restores it). Returns how many it set (none on a pipeline stage
        without the head)."""
        from vllm.model_executor.layers.logits_processor import LogitsProcessor

        count = 0
        for module in self.get_model().modules():  # type: ignore[attr-defined]
            if isinstance(module, LogitsProcessor):
                if not hasattr(module, "_dapo_base_scale"):
                    module._dapo_base_scale = module.scale  # Cohere's logit_scale, Granite's 1 / scaling
                module.scale = module._dapo_base_scale / temperature
                count += 1
        return count


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
        **llm_kwargs: Any,
    ) -> None:
        check_version(vllm.__version__)
        if model is not None or model_path is None:
            raise ValueError("the vllm engine loads `model_path` itself; pass model=None and sync weights")
        if not eos_token_ids:
            raise ValueError("eos_token_ids must name at least one token id")
        self.eos_token_ids = sorted(set(int(t) for t in eos_token_ids))
        self.pad_token_id = int(pad_token_id)
        self.enable_sleep_mode = enable_sleep_mode
        self.workers = tensor_parallel_size * int(llm_kwargs.get("pipeline_parallel_size", 1))
        if llm_kwargs.setdefault("logprobs_mode", LOGPROBS_MODE) != LOGPROBS_MODE:
            raise ValueError(
                f"logprobs_mode={llm_kwargs['logprobs_mode']!r}: the vllm engine needs {LOGPROBS_MODE!r} "
                "(log-probs of the whole distribution at the sampling temperature, as every engine returns)"
            )
        self.checkpoint_format = CheckpointFormat(model_path)
        self._folded = 1.0  # the temperature the workers' logits are divided by (1: vLLM's own scale)
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
        self._asleep: set[str] = set()  # the sleeping memory tags ("weights", "kv_cache")
        self.last_sync: weight_stream.SendStats | None = None
        """What the last update_weights sent: tensors, bytes, seconds (for benchmarks and logs)."""

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        """See `RolloutEngine.generate`: one vLLM call for the whole batch, outputs in input order."""
        check_prompts(prompts)
        self.wake_up()
        self._fold_temperature(params.temperature if params.temperature > 0 else 1.0)
        requests, sampling = self._requests(prompts, params)
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        return [self._completion(c) for out in outputs for c in sorted(out.outputs, key=lambda c: c.index)]

    def update_weights(self, weights: Weights) -> None:
        """Stream the weights into every worker's `reload_weights`, then drop the prefix cache.

        The RPC runs in a helper thread while this thread sends (an FSDP learner's gathers stay on the
        caller's thread). Tied aliases of a state dict are sent once (vLLM ties them itself).
        """
        self._wake({"weights"})
        outcome: dict[str, Any] = {}

        def rpc(address: tuple[str, str]) -> None:
            try:
                outcome["counts"] = self.llm.collective_rpc("dapo_reload_weights", args=address)
            except BaseException as exc:  # re-raised on the caller's thread
                outcome["error"] = exc

        with weight_stream.WeightSender() as sender:
            thread = threading.Thread(target=rpc, args=(sender.address,), name="vllm-reload", daemon=True)
            thread.start()
            try:
                pairs = self.checkpoint_format.convert(_distinct(weights))
                stats = sender.send(pairs, self.workers, keep_waiting=thread.is_alive)
            except (OSError, ConnectionError) as exc:
                thread.join()
                raise RuntimeError(f"weight sync failed: {outcome.get('error') or exc}") from exc
            thread.join()
        if "error" in outcome:
            raise RuntimeError(f"weight sync failed in vLLM's reload_weights: {outcome['error']}")
        counts = list(outcome["counts"])
        if counts != [stats.tensors] * self.workers:
            raise RuntimeError(f"weight sync: sent {stats.tensors} tensors, the workers received {counts}")
        self.llm.reset_prefix_cache()
        self.last_sync = stats
        logger.debug(
            "weight sync: %d tensors, %.0f MB in %.2f s", stats.tensors, stats.bytes / 1e6, stats.seconds
        )

    def _fold_temperature(self, temperature: float) -> None:
        """Divide the workers' logits by ``temperature`` when they are not already (one RPC per change:
        training calls keep one temperature, validation may use another)."""
        if temperature == self._folded:
            return
        counts = list(self.llm.collective_rpc("dapo_fold_temperature", args=(temperature,)))
        if not any(counts):
            raise RuntimeError(
                "cannot apply the sampling temperature: no LogitsProcessor in vLLM's model (the vllm engine "
                "folds the temperature into it, so that log-probs are those of the whole distribution)"
            )
        self._folded = temperature

    def sleep(self) -> None:
        """Offload weights to host memory and free the KV cache (vLLM sleep level 1)."""
        if not self.enable_sleep_mode:
            logger.warning("vllm engine: sleep() ignored, the engine was built without enable_sleep_mode")
            return
        if not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = {"weights", "kv_cache"}

    def wake_up(self) -> None:
        """Reload what `sleep` released (no-op when awake)."""
        if self._asleep:
            self.llm.wake_up()  # every tag: vLLM needs a full wake before it serves requests
            self._asleep = set()

    def _wake(self, tags: set[str]) -> None:
        """Wake the sleeping memory among `tags` only (the weights before a reload: the KV cache stays
        released until the next generate)."""
        waking = self._asleep & tags
        if waking:
            self.llm.wake_up(tags=sorted(waking))
            self._asleep -= waking

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

        Greedy runs as n copies of each prompt with n=1 (vLLM rejects n > 1 when greedy).
        A call seed s gives request i the seed s + i * n; vLLM seeds sample j of a request with
        seed + j, so every sample of the call has its own stream.
        """
        copies, n = (params.n, 1) if params.greedy else (1, params.n)
        requests = [{"prompt_token_ids": list(p)} for p in prompts for _ in range(copies)]
        sampling = [self._sampling(params, n, i) for i in range(len(requests))]
        return requests, sampling

    def _sampling(self, params: SamplingParams, n: int, index: int) -> vllm.SamplingParams:
        """The vllm.SamplingParams of request `index`; disabled top-k/top-p are left at vLLM's default.
        The temperature is in the logits already (`_fold_temperature`): vLLM samples at 1 (0: greedy)."""
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
            kwargs["temperature"] = 1.0
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
            raise RuntimeError(
                f"vLLM request ended with finish_reason={output.finish_reason!r} after "
                f"{len(output.token_ids)} tokens (only 'stop' and 'length' make a sample)"
            )
        token_ids = [int(t) for t in output.token_ids]
        logprobs = [float(step[t].logprob) for step, t in zip(output.logprobs, token_ids, strict=True)]
        return Completion(token_ids, logprobs, _FINISH_REASONS[output.finish_reason])


def _distinct(weights: Weights) -> Iterator[tuple[str, torch.Tensor]]:
    """The pairs of `weights`, a state dict's tied aliases (same storage, dtype and shape) once only.

    Only a state dict is filtered: its tensors are all alive, whereas a stream may free a tensor and
    reuse its memory for the next, which would look like an alias.
    """
    if not isinstance(weights, Mapping):
        yield from named_tensors(weights)
        return
    seen: set[tuple[str, int, torch.dtype, tuple[int, ...]]] = set()
    for name, tensor in weights.items():
        key = (str(tensor.device), tensor.data_ptr(), tensor.dtype, tuple(tensor.shape))
        if key not in seen:
            seen.add(key)
            yield name, tensor
