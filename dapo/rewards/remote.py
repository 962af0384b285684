"""http: rewards computed by a service the user already runs (OpenRLHF's remote reward model).

The service's URL must be one the administrator listed in ``DAPO_REWARD_URLS`` (URLs separated by
whitespace or commas); the check runs when the config is validated and again before each request.
Protocol, one POST per batch of ``data.reward_batch_size`` samples, JSON both ways::

    request:  {"prompts": [str, ...], "responses": [str, ...], "ground_truths": [str, ...]}
    response: {"rewards": [number or {"score": number, "acc": bool, "pred": str}, ...]}  (same length)

A request that fails (no connection, timeout, a status other than 200, a malformed body) is retried
``data.reward_retries`` times with a growing pause; then the run fails with an error naming the URL.
Redirects are not followed: the service answers at the URL that was allowed.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from typing import Any

from dapo.rewards.base import RewardError, RewardResult, as_result

URLS_ENV = "DAPO_REWARD_URLS"
"""Environment variable: the reward service URLs runs may use (separated by whitespace or commas)."""
MAX_RESPONSE_BYTES = 64 * 2**20
BACKOFF_S = 0.5
"""Pause before the first retry; doubled before each next one (at most 8 s)."""


def allowed_urls() -> list[str]:
    return [u for u in re.split(r"[\s,]+", os.environ.get(URLS_ENV, "")) if u]


def check_url(url: str) -> str | None:
    """Why ``url`` may not be used as a reward service, or None when it is allowed."""
    if not url:
        return f"reward 'http' needs data.reward_url, one of {URLS_ENV}: {_listed()}"
    if url not in allowed_urls():
        return f"{url!r:.100} is not an allowed reward service; allowed ({URLS_ENV}): {_listed()}"
    return None


def _listed() -> str:
    return ", ".join(allowed_urls()) or "none (an administrator sets them)"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001
        raise urllib.error.HTTPError(req.full_url, code, f"redirect to {newurl} refused", headers, fp)


class HttpReward:
    """http: asks the reward service at data.reward_url (an administrator allows it in DAPO_REWARD_URLS)
    to score batches of (prompt, response, ground truth); it answers a number or {score, acc, pred} per
    sample. Reads the ground truth and the prompt."""

    def __init__(self, url: str, *, timeout_s: float = 30.0, retries: int = 2, batch_size: int = 64):
        self.url, self.timeout_s, self.retries, self.batch_size = url, timeout_s, retries, batch_size

    @classmethod
    def from_config(cls, data: Any) -> HttpReward:
        return cls(
            data.reward_url,
            timeout_s=data.reward_timeout_s,
            retries=data.reward_retries,
            batch_size=data.reward_batch_size,
        )

    judges = None
    """Only the service knows which ground truths it judges; the web process does not call it."""

    def __call__(self, response: str, ground_truth: str) -> RewardResult:
        return self.score_batch([""], [response], [ground_truth])[0]

    def score_batch(
        self, prompts: list[str], responses: list[str], ground_truths: list[str]
    ) -> list[RewardResult]:
        problem = check_url(self.url)
        if problem is not None:
            raise RewardError(f"reward service: {problem}")
        out: list[RewardResult] = []
        for i in range(0, len(responses), self.batch_size):
            part = slice(i, i + self.batch_size)
            out += self._post(prompts[part], responses[part], ground_truths[part])
        return out

    def _post(self, prompts: list[str], responses: list[str], truths: list[str]) -> list[RewardResult]:
        body = json.dumps({"prompts": prompts, "responses": responses, "ground_truths": truths}).encode()
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(BACKOFF_S * 2 ** (attempt - 1), 8.0))
            try:
                rewards = self._request(body)
            except (OSError, ValueError) as e:  # URLError, HTTPError and timeouts are OSErrors
                last = f"{type(e).__name__}: {str(e)[:200]}"
                continue
            if len(rewards) != len(responses):
                last = f"{len(rewards)} rewards for {len(responses)} samples"
                continue
            return [as_result(r, f"reward service {self.url}") for r in rewards]
        raise RewardError(
            f"reward service {self.url} failed {self.retries + 1} time(s) "
            f"(timeout {self.timeout_s:g} s); last error: {last}"
        )

    def _request(self, body: bytes) -> list[Any]:
        request = urllib.request.Request(
            self.url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        opener = urllib.request.build_opener(_NoRedirect)
        with opener.open(request, timeout=self.timeout_s) as reply:
            if reply.status != 200:
                raise ValueError(f"status {reply.status}")
            data = json.loads(reply.read(MAX_RESPONSE_BYTES + 1)[:MAX_RESPONSE_BYTES])
        if not isinstance(data, dict) or not isinstance(data.get("rewards"), list):
            raise ValueError('the reply is not a JSON object with a "rewards" list')
        return data["rewards"]
