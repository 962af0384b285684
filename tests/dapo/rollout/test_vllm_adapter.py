"""The vllm engine's adapter logic, on CPU, against a stand-in for vLLM 0.33's API that records the calls.

The real engine is checked by the conformance module where vLLM is installed (bench/gpu_check.sh); this
pins what we send to vLLM (sampling parameters, seeds, greedy expansion, the weight stream into
`reload_weights`, sleep tags) and how we map what comes back, everywhere. The stand-in has 0.33's
signatures: `LLM.collective_rpc(method, timeout, args, kwargs)` returning one result per worker (run in
parallel, like vLLM's worker processes), `Worker.reload_weights(weights_iterator, weights_path,
is_checkpoint_format)`, `LLM.sleep(level, mode)`, `LLM.wake_up(tags)`, and `SamplingParams` refusing
fields 0.33 does not have; finish reasons "stop", "length", "abort", "error", "repetition".
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import threading
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from dapo.rollout import SamplingParams

EOS = 2
ROOT = Path(__file__).resolve().parents[3]


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


class FakeModel:
    """A vLLM model: `load_weights` consumes (name, tensor) pairs, refusing names it does not have."""

    def __init__(self, names: set[str] | None = None):
        self.names, self.received, self.order = names, {}, []

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


@pytest.fixture
def vllm_module(monkeypatch):
    """dapo.rollout.vllm imported against the stand-in vllm (restored after the test)."""
    monkeypatch.setitem(sys.modules, "vllm", standin())
    monkeypatch.delitem(sys.modules, "dapo.rollout.vllm", raising=False)
    return importlib.import_module("dapo.rollout.vllm")


def make(vllm_module, names: set[str] | None = None, **options):
    """An engine whose LLM has tensor_parallel_size workers, sharing one FakeModel per worker."""
    engine = vllm_module.VLLMEngine(model_path="/models/x", eos_token_ids=[EOS], pad_token_id=0, **options)
    engine.llm.workers = [worker_class(vllm_module, FakeModel(names))() for _ in range(engine.workers)]
    return engine


def received(engine, worker: int = 0) -> dict[str, torch.Tensor]:
    return engine.llm.workers[worker].model_runner.model.received


def test_it_builds_the_llm_with_our_worker_extension_and_processed_logprobs(vllm_module):
    llm = make(vllm_module, dtype="bfloat16", tensor_parallel_size=2).llm
    assert llm.kwargs["worker_extension_cls"] == "dapo.rollout.vllm.WeightSyncExtension"
    assert llm.kwargs["logprobs_mode"] == "processed_logprobs"
    assert llm.kwargs["tensor_parallel_size"] == 2 and llm.kwargs["model"] == "/models/x"


def test_sampling_maps_to_contiguous_groups_with_one_seed_stream_per_sample(vllm_module):
    engine = make(vllm_module)
    out = engine.generate([[1, 5], [1]], SamplingParams(n=3, temperature=0.8, top_p=0.9, seed=100))
    requests, sampling = engine.llm.calls[-1]
    assert requests == [{"prompt_token_ids": [1, 5]}, {"prompt_token_ids": [1]}]
    assert [s.seed for s in sampling] == [100, 103]  # vLLM adds the sample index j
    assert dataclasses.asdict(sampling[0]) == {
        "n": 3,
        "max_tokens": 64,
        "logprobs": 0,
        "detokenize": False,
        "stop_token_ids": [EOS],
        "temperature": 0.8,
        "top_p": 0.9,
        "top_k": 0,  # vLLM's default: off
        "seed": 100,
    }
    assert [c.token_ids[0] for c in out] == [0, 1, 2, 10, 11, 12]
    assert out[0].logprobs == [-0.25, -0.5] and out[0].finish_reason == "eos"


def test_greedy_sends_n_copies_of_each_prompt_at_temperature_zero(vllm_module):
    engine = make(vllm_module)
    out = engine.generate([[1, 5], [1]], SamplingParams(n=2, top_k=1, max_new_tokens=2))
    requests, sampling = engine.llm.calls[-1]
    assert [r["prompt_token_ids"] for r in requests] == [[1, 5], [1, 5], [1], [1]]
    assert all(s.temperature == 0.0 and s.n == 1 and s.seed is None for s in sampling)
    assert [c.finish_reason for c in out] == ["length"] * 4


def test_update_weights_streams_a_state_dict_into_reload_weights_of_every_worker(vllm_module):
    engine = make(vllm_module, tensor_parallel_size=2)
    shared = torch.randn(4, 3)
    state = {
        "model.embed_tokens.weight": shared,
        "lm_head.weight": shared,
        "b": torch.ones(2, dtype=torch.bfloat16),
    }
    engine.update_weights(state)
    for worker in range(2):
        got = received(engine, worker)
        assert list(got) == ["model.embed_tokens.weight", "b"]  # a tied alias travels once
        assert torch.equal(got["model.embed_tokens.weight"], shared) and got["b"].dtype == torch.bfloat16
        assert engine.llm.workers[worker].reloads == [{"weights_path": None, "is_checkpoint_format": True}]
    assert engine.llm.prefix_resets == 1
    assert engine.last_sync.tensors == 2 and engine.last_sync.bytes == 4 * 3 * 4 + 2 * 2


def test_update_weights_streams_pairs_as_they_are_produced(vllm_module):
    engine = make(vllm_module)
    model = engine.llm.workers[0].model_runner.model
    behind: list[int] = []

    def gathered_layers():  # what an FSDP learner hands over: one freshly gathered tensor at a time
        for i in range(10):
            behind.append(i - len(model.order))
            yield f"model.layers.{i}.weight", torch.full((1 << 19,), float(i))  # 2 MB each

    engine.update_weights(gathered_layers())
    assert model.order == [f"model.layers.{i}.weight" for i in range(10)]
    assert max(behind) <= 2, behind  # never more than a tensor or two in flight
    assert received(engine)["model.layers.9.weight"][0].item() == 9.0


def test_a_failing_reload_is_raised_with_vllms_message(vllm_module):
    engine = make(vllm_module, names={"a"})
    with pytest.raises(RuntimeError, match="no parameter b"):
        engine.update_weights({"a": torch.ones(1), "b": torch.ones(300_000)})
    assert engine.llm.prefix_resets == 0
    engine.update_weights({"a": torch.zeros(1)})  # the engine still works after a failed sync
    assert received(engine)["a"].item() == 0.0


def test_an_rpc_that_fails_before_connecting_is_raised_not_waited_for(vllm_module):
    engine = make(vllm_module)

    def broken(*args):
        raise RuntimeError("worker extension not loaded")

    engine.llm.workers[0].dapo_reload_weights = broken
    with pytest.raises(RuntimeError, match="worker extension not loaded"):
        engine.update_weights({"a": torch.ones(1)})


def test_sleep_needs_sleep_mode_and_a_sync_wakes_the_weights_only(vllm_module):
    engine = make(vllm_module)
    engine.sleep()
    assert engine.llm.sleeps == []
    engine = make(vllm_module, enable_sleep_mode=True)
    engine.sleep()
    engine.update_weights({"a": torch.ones(1)})
    engine.generate([[1]], SamplingParams(max_new_tokens=4))
    engine.generate([[1]], SamplingParams(max_new_tokens=4))
    assert engine.llm.sleeps == [("sleep", 1), ("wake_up", ["weights"]), ("wake_up", None)]


@pytest.mark.parametrize("reason", ["abort", "error", "repetition"])
def test_a_request_that_did_not_stop_or_reach_its_length_is_an_error(vllm_module, reason):
    engine = make(vllm_module)
    engine.llm.finish_reason = reason
    with pytest.raises(RuntimeError, match=f"finish_reason='{reason}' after 2 tokens"):
        engine.generate([[1]], SamplingParams(max_new_tokens=4))


@pytest.mark.parametrize("version", ["0.12.0", "0.32.1", "0.34.0", "1.0.0"])
def test_a_vllm_release_the_lock_does_not_name_fails_with_its_version(monkeypatch, version):
    monkeypatch.setitem(sys.modules, "vllm", standin(version))
    monkeypatch.delitem(sys.modules, "dapo.rollout.vllm", raising=False)
    module = importlib.import_module("dapo.rollout.vllm")
    with pytest.raises(RuntimeError, match=rf"vLLM {version} is installed, .* supports vLLM 0\.33\.x only"):
        module.VLLMEngine(model_path="/m", eos_token_ids=[EOS], pad_token_id=0)


def test_the_supported_releases_are_the_one_the_gpu_lock_pins(vllm_module):
    pins = dict(
        line.split("==") for line in (ROOT / "requirements-gpu.lock").read_text().splitlines() if "==" in line
    )
    vllm_module.check_version(pins["vllm"])  # does not raise
    major, minor, _ = pins["vllm"].split(".")
    assert vllm_module.SUPPORTED_VLLM == (f"{major}.{minor}",)
