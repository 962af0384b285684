"""A stand-in for vLLM 0.33's API, on CPU, that records what the vllm engine sends it.

It has 0.33's signatures: `LLM.collective_rpc(method, timeout, args, kwargs)` returning one result per
worker (run in parallel, like vLLM's worker processes), `Worker.reload_weights(weights_iterator,
weights_path, is_checkpoint_format)`, `Worker.get_model()`, `LLM.sleep(level, mode)`, `LLM.wake_up(tags)`,
`SamplingParams` refusing fields 0.33 does not have, finish reasons "stop", "length", "abort", "error",
"repetition", and the model's `LogitsProcessor` (vllm.model_executor.layers.logits_processor) with its
`scale`. `FakeLLM` answers with fixed tokens; `SamplerLLM` samples as vLLM 0.33's `Sampler` does
(v1/sample/sampler.py), from a fixed table of logits, in both log-prob modes.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import threading
import types
from types import SimpleNamespace

import pytest
import torch

EOS = 2


@dataclasses.dataclass
class FakeSamplingParams:
    """The fields of vllm.SamplingParams 0.33 that the engine may set, with 0.33's defaults."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop_token_ids: list[int] | None = None
    max_tokens: int | None = 16
    logprobs: int | None = None
    detokenize: bool = True


class LogitsProcessor(torch.nn.Module):
    """vLLM's layer that turns hidden states into logits, times `scale` (1 unless the family scales)."""

    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.scale = scale


class FakeModel(torch.nn.Module):
    """A vLLM model: `load_weights` consumes (name, tensor) pairs, refusing names it does not have."""

    def __init__(self, names: set[str] | None = None, scale: float = 1.0):
        super().__init__()
        self.names, self.received, self.order = names, {}, []
        self.logits_processor = LogitsProcessor(scale)

    def load_weights(self, weights):
        for name, tensor in weights:
            if self.names is not None and name not in self.names:
                raise KeyError(f"no parameter {name}")
            self.received[name] = tensor.clone()
            self.order.append(name)
        return set(self.received)


def worker_class(vllm_module, model: FakeModel):
    class Worker(vllm_module.WeightSyncExtension):
        """vLLM 0.33's Worker, as far as the extension sees it."""

        device = torch.device("cpu")

        def __init__(self):
            self.model_runner = SimpleNamespace(model=model)
            self.reloads = []

        def get_model(self):
            return self.model_runner.model

        def reload_weights(self, weights_iterator=None, weights_path=None, is_checkpoint_format=True):
            self.reloads.append({"weights_path": weights_path, "is_checkpoint_format": is_checkpoint_format})
            self.model_runner.model.load_weights(weights_iterator)

    return Worker


class FakeLLM:
    """Answers request i, sample j with tokens [10 * i + j, EOS] (or 2 tokens hitting the cap)."""

    finish_reason: str | None = None  # forces every sample's finish reason when set

    def __init__(self, model: str, **kwargs):
        self.kwargs = {"model": model, **kwargs}
        self.calls, self.prefix_resets, self.sleeps, self.workers = [], 0, [], []

    def generate(
        self,
        prompts,
        sampling_params=None,
        *,
        use_tqdm=True,
        lora_request=None,
        priority=None,
        tokenization_kwargs=None,
        mm_processor_kwargs=None,
    ):
        self.calls.append((prompts, sampling_params))
        outputs = []
        for i, sp in enumerate(sampling_params):
            samples = []
            for j in reversed(range(sp.n)):  # out of order on purpose: the engine sorts by index
                ids = [10 * i + j, EOS] if sp.max_tokens > 2 else [10 * i + j, 7]
                logprobs = [{t: SimpleNamespace(logprob=-0.25 * (k + 1))} for k, t in enumerate(ids)]
                reason = self.finish_reason or ("stop" if ids[-1] == EOS else "length")
                samples.append(
                    SimpleNamespace(index=j, token_ids=ids, logprobs=logprobs, finish_reason=reason)
                )
            outputs.append(SimpleNamespace(outputs=samples))
        return outputs

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        """Runs `method` on every worker at once (vLLM's workers are processes); one result each."""
        results: list = [None] * len(self.workers)
        errors: list[BaseException] = []

        def run(index: int) -> None:
            try:
                results[index] = getattr(self.workers[index], method)(*args, **(kwargs or {}))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(self.workers))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        if errors:
            raise errors[0]
        return results

    def reset_prefix_cache(self, reset_running_requests=False, reset_connector=False):
        self.prefix_resets += 1
        return True

    def sleep(self, level=1, mode="abort"):
        self.sleeps.append(("sleep", level))

    def wake_up(self, tags=None):
        self.sleeps.append(("wake_up", tags))
        return True


def standin(version: str = "0.33.0") -> types.ModuleType:
    fake = types.ModuleType("vllm")
    fake.__version__ = version
    fake.LLM = FakeLLM
    fake.SamplingParams = FakeSamplingParams
    return fake


def install(monkeypatch: pytest.MonkeyPatch, version: str = "0.33.0") -> types.ModuleType:
    """dapo.rollout.vllm imported against the stand-in (sys.modules restored after the test)."""
    monkeypatch.setitem(sys.modules, "vllm", standin(version))
    layers = types.ModuleType("vllm.model_executor.layers.logits_processor")
    layers.LogitsProcessor = LogitsProcessor
    monkeypatch.setitem(sys.modules, "vllm.model_executor.layers.logits_processor", layers)
    monkeypatch.delitem(sys.modules, "dapo.rollout.vllm", raising=False)
    return importlib.import_module("dapo.rollout.vllm")


def make(vllm_module, names: set[str] | None = None, *, model_path: str = "/models/x", **options):
    """An engine whose LLM has tensor_parallel_size workers, one FakeModel each."""
    engine = vllm_module.VLLMEngine(model_path=model_path, eos_token_ids=[EOS], pad_token_id=0, **options)
    engine.llm.workers = [worker_class(vllm_module, FakeModel(names))() for _ in range(engine.workers)]
    return engine


def received(engine, worker: int = 0) -> dict[str, torch.Tensor]:
    return engine.llm.workers[worker].model_runner.model.received


VOCAB = 12
STEP_LOGITS = torch.randn(64, VOCAB, generator=torch.Generator().manual_seed(0)) * 2.5
"""The model's raw logits at each generated position (the same for every request: what matters is how
they are turned into tokens and log-probs)."""


class SamplerLLM(FakeLLM):
    """Samples like vLLM 0.33's `Sampler` (v1/sample/sampler.py, the native top-k/top-p path), from
    `STEP_LOGITS` times worker 0's `LogitsProcessor.scale`:

    1. raw log-probs ("raw_logprobs"): log softmax of those logits, before anything else;
    2. greedy requests (temperature < 1e-5): argmax; their processed log-probs are of the logits as they are;
    3. otherwise the logits are divided by the temperature, then top-k, then top-p on the renormalised
       top-k distribution (`apply_top_k_top_p`); processed log-probs ("processed_logprobs") are the log
       softmax of what is left (renormalised over the kept tokens), and the token is drawn from it.
    """

    def generate(self, prompts, sampling_params=None, *, use_tqdm=True, **kwargs):
        self.calls.append((prompts, sampling_params))
        mode = self.kwargs.get("logprobs_mode", "raw_logprobs")
        head = getattr(self.workers[0].get_model(), "logits_processor", None)
        scale = head.scale if head is not None else 1.0
        outputs = []
        for sp in sampling_params:
            generator = torch.Generator().manual_seed(sp.seed if sp.seed is not None else 0)
            samples = []
            for j in range(sp.n):
                ids, logprobs = [], []
                for step in range(sp.max_tokens):
                    token, logp = self.sample(STEP_LOGITS[step] * scale, sp, mode, generator)
                    ids.append(token)
                    logprobs.append({token: SimpleNamespace(logprob=logp)})
                    if token == EOS:
                        break
                reason = "stop" if ids[-1] == EOS else "length"
                samples.append(
                    SimpleNamespace(index=j, token_ids=ids, logprobs=logprobs, finish_reason=reason)
                )
            outputs.append(SimpleNamespace(outputs=samples))
        return outputs

    @staticmethod
    def sample(logits, sp, mode: str, generator: torch.Generator) -> tuple[int, float]:
        raw = torch.log_softmax(logits, dim=-1)
        if sp.temperature < 1e-5:
            token = int(logits.argmax())
            return token, float(raw[token])
        kept = keep_top_k_top_p(logits / sp.temperature, sp.top_k, sp.top_p)
        processed = torch.log_softmax(kept, dim=-1)
        token = int(torch.multinomial(processed.exp(), 1, generator=generator))
        return token, float((raw if mode == "raw_logprobs" else processed)[token])


def keep_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """vLLM's truncation: the top_k largest (0: all), then the smallest set of the most likely whose mass
    reaches top_p in the renormalised distribution; the rest -inf."""
    if 0 < top_k < logits.numel():
        logits = logits.masked_fill(logits < logits.topk(top_k).values[-1], float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    order = probs.argsort(descending=True)
    above = torch.cumsum(probs[order], 0) - probs[order]  # mass ranked strictly above each token
    drop = torch.zeros_like(probs, dtype=torch.bool)
    drop[order] = above >= top_p
    return logits.masked_fill(drop, float("-inf"))
