"""The vllm engine's adapter logic, on CPU, against a stand-in for vLLM 0.33's API that records the calls
(`vllm_standin`).

The real engine is checked by the conformance module where vLLM is installed (bench/gpu_check.sh); this
pins what we send to vLLM (sampling parameters, seeds, greedy expansion, the weight stream into
`reload_weights`, sleep tags) and how we map what comes back, everywhere. test_vllm_logprobs.py pins the
log-probs against a stand-in of vLLM's sampler.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from dapo.rollout import SamplingParams
from tests.dapo.rollout.vllm_standin import EOS, install, make, received

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def vllm_module(monkeypatch):
    """dapo.rollout.vllm imported against the stand-in vllm (restored after the test)."""
    return install(monkeypatch)


def test_it_builds_the_llm_with_our_worker_extension_and_raw_logprobs(vllm_module):
    llm = make(vllm_module, dtype="bfloat16", tensor_parallel_size=2).llm
    assert llm.kwargs["worker_extension_cls"] == "dapo.rollout.vllm.WeightSyncExtension"
    assert llm.kwargs["logprobs_mode"] == "raw_logprobs"
    assert llm.kwargs["tensor_parallel_size"] == 2 and llm.kwargs["model"] == "/models/x"
    with pytest.raises(ValueError, match="needs 'raw_logprobs'"):
        make(vllm_module, logprobs_mode="processed_logprobs")


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
        "temperature": 1.0,  # 0.8 is folded into the logits (test_vllm_logprobs.py)
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
    module = install(monkeypatch, version)
    with pytest.raises(RuntimeError, match=rf"vLLM {version} is installed, .* supports vLLM 0\.33\.x only"):
        module.VLLMEngine(model_path="/m", eos_token_ids=[EOS], pad_token_id=0)


def test_the_supported_releases_are_the_one_the_gpu_lock_pins(vllm_module):
    pins = dict(
        line.split("==") for line in (ROOT / "requirements-gpu.lock").read_text().splitlines() if "==" in line
    )
    vllm_module.check_version(pins["vllm"])  # does not raise
    major, minor, _ = pins["vllm"].split(".")
    assert vllm_module.SUPPORTED_VLLM == (f"{major}.{minor}",)
