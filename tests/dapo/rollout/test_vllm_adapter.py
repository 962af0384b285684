"""The vllm engine's adapter logic, on CPU, against a stand-in `vllm` module that records the calls.

The real engine is checked by the conformance module where vLLM is installed; this pins what we send to
vLLM (sampling parameters, seeds, greedy expansion) and how we map what comes back, everywhere.
"""

from __future__ import annotations

import importlib
import sys
import types
from types import SimpleNamespace

import pytest
import torch

from dapo.rollout import SamplingParams

EOS = 2


class FakeLLM:
    """Answers request i, sample j with tokens [10 * i + j, EOS] (or 3 tokens hitting the cap)."""

    def __init__(self, **kwargs):
        self.kwargs, self.calls, self.loaded, self.prefix_resets, self.sleeps = kwargs, [], {}, 0, []

    def generate(self, requests, sampling, use_tqdm=True):
        self.calls.append((requests, sampling))
        outputs = []
        for i, sp in enumerate(sampling):
            samples = []
            for j in reversed(range(sp.n)):  # out of order on purpose: the engine sorts by index
                ids = [10 * i + j, EOS] if sp.max_tokens > 2 else [10 * i + j, 7]
                logprobs = [{t: SimpleNamespace(logprob=-0.25 * (k + 1))} for k, t in enumerate(ids)]
                reason = "stop" if ids[-1] == EOS else "length"
                samples.append(
                    SimpleNamespace(index=j, token_ids=ids, logprobs=logprobs, finish_reason=reason)
                )
            outputs.append(SimpleNamespace(outputs=samples))
        return outputs

    def collective_rpc(self, method, args=()):
        worker = self.worker_cls()
        getattr(worker, method)(*args)  # what vLLM does in each worker process
        self.loaded = worker.model_runner.model.received

    def reset_prefix_cache(self):
        self.prefix_resets += 1

    def sleep(self, level=1):
        self.sleeps.append(("sleep", level))

    def wake_up(self):
        self.sleeps.append(("wake_up", None))


@pytest.fixture
def vllm_module(monkeypatch):
    """dapo.rollout.vllm imported against the stand-in vllm (restored after the test)."""
    fake = types.ModuleType("vllm")
    fake.__version__ = "0.11.0"
    fake.LLM = FakeLLM
    fake.SamplingParams = lambda **kw: SimpleNamespace(**{"n": 1, **kw, "kwargs": kw})
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.delitem(sys.modules, "dapo.rollout.vllm", raising=False)
    return importlib.import_module("dapo.rollout.vllm")


def make(vllm_module, **options):
    engine = vllm_module.VLLMEngine(model_path="/models/x", eos_token_ids=[EOS], pad_token_id=0, **options)

    class Model:
        def __init__(self):
            self.received = {}

        def load_weights(self, weights):
            self.received.update({name: t.clone() for name, t in weights})

    class Worker(vllm_module.WeightSyncExtension):
        def __init__(self):
            self.model_runner = SimpleNamespace(model=Model())

    engine.llm.worker_cls = Worker
    return engine


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
    assert [s.kwargs["seed"] for s in sampling] == [100, 103]  # vLLM adds the sample index j
    assert sampling[0].kwargs | {"seed": 0} == {
        "n": 3,
        "max_tokens": 64,
        "logprobs": 0,
        "detokenize": False,
        "stop_token_ids": [EOS],
        "temperature": 0.8,
        "top_p": 0.9,
        "seed": 0,
    }
    assert [c.token_ids[0] for c in out] == [0, 1, 2, 10, 11, 12]
    assert out[0].logprobs == [-0.25, -0.5] and out[0].finish_reason == "eos"


def test_greedy_sends_n_copies_of_each_prompt_at_temperature_zero(vllm_module):
    engine = make(vllm_module)
    out = engine.generate([[1, 5], [1]], SamplingParams(n=2, top_k=1, max_new_tokens=2))
    requests, sampling = engine.llm.calls[-1]
    assert [r["prompt_token_ids"] for r in requests] == [[1, 5], [1, 5], [1], [1]]
    assert all(
        s.kwargs["temperature"] == 0.0 and s.kwargs["n"] == 1 and "seed" not in s.kwargs for s in sampling
    )
    assert [c.finish_reason for c in out] == ["length"] * 4


def test_update_weights_reaches_the_worker_model_and_resets_the_prefix_cache(vllm_module, tmp_path):
    engine = make(vllm_module, weight_sync_dir=str(tmp_path))
    shared = torch.randn(4, 3)
    engine.update_weights({"model.embed_tokens.weight": shared, "lm_head.weight": shared, "b": torch.ones(2)})
    assert set(engine.llm.loaded) == {"model.embed_tokens.weight", "b"}  # a tied alias travels once
    torch.testing.assert_close(engine.llm.loaded["model.embed_tokens.weight"], shared)
    assert engine.llm.prefix_resets == 1 and list(tmp_path.iterdir()) == []  # the file is removed


def test_sleep_needs_sleep_mode_and_generate_wakes_up(vllm_module):
    engine = make(vllm_module)
    engine.sleep()
    assert engine.llm.sleeps == []
    engine = make(vllm_module, enable_sleep_mode=True)
    engine.sleep()
    engine.generate([[1]], SamplingParams(max_new_tokens=4))
    assert engine.llm.sleeps == [("sleep", 1), ("wake_up", None)]


def test_an_aborted_request_is_an_error(vllm_module):
    with pytest.raises(RuntimeError, match="abort"):
        vllm_module.VLLMEngine._completion(SimpleNamespace(finish_reason="abort", token_ids=[], logprobs=[]))
