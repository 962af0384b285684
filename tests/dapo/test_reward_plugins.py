"""Reward plugins: only allowlisted callables, checked without importing; the example plugin; a real
tiny training run whose reward is a plugin."""

import math
import sys
from pathlib import Path

import pytest

from dapo.loop.report import Sink
from dapo.loop.runner import run
from dapo.rewards import RewardError, build_reward, describe_rewards, get_reward_fn, plugins
from dapo.runconfig import ConfigError, DataConfig

HERE = Path(__file__).parent
PLUGINS = HERE / "reward_plugins"
EXAMPLES = HERE.parents[1] / "examples" / "reward_plugins"
PARITY = "parity_plugin:LengthParity"


@pytest.fixture
def plugin_folders(monkeypatch):
    monkeypatch.setenv(plugins.FOLDERS_ENV, f"{PLUGINS}:{EXAMPLES}")
    yield
    for name in ("parity_plugin", "example_rewards", "example_rewards.numeric"):
        sys.modules.pop(name, None)


def config_error(**kw) -> dict:
    with pytest.raises(ConfigError) as e:
        DataConfig(**kw)
    return e.value.errors


def test_a_folder_plugin_is_validated_without_being_imported(plugin_folders):
    sys.modules.pop("parity_plugin", None)
    DataConfig(reward_fn=PARITY)
    assert "parity_plugin" not in sys.modules  # the check parsed the file, ran none of it
    reward = get_reward_fn(PARITY)
    assert sys.modules["parity_plugin"].LOADED
    assert [reward("ab", "x"), reward("abc", "x")] == [1.0, -1.0]


def test_names_outside_the_allowlist_are_field_errors_and_never_imported(plugin_folders, monkeypatch):
    assert "allowed now" in config_error(reward_fn="os:system")["reward_fn"]
    assert "is not a reward that" in config_error(reward_fn="parity_plugin:Missing")["reward_fn"]
    assert "package.module:callable" in config_error(reward_fn="a b:c")["reward_fn"]
    monkeypatch.delenv(plugins.FOLDERS_ENV)
    errors = config_error(reward_fn=PARITY)
    assert "not an allowed reward plugin" in errors["reward_fn"]
    assert "allowed now: none" in errors["reward_fn"]
    with pytest.raises(RewardError, match="not an allowed"):
        plugins.load_plugin(PARITY)


NOT_LISTED = [
    "example_rewards.numeric:re",  # a module the plugin imports
    "example_rewards.numeric:math",
    "example_rewards.numeric:last_number",  # a helper its __all__ leaves out
    "example_rewards.numeric:NUMBER",  # a constant
    "parity_plugin:LOADED",
    "parity_plugin:_private",
]


@pytest.mark.parametrize("name", NOT_LISTED)
def test_only_the_callables_a_plugin_module_lists_are_allowed(plugin_folders, name):
    message = config_error(reward_fn=name)["reward_fn"]
    assert f"{name} is not a reward that" in message
    assert "example_rewards.numeric:CloseNumber" in message and PARITY in message  # what is allowed
    assert name not in plugins.available()
    with pytest.raises(RewardError, match="is not a reward that"):
        plugins.load_plugin(name)


def test_an_imported_callable_is_not_a_reward_of_the_importing_module(tmp_path, monkeypatch):
    (tmp_path / "sneaky.py").write_text(
        "from subprocess import run\nfrom os import system as check\n\n"
        "class Fair:\n    def __call__(self, response, truth):\n        return 1.0\n"
    )
    monkeypatch.setenv(plugins.FOLDERS_ENV, str(tmp_path))
    assert plugins.available() == ["sneaky:Fair"]
    DataConfig(reward_fn="sneaky:Fair")
    for name in ("sneaky:run", "sneaky:check"):
        assert "allowed: sneaky:Fair" in config_error(reward_fn=name)["reward_fn"]


def test_a_listed_name_rebound_at_import_to_something_else_is_refused(tmp_path, monkeypatch):
    (tmp_path / "rebound.py").write_text(
        "class Fair:\n    def __call__(self, r, t):\n        return 1.0\n\n"
        "if True:  # hidden from the listing, which reads top-level definitions only\n"
        "    from os import getcwd as Fair\n"
    )
    monkeypatch.setenv(plugins.FOLDERS_ENV, str(tmp_path))
    monkeypatch.delitem(sys.modules, "rebound", raising=False)
    DataConfig(reward_fn="rebound:Fair")
    with pytest.raises(RewardError, match="Fair is not defined in rebound"):
        plugins.load_plugin("rebound:Fair")
    sys.modules.pop("rebound", None)


def test_a_module_in_two_plugin_folders_is_the_first_folders(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    for folder, cls in ((first, "Early"), (second, "Late")):
        folder.mkdir()
        (folder / "twin.py").write_text(f"class {cls}:\n    def __call__(self, r, t):\n        return 1.0\n")
    monkeypatch.setenv(plugins.FOLDERS_ENV, f"{first}:{second}")
    assert plugins.available() == ["twin:Early"]  # as Python would import it: the first folder's
    assert "twin:Late is not a reward that" in config_error(reward_fn="twin:Late")["reward_fn"]


def test_a_plugin_module_shadowed_by_an_imported_one_is_refused(plugin_folders):
    assert plugins.check("json:loads") is None  # the folder's json.py defines loads ...
    with pytest.raises(RewardError, match="shadowed"):
        plugins.load_plugin("json:loads")  # ... but "json" is the standard library's, already imported


def test_entry_points_of_the_group_are_allowed(tmp_path, monkeypatch):
    dist = tmp_path / "acme_rewards-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-rewards\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[dapo.rewards]\nclose = example_rewards.numeric:CloseNumber\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.delenv(plugins.FOLDERS_ENV, raising=False)
    assert plugins.entry_points() == {"close": "example_rewards.numeric:CloseNumber"}
    DataConfig(reward_fn="close")
    DataConfig(reward_fn="example_rewards.numeric:CloseNumber")
    assert plugins.describe("close") == "plugin example_rewards.numeric:CloseNumber from acme-rewards"
    assert get_reward_fn("close")("about 3.1416", "3.14159")["acc"] is True


def test_the_form_lists_builtins_and_allowed_plugins_with_their_docstrings(plugin_folders):
    listed = {r["name"]: r["help"] for r in describe_rewards()}
    assert listed["multiple_choice"].startswith("multiple_choice: +1 if the option letter")
    assert listed[PARITY].startswith("Correct iff the response has an even number")
    assert listed["example_rewards.numeric:CloseNumber"].startswith("+1 if the last number")
    assert "parity_plugin:helper_not_a_reward" in listed  # a public function: the module has no __all__
    assert "json:loads" in listed


CLOSE = [
    ("The answer is 3.1416", "3.14159", True),  # within 0.1%
    ("The answer is 3.2", "3.14159", False),
    ("1,250.5 apples", "1250.5", True),
    ("x = -7", "-7", True),
    ("first 7 then 8", "7", False),  # the last number counts
    ("no number", "7", False),
    ("7", "seven", False),  # a ground truth without a number cannot be judged
]


@pytest.mark.parametrize(("response", "truth", "correct"), CLOSE)
def test_the_example_plugin_truth_table(plugin_folders, response, truth, correct):
    result = get_reward_fn("example_rewards.numeric:CloseNumber")(response, truth)
    assert (result["acc"], result["score"]) == (correct, 1.0 if correct else -1.0)


def test_a_plugin_that_returns_nonsense_fails_the_scoring_loudly(plugin_folders):
    reward = build_reward(DataConfig(reward_fn=PARITY))
    reward.rewards[0] = lambda response, truth: "yes"
    with pytest.raises(RewardError, match="parity_plugin:LengthParity.*got str"):
        reward.score_batch(["p"], ["r"], ["t"])


class Recorder(Sink):
    def __init__(self):
        self.reports = []

    def on_step(self, report):
        self.reports.append(report)


def test_a_tiny_training_run_with_a_plugin_reward(tiny_config, plugin_folders, tmp_path):
    config = tiny_config.with_overrides({"data.reward_fn": PARITY, "optim.total_steps": 1})
    rec = Recorder()
    result = run(config, out_dir=tmp_path, sinks=[rec])
    assert result.status == "succeeded", result.error
    samples, m = rec.reports[0].samples, rec.reports[0].metrics
    assert samples and all(s.acc == (len(s.response) % 2 == 0) for s in samples)
    assert all(s.reward_scores == {PARITY: s.score} for s in samples)
    assert m[f"reward/{PARITY}/mean"] == pytest.approx(sum(s.score for s in samples) / len(samples))
    assert m["train/num_prompts_kept"] >= 1 and math.isfinite(m["actor/pg_loss"]) and m["actor/grad_norm"] > 0
