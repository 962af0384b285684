"""The http reward against a real reward service on 127.0.0.1: batches, retries, failures that name the
URL, the allowlist; and a real tiny training run that combines the service with a plugin."""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dapo.loop.report import Sink
from dapo.loop.runner import run
from dapo.rewards import RewardError, RewardResult, build_reward, plugins, remote
from dapo.runconfig import ConfigError, DataConfig

PLUGINS = Path(__file__).parent / "reward_plugins"


def parity(response: str) -> dict:
    return {"score": 1.0 if len(response) % 2 == 0 else -1.0, "pred": str(len(response))}


class Service:
    """A reward service in a thread: parity of the response length; ``failures`` answers 503 first."""

    def __init__(self, failures: int = 0, reply=None):
        self.batches: list[dict] = []
        self.failures, self.reply = failures, reply
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                service.batches.append(body)
                if service.failures > 0:
                    service.failures -= 1
                    return self._send(503, {"error": "warming up"})
                if self.path == "/moved":
                    self.send_response(307)
                    self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                    self.end_headers()
                    return None
                rewards = service.reply(body) if service.reply else [parity(r) for r in body["responses"]]
                return self._send(200, {"rewards": rewards})

            def _send(self, status, data):
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/score"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service(monkeypatch):
    svc = Service()
    monkeypatch.setenv(remote.URLS_ENV, f"{svc.url} {svc.url.replace('/score', '/moved')}")
    monkeypatch.setattr(remote, "BACKOFF_S", 0.01)
    yield svc
    svc.close()


def config(url: str, **kw) -> DataConfig:
    return DataConfig(reward_fn="http", reward_url=url, **kw)


def test_it_posts_batches_and_keeps_the_order(service):
    reward = build_reward(config(service.url, reward_batch_size=2))
    responses = ["a", "bb", "ccc", "dddd", "eeeee"]
    results = reward.score_batch([f"p{i}" for i in range(5)], responses, ["t"] * 5)
    assert [r.score for r in results] == [-1.0, 1.0, -1.0, 1.0, -1.0]
    assert [r.acc for r in results] == [False, True, False, True, False]
    assert [r.pred for r in results] == ["1", "2", "3", "4", "5"]
    assert [len(b["responses"]) for b in service.batches] == [2, 2, 1]
    first = {"prompts": ["p0", "p1"], "responses": ["a", "bb"], "ground_truths": ["t", "t"]}
    assert service.batches[0] == first


def test_it_retries_a_failing_service(service):
    service.failures = 2
    reward = build_reward(config(service.url, reward_retries=2))
    assert reward.score_batch(["p"], ["ab"], ["t"])[0].score == 1.0
    assert len(service.batches) == 3


def test_a_service_that_stays_down_fails_naming_the_url(service):
    service.failures = 100
    reward = build_reward(config(service.url, reward_retries=1))
    with pytest.raises(RewardError, match=f"reward service {service.url} failed 2 time.*HTTP Error 503"):
        reward.score_batch(["p"], ["ab"], ["t"])
    assert len(service.batches) == 2  # the first try and one retry, no more


def test_a_service_that_does_not_answer_in_time_fails(service, monkeypatch):
    gate = threading.Event()
    service.reply = lambda body: gate.wait(5) and [1.0]
    reward = build_reward(config(service.url, reward_retries=0, reward_timeout_s=0.2))
    try:
        with pytest.raises(RewardError, match="timed out"):
            reward.score_batch(["p"], ["ab"], ["t"])
    finally:
        gate.set()


def test_wrong_replies_are_failures(service):
    service.reply = lambda body: [1.0, 1.0]  # two rewards for one sample
    reward = build_reward(config(service.url, reward_retries=0))
    with pytest.raises(RewardError, match="2 rewards for 1 samples"):
        reward.score_batch(["p"], ["ab"], ["t"])


def test_redirects_are_not_followed(service):
    reward = build_reward(config(service.url.replace("/score", "/moved"), reward_retries=0))
    with pytest.raises(RewardError, match="redirect to http://127.0.0.1:9/elsewhere refused"):
        reward.score_batch(["p"], ["ab"], ["t"])


def test_only_allowlisted_urls_pass_validation_and_scoring(service, monkeypatch):
    with pytest.raises(ConfigError) as e:
        config("http://127.0.0.1:1/other")
    assert "not an allowed reward service" in e.value.errors["reward_url"]
    assert service.url in e.value.errors["reward_url"]
    reward = build_reward(config(service.url))
    monkeypatch.setenv(remote.URLS_ENV, "")  # the worker's allowlist is checked again before a request
    with pytest.raises(RewardError, match="not an allowed reward service"):
        reward.score_batch(["p"], ["ab"], ["t"])
    assert service.batches == []


class Recorder(Sink):
    def __init__(self):
        self.reports = []

    def on_step(self, report):
        self.reports.append(report)


def test_a_tiny_training_run_scored_by_the_service_and_a_plugin(tiny_config, service, tmp_path, monkeypatch):
    monkeypatch.setenv(plugins.FOLDERS_ENV, str(PLUGINS))
    parity = "parity_plugin:LengthParity"
    overrides = {
        "data.reward_fn": f"http, {parity}",
        "data.reward_weights": "1, 0.5",
        "data.reward_url": service.url,
        "data.reward_batch_size": 8,
        "optim.total_steps": 1,
    }
    rec = Recorder()
    try:
        result = run(tiny_config.with_overrides(overrides), out_dir=tmp_path, sinks=[rec])
    finally:
        sys.modules.pop("parity_plugin", None)
    assert result.status == "succeeded", result.error
    samples, m = rec.reports[0].samples, rec.reports[0].metrics
    for s in samples:
        own = 1.0 if len(s.response) % 2 == 0 else -1.0
        assert s.reward_scores == {"http": own, parity: own}
        assert s.score == pytest.approx(1.5 * own) and s.acc == (own > 0) and s.pred == str(len(s.response))
    mean = sum(s.reward_scores["http"] for s in samples) / len(samples)
    assert m["reward/http/mean"] == pytest.approx(mean)
    assert m[f"reward/{parity}/mean"] == m["reward/http/mean"]
    posted = [r for b in service.batches for r in b["responses"]]
    assert posted == [s.response for s in samples] and max(len(b["responses"]) for b in service.batches) <= 8
    assert m["actor/grad_norm"] > 0


def test_a_run_whose_service_is_down_fails_naming_the_url(tiny_config, service, tmp_path):
    service.failures = 100
    overrides = {"data.reward_fn": "http", "data.reward_url": service.url, "data.reward_retries": 0}
    result = run(tiny_config.with_overrides(overrides), out_dir=tmp_path, sinks=[])
    assert result.status == "failed" and service.url in (result.error or "")
    assert len(service.batches) == 1


def test_results_are_reward_results(service):
    service.reply = lambda body: [True]
    out = build_reward(config(service.url)).score_batch(["p"], ["x"], ["t"])
    assert out == [RewardResult(1.0, True, "", {"http": 1.0})]
