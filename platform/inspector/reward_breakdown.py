"""A sample's reward in parts: each reward ``data.reward_fn`` names (its own score, its weight and the
weighted part), their sum (the correctness score), the soft overlong penalty, and the total the advantage
came from; and the parts the inspector's filter offers for a run.
"""

from __future__ import annotations

from typing import Any

from runs.models import Run, Sample

from dapo.rewards import parse_names, parse_weights

PART_LABELS = {
    "score": "score (correctness, weighted sum)",
    "overlong_penalty": "overlong penalty",
    "reward": "reward (total)",
}


def _config_value(run: Run, section: str, name: str, default: Any) -> Any:
    block = run.config.get(section) if isinstance(run.config, dict) else None
    return block.get(name, default) if isinstance(block, dict) else default


def reward_names(run: Run) -> list[str]:
    """The rewards of the run's config, in its order."""
    return [n for n in parse_names(str(_config_value(run, "data", "reward_fn", "math_dapo"))) if n]


def reward_weights(run: Run, names: list[str]) -> list[float]:
    """The weight of each of ``names`` (data.reward_weights; 1 each when absent or unreadable)."""
    try:
        return parse_weights(str(_config_value(run, "data", "reward_weights", "")), len(names))
    except ValueError:
        return [1.0] * len(names)


def weights_by_name(run: Run) -> dict[str, float]:
    names = reward_names(run)
    return dict(zip(names, reward_weights(run, names), strict=True))


def breakdown(run: Run, sample: Sample) -> dict[str, Any]:
    """The sample's reward in parts. ``rewards``: one row per reward with its own score, weight and
    weighted part (from Sample.reward_scores; a sample of a one-reward run without them gets its score as
    the one part); ``penalty`` the overlong penalty with how it was computed; ``total`` the reward."""
    scores = sample.reward_scores or {}
    named = reward_names(run)
    names = [n for n in named if n in scores] + [n for n in scores if n not in named]
    if not names and named:  # rows recorded before each reward's score was stored
        names, scores = named[:1], {named[0]: sample.score}
    weight = weights_by_name(run)
    rows = [
        {
            "name": n,
            "score": float(scores[n]),
            "weight": weight.get(n, 1.0),
            "part": weight.get(n, 1.0) * float(scores[n]),
        }
        for n in names
    ]
    a = _section(run, "algorithm")
    penalty: dict[str, Any] = {
        "value": sample.overlong_penalty,
        "length": sample.length,
        "max_len": _section(run, "rollout").get("max_response_length"),
        "on": bool(a.get("overlong_buffer", False)),
        "buffer": a.get("overlong_buffer_len"),
        "factor": a.get("overlong_penalty_factor"),
    }
    if sample.split == "val":
        penalty["on"] = False  # validation is scored without it
    return {"rewards": rows, "score": sample.score, "penalty": penalty, "total": sample.reward}


def _section(run: Run, name: str) -> dict[str, Any]:
    block = run.config.get(name) if isinstance(run.config, dict) else None
    return block if isinstance(block, dict) else {}


def part_choices(run: Run) -> list[dict[str, str]]:
    """The parts the inspector's reward-part filter offers for this run: the stored columns, then each
    reward's own score (``reward/<name>``)."""
    out = [{"value": key, "label": label} for key, label in PART_LABELS.items()]
    out += [{"value": f"reward/{n}", "label": f"reward/{n} (its own score)"} for n in reward_names(run)]
    return out
