"""A reward plugin for the tests: loaded from this folder through DAPO_REWARD_PLUGINS, never installed."""

LOADED = True


class LengthParity:
    """Correct iff the response has an even number of characters: a learning signal for a random model."""

    def __call__(self, response: str, ground_truth: str) -> float:
        return 1.0 if len(response) % 2 == 0 else -1.0


def helper_not_a_reward():
    return None
