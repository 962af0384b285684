"""The parts of bench/peer_verl_gpu.py that take seconds, so the GPU side-by-side cannot rot between the rare
sessions that are lent a GPU: the two data files agree, verl's reward file scores as our trainer does, the
overrides use only keys of verl 0.9.1's config and set the numbers our config sets, verl's side runs
``main_ppo`` with them and reads its file logger (a stand-in for verl's Python), and the figures and
table are computed as the README says.

The overrides are checked here against VERL_0_9_1_KEYS, a copy of the keys the dry run
(``bench/peer_verl_gpu.py --cpu``) found by composing verl 0.9.1's own hydra config from its wheel: the
wheel and hydra need the network, which the suite does not have.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Keys of verl 0.9.1's ppo_trainer config (verl/trainer/config/ppo_trainer.yaml and its defaults) that the
# bench sets, each found there by the dry run's composition on 2026-12-06.
VERL_0_9_1_KEYS = frozenset(
    """
    algorithm.adv_estimator algorithm.use_kl_in_reward algorithm.kl_ctrl.kl_coef
    algorithm.filter_groups.enable algorithm.filter_groups.metric algorithm.filter_groups.max_num_gen_batches
    data.train_files data.val_files data.prompt_key data.max_prompt_length data.max_response_length
    data.train_batch_size data.truncation data.seed
    actor_rollout_ref.model.path actor_rollout_ref.model.use_remove_padding
    actor_rollout_ref.model.enable_gradient_checkpointing actor_rollout_ref.model.override_config
    actor_rollout_ref.actor.strategy actor_rollout_ref.actor.optim.lr
    actor_rollout_ref.actor.optim.lr_warmup_steps
    actor_rollout_ref.actor.optim.weight_decay actor_rollout_ref.actor.ppo_mini_batch_size
    actor_rollout_ref.actor.ppo_epochs actor_rollout_ref.actor.use_dynamic_bsz
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu actor_rollout_ref.actor.clip_ratio_low
    actor_rollout_ref.actor.clip_ratio_high actor_rollout_ref.actor.clip_ratio_c
    actor_rollout_ref.actor.loss_agg_mode actor_rollout_ref.actor.use_kl_loss
    actor_rollout_ref.actor.kl_loss_coef
    actor_rollout_ref.actor.entropy_coeff actor_rollout_ref.actor.grad_clip
    actor_rollout_ref.actor.fsdp_config.param_offload actor_rollout_ref.actor.fsdp_config.optimizer_offload
    actor_rollout_ref.rollout.name actor_rollout_ref.rollout.mode actor_rollout_ref.rollout.n
    actor_rollout_ref.rollout.temperature actor_rollout_ref.rollout.top_p actor_rollout_ref.rollout.top_k
    actor_rollout_ref.rollout.tensor_model_parallel_size actor_rollout_ref.rollout.gpu_memory_utilization
    actor_rollout_ref.rollout.enforce_eager actor_rollout_ref.rollout.log_prob_use_dynamic_bsz
    actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu
    reward reward.reward_manager.name reward.custom_reward_function.path reward.custom_reward_function.name
    trainer.logger trainer.project_name trainer.experiment_name trainer.nnodes trainer.n_gpus_per_node
    trainer.total_training_steps trainer.total_epochs trainer.val_before_train trainer.test_freq
    trainer.save_freq trainer.resume_mode trainer.default_local_dir
    """.split()
)


@pytest.fixture(scope="module")
def peer() -> Iterator[ModuleType]:
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(ROOT / "bench"))
        import peer_verl_gpu

        yield peer_verl_gpu


def test_verls_data_file_and_ours_hold_the_same_problems(peer: ModuleType, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    bench = peer.dry_run(tmp_path)
    verl_file, ours_file = peer.build_data(bench)
    assert peer.data_mismatches(verl_file, ours_file) == []
    row = pq.read_table(verl_file).to_pylist()[0]  # what verl 0.9.1's RLHFDataset and reward manager read
    assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert row["prompt"] == [{"role": "user", "content": row["prompt"][0]["content"]}]
    assert row["reward_model"]["ground_truth"].lstrip("-").isdigit() and row["extra_info"]["index"] == 0


def test_verls_reward_file_scores_every_case_as_our_trainer(peer: ModuleType, tmp_path: Path) -> None:
    from dapo.data.problems import load_problems

    _, ours_file = peer.build_data(peer.dry_run(tmp_path))
    problems = load_problems(ours_file, limit=20)
    assert peer.reward_mismatches(problems) == []
    # called as verl's dapo reward manager calls it (keywords only), right and wrong both occur
    scores = {
        peer.compute_score(data_source="math_dapo", solution_str=r, ground_truth=t, extra_info={})["score"]
        for r, t in peer.reward_cases(problems)
    }
    assert scores == {1.0, -1.0}
    assert peer.compute_score("math_dapo", "2+2=4\nAnswer: 4", "4") == {
        "score": 1.0,
        "acc": True,
        "pred": "4",
    }


def test_verl_can_load_the_reward_file_as_it_loads_one(peer: ModuleType) -> None:
    """As verl 0.9.1's load_module does: from the file's path, under a made-up name, not in sys.modules."""
    import importlib.util

    path = ROOT / "bench" / "peer_verl_gpu.py"
    spec = importlib.util.spec_from_file_location(f"custom_module_{hash(str(path))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.compute_score("math_dapo", "Answer: 3", "3")["score"] == 1.0


def test_the_overrides_use_keys_of_verl_0_9_1_and_add_only_what_it_lacks(peer: ModuleType) -> None:
    settings = peer.verl_settings(peer.Bench(gpu=True, out=Path("/o")), Path("/m"), Path("/d"))
    declared = [k for k in settings if not k.startswith("+")]
    added = [k.lstrip("+") for k in settings if k.startswith("+")]
    assert not set(declared) - VERL_0_9_1_KEYS
    assert not set(added) & VERL_0_9_1_KEYS  # hydra refuses "+" on a key that exists
    # each under a section verl has: the model's override_config, the reward section (reward_kwargs)
    assert all(
        any(".".join(k.split(".")[:i]) in VERL_0_9_1_KEYS for i in range(1, k.count(".") + 1)) for k in added
    )


def test_the_overrides_are_verls_dapo_recipe(peer: ModuleType) -> None:
    s = peer.verl_settings(peer.Bench(gpu=True, out=Path("/o")), Path("/m"), Path("/d"))
    actor = "actor_rollout_ref.actor"
    assert (s["algorithm.adv_estimator"], s["algorithm.filter_groups.enable"]) == ("grpo", True)
    assert s["algorithm.filter_groups.metric"] == "acc" and s["reward.reward_manager.name"] == "dapo"
    assert (s[f"{actor}.clip_ratio_low"], s[f"{actor}.clip_ratio_high"]) == (0.2, 0.28)
    assert s[f"{actor}.loss_agg_mode"] == "token-mean" and s[f"{actor}.use_kl_loss"] is False
    assert s["+reward.reward_kwargs.overlong_buffer_cfg.enable"] is True
    assert s["actor_rollout_ref.rollout.name"] == "vllm" and s[f"{actor}.strategy"] == "fsdp"
    assert s["reward.custom_reward_function.path"] == str(ROOT / "bench" / "peer_verl_gpu.py")


@pytest.mark.parametrize("gpu", [True, False])
def test_both_sides_get_the_same_numbers(peer: ModuleType, gpu: bool, tmp_path: Path) -> None:
    """Every shared setting, read from verl's overrides and from our validated config."""
    bench = peer.Bench(gpu=True, out=tmp_path) if gpu else peer.dry_run(tmp_path)
    s = peer.verl_settings(bench, tmp_path / "model", tmp_path / "verl.parquet")
    c = peer.our_config(bench, tmp_path / "model", tmp_path / "ours.parquet")
    actor, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    pairs = [
        (s["data.train_batch_size"], c.data.train_batch_size),
        (s["data.max_prompt_length"], c.data.max_prompt_length),
        (s["data.max_response_length"], c.rollout.max_response_length),
        (s[f"{rollout}.n"], c.rollout.n),
        (s[f"{rollout}.temperature"], c.rollout.temperature),
        (s[f"{rollout}.top_p"], c.rollout.top_p),
        (s[f"{rollout}.top_k"], c.rollout.top_k),
        (s[f"{rollout}.gpu_memory_utilization"], c.rollout.gpu_memory_utilization),
        (s[f"{rollout}.enforce_eager"], c.rollout.enforce_eager),
        (s[f"{actor}.optim.lr"], c.optim.lr),
        (s[f"{actor}.optim.lr_warmup_steps"], c.optim.warmup_steps),
        (s[f"{actor}.optim.weight_decay"], c.optim.weight_decay),
        (s[f"{actor}.grad_clip"], c.optim.grad_clip),
        (s[f"{actor}.ppo_mini_batch_size"], c.optim.mini_batch_size),
        (s[f"{actor}.ppo_max_token_len_per_gpu"], c.optim.micro_batch_max_tokens),
        (s[f"{actor}.clip_ratio_low"], c.algorithm.clip_low),
        (s[f"{actor}.clip_ratio_high"], c.algorithm.clip_high),
        (s[f"{actor}.clip_ratio_c"], c.algorithm.clip_c),
        (s[f"{actor}.loss_agg_mode"], c.algorithm.loss_agg_mode),
        (s["actor_rollout_ref.model.enable_gradient_checkpointing"], c.model.gradient_checkpointing),
        (s["+reward.reward_kwargs.overlong_buffer_cfg.len"], c.algorithm.overlong_buffer_len),
        (s["+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor"], c.algorithm.overlong_penalty_factor),
        (s["trainer.total_training_steps"], c.optim.total_steps),
        (s["data.seed"], c.seed),
    ]
    assert [verl for verl, _ in pairs] == [ours for _, ours in pairs]
    assert c.algorithm.dynamic_sampling and c.algorithm.overlong_buffer and not c.algorithm.overlong_filtering
    assert c.rollout.engine == ("vllm" if gpu else "hf") and c.execution.learner_strategy == "fsdp"


def test_hydra_values_are_quoted_and_typed(peer: ModuleType) -> None:
    assert peer.verl_overrides({"a.b": True, "c": "it's /x", "d": ["console", "file"], "e": 1e-06}) == [
        "a.b=true",
        "c='it\\'s /x'",
        "d=['console','file']",
        "e=1e-06",
    ]


def test_figures_count_generated_samples_and_time_from_process_start(peer: ModuleType) -> None:
    bench = peer.Bench(gpu=True, out=Path("/o"), prompts=2, n=4)
    metrics = {
        "timing_s/step": 2.0,
        "timing_s/gen": 1.0,
        "timing_s/update_actor": 0.5,
        "perf/total_num_tokens": 100.0,
        "response_length/mean": 10.0,
        "training/filter_groups/evicted_samples": 4.0,
    }
    first, second = peer.verl_step(metrics, 30.0, bench), peer.verl_step(metrics, 32.0, bench)
    # the 4 evicted are prompt groups of n = 4 samples (verl's uids), beside the 2 x 4 trained
    assert first["gen_tok_s"] == (8 + 4 * 4) * 10.0 and first["update_tok_s"] == 200.0
    figures = peer.summary({"steps": [first, second]})
    assert figures["first_step_s"] == 30.0 and figures["trained_per_s"] == 16 / 32.0
    slower = dict(figures, step_p50_s=4.0, trained_per_s=0.25)
    table = peer.table({"verl": slower, "ours": figures})
    assert "| step time p50 (s) | 4.00 | 2.00 | 2.00x |" in table
    assert "| trained samples/s from process start | 0.2 | 0.5 | 2.00x |" in table
    assert "failed" in peer.table({"verl": None, "ours": figures})


FAKE_VERL = """#!{python}
# Stands in for verl's python: writes two steps to its file logger the way verl's FileLogger does, or fails.
import json, os, sys
open(os.path.join(os.environ["VERL_FILE_LOGGER_PATH"] + ".argv"), "w").write(json.dumps(sys.argv[1:]))
if "{fail}":
    sys.exit("ValueError: {fail}")
metrics = {{"timing_s/step": 2.0, "timing_s/gen": 1.0, "timing_s/update_actor": 0.5,
            "perf/total_num_tokens": 100.0, "response_length/mean": 10.0}}
with open(os.environ["VERL_FILE_LOGGER_PATH"], "w") as log:
    for step in (1, 2):
        log.write(json.dumps({{"step": step, "data": metrics}}) + "\\n")
"""


@pytest.mark.parametrize("fail", ["", "boom"])
def test_verls_side_runs_main_ppo_and_reads_its_file_logger(
    peer: ModuleType, tmp_path: Path, fail: str
) -> None:
    import json
    import sys

    fake = tmp_path / "python"
    fake.write_text(FAKE_VERL.format(python=sys.executable, fail=fail))
    fake.chmod(0o755)
    bench = peer.Bench(gpu=True, out=tmp_path, steps=2)
    side = peer.run_verl(bench, str(fake), tmp_path / "model", tmp_path / "verl.parquet", limit_s=60)
    argv = json.loads((tmp_path / "verl" / "metrics.jsonl.argv").read_text())
    assert argv[:2] == ["-m", "verl.trainer.main_ppo"] and "algorithm.filter_groups.enable=true" in argv
    assert "reward.reward_manager.name='dapo'" in argv
    if fail:
        assert side["steps"] == [] and "exit status 1: ValueError: boom" in side["error"]
    else:
        assert side["error"] is None and [s["trained"] for s in side["steps"]] == [256, 256]
        assert 0 < side["steps"][0]["at"] <= side["steps"][1]["at"] < 60


def test_a_missing_verl_python_fails_its_side_in_one_line(peer: ModuleType, tmp_path: Path) -> None:
    bench = peer.Bench(gpu=True, out=tmp_path)
    side = peer.run_verl(bench, str(tmp_path / "nowhere"), tmp_path / "m", tmp_path / "d", limit_s=5)
    assert side["steps"] == [] and side["error"].startswith(f"no verl Python at {tmp_path / 'nowhere'}: ")
    assert "--verl-python" in side["error"]
