"""A Python client of the platform's REST API: create, list, wait for, cancel and resume runs, read their
metrics (dicts, or pandas DataFrames when pandas is installed) and iterate their samples.

Standard library only (and no Django): the file runs on any Python 3.11 that reaches the server, copied
alone if need be. Authentication is the token from ``/accounts/token/``::

    from dapo.client import Client

    client = Client("http://127.0.0.1:8000", token="...")   # or DAPO_URL and DAPO_TOKEN
    run = client.create_run("lr-2e-5", preset="tiny_cpu", overrides={"optim.lr": 2e-5})
    run = client.wait_for_run(run["id"], timeout=900)
    curves = client.metrics_frame(run["id"], names=["val/acc/mean@4", "critic/score/mean"])
    wrong = [s for s in client.samples(run["id"], split="val", acc=False)]

Every failed request raises an :class:`ApiError` (a subclass per status: :class:`BadRequest`,
:class:`AuthenticationFailed`, :class:`PermissionDenied`, :class:`NotFound`, :class:`Conflict`) whose
message is the API's own, field errors included; an unreachable server raises :class:`ServerUnreachable`.

It is longer than 400 lines on purpose: one standard-library file that can be copied alone to any machine
that reaches the server.
The token goes only to the site's own origin: a redirect elsewhere is followed without it.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

FINAL_STATUSES = ("succeeded", "failed", "cancelled")
DEFAULT_URL = "http://127.0.0.1:8000"


class ClientError(Exception):
    """Anything this client raises."""


class ApiError(ClientError):
    """The API answered with an error. ``status`` is the HTTP status, ``detail`` the API's message,
    ``errors`` its field errors ({"optim.lr": "must be > 0"}), ``body`` the whole decoded answer."""

    def __init__(self, status: int, detail: str, errors: Mapping[str, Any] | None = None, body: Any = None):
        self.status, self.detail, self.errors, self.body = status, detail, dict(errors or {}), body
        fields = "; ".join(f"{k}: {_text(v)}" for k, v in self.errors.items())
        super().__init__(f"HTTP {status}: {detail}" + (f" ({fields})" if fields else ""))


class BadRequest(ApiError):
    """400 or 413: the request was refused as it was written (nothing was changed)."""


class AuthenticationFailed(ApiError):
    """401: no token, or a wrong or revoked one."""


class PermissionDenied(ApiError):
    """403: the token is good but this action is not yours to take (another user's dataset...)."""


class NotFound(ApiError):
    """404: no such object, or one of another user's private runs."""


class Conflict(ApiError):
    """409: not possible in the object's present state (resume a run without a checkpoint...)."""


class ServerUnreachable(ClientError):
    """No answer from the server (refused connection, timeout, DNS)."""


class RunTimeout(ClientError, TimeoutError):
    """``wait_for_run`` gave up; ``run`` is the last state it read."""

    def __init__(self, message: str, run: dict[str, Any]) -> None:
        super().__init__(message)
        self.run = run


class RunFailed(ClientError):
    """``wait_for_run(..., raise_on_failure=True)``: the run failed or was cancelled; ``run`` is its state."""

    def __init__(self, run: dict[str, Any]) -> None:
        reason = f": {run.get('error')}" if run.get("error") else ""
        super().__init__(f"run {run.get('id')} {run.get('status')}{reason}")
        self.run = run


_ERRORS = {
    400: BadRequest,
    413: BadRequest,
    401: AuthenticationFailed,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
}


class Client:
    """The API of one platform as one user. ``url``: the site (default ``$DAPO_URL``, else
    http://127.0.0.1:8000); ``token``: the user's API token (default ``$DAPO_TOKEN``); ``timeout``:
    seconds one request may take."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0) -> None:
        self.url = (url or os.environ.get("DAPO_URL") or DEFAULT_URL).rstrip("/")
        token = token if token is not None else os.environ.get("DAPO_TOKEN")
        if not token:
            raise ValueError(
                f"no API token: pass token= or set DAPO_TOKEN (create one at {self.url}/accounts/token/)"
            )
        self.token = token
        self.timeout = timeout
        self._opener = urllib.request.build_opener(_TokenRedirects)

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    # ---- runs ---------------------------------------------------------------------------------------

    def create_run(
        self,
        name: str,
        *,
        preset: str | None = None,
        config: Mapping[str, Any] | None = None,
        overrides: Mapping[str, Any] | None = None,
        base_model: str | int | None = None,
        dataset: str | int | None = None,
    ) -> dict[str, Any]:
        """Queue a training run: a ``preset`` or a full ``config`` (RunConfig.to_dict()), then catalog
        picks (``base_model``, ``dataset``: a name, or an id; a dataset name means its newest version),
        then dotted ``overrides`` ({"optim.lr": 1e-5}). Returns the run; BadRequest lists bad fields."""
        body: dict[str, Any] = {"name": name}
        for key, value in (
            ("preset", preset),
            ("config", config),
            ("overrides", overrides),
            ("base_model", base_model),
            ("dataset", dataset),
        ):
            if value is not None:
                body[key] = dict(value) if isinstance(value, Mapping) else value
        return self._request("POST", "/api/runs/", body=body)

    def create_evaluation(
        self,
        name: str,
        *,
        datasets: list[str | int],
        base_model: str | int | None = None,
        checkpoint: Mapping[str, int] | None = None,
        n: int | None = None,
        max_problems: int | None = None,
        preset: str | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Queue an evaluation (no training) of a catalog model or a run's checkpoint ({"run": id,
        "step": N}) on catalog datasets, ``n`` samples a problem. Returns {"id", "kind"}."""
        body: dict[str, Any] = {"name": name, "datasets": list(datasets)}
        optional = {
            "base_model": base_model,
            "checkpoint": checkpoint,
            "n": n,
            "max_problems": max_problems,
            "preset": preset,
            "overrides": overrides,
        }
        for key, value in optional.items():
            if value is not None:
                body[key] = dict(value) if isinstance(value, Mapping) else value
        return self._request("POST", "/api/evaluations/", body=body)

    def list_runs(self, *, status: str | None = None, q: str | None = None) -> list[dict[str, Any]]:
        """Your runs (every run, for an administrator), newest first; ``status`` and name text ``q``
        filter. All pages are read."""
        return list(self._pages("/api/runs/", {"status": status, "q": q}))

    def get_run(self, run_id: int) -> dict[str, Any]:
        """One run: state, latest metrics, config, and the data files it read (version and SHA-256)."""
        return self._request("GET", f"/api/runs/{_id(run_id)}/")

    def cancel_run(self, run_id: int) -> dict[str, Any]:
        """Cancel: a queued run at once, a running one at its next step boundary ("outcome" says which)."""
        return self._request("POST", f"/api/runs/{_id(run_id)}/cancel/")

    def bulk_runs(self, action: str, run_ids: Sequence[int]) -> dict[str, Any]:
        """Cancel, archive, restore or delete several of your runs at once (``action``); the answer's
        "done" maps each changed id to its outcome and "refused" each other id to why (a run shared with
        you is never changed). Delete does not ask again."""
        return self._request(
            "POST", "/api/runs/bulk/", body={"action": action, "ids": [_id(i) for i in run_ids]}
        )

    def resume_run(self, run_id: int) -> dict[str, Any]:
        """Resume a failed or cancelled run from its last checkpoint; Conflict says why when it cannot."""
        return self._request("POST", f"/api/runs/{_id(run_id)}/resume/")

    def wait_for_run(
        self,
        run_id: int,
        *,
        timeout: float | None = 3600.0,
        interval: float = 5.0,
        raise_on_failure: bool = False,
    ) -> dict[str, Any]:
        """Poll until the run is succeeded, failed or cancelled and return its state. ``timeout`` (seconds,
        None: forever) raises RunTimeout with the last state read. A server that does not answer for a
        while (a restart) is polled again until the timeout; API errors (the run deleted: NotFound) raise.
        With ``raise_on_failure`` a failed or cancelled run raises RunFailed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        run: dict[str, Any] = {"id": run_id, "status": "unknown"}
        while True:
            try:
                run = self.get_run(run_id)
            except ServerUnreachable:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
            else:
                if run["status"] in FINAL_STATUSES:
                    if raise_on_failure and run["status"] != "succeeded":
                        raise RunFailed(run)
                    return run
            if deadline is not None and time.monotonic() + interval > deadline:
                raise RunTimeout(
                    f"run {run_id} is still {run.get('status')} (step {run.get('step')}) after {timeout} s",
                    run,
                )
            time.sleep(interval)

    # ---- external runs (trained by TRL or verl elsewhere; dapo.integrations) -------------------------

    def create_external_run(
        self,
        name: str,
        *,
        source: str,
        config: Mapping[str, Any] | None = None,
        total_steps: int = 0,
        tags: Sequence[str] = (),
    ) -> dict[str, Any]:
        """A running external run: ``source`` "trl" or "verl", ``config`` the trainer's own (stored as it
        is), ``total_steps`` 0 when unknown. Cancel, fork, export and resume are refused for it."""
        body = {"name": name, "source": source, "config": _json_safe(dict(config or {}))}
        body |= {"total_steps": int(total_steps), "tags": list(tags)}
        return self._request("POST", "/api/runs/external/", body=body)

    def log_metrics(self, run_id: int, points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Metric points of an external run: ``[{"step": 3, "metrics": {"loss": 0.1}, "wall_time"?: t}]``.
        Names are mapped onto the platform's where they mean the same; a non-finite value is sent as null.
        A step sent again overwrites its values, so a retried call never doubles a point."""
        body = {"points": [_json_safe(dict(p)) for p in points]}
        return self._request("POST", f"/api/runs/{_id(run_id)}/external/metrics/", body=body)

    def log_samples(self, run_id: int, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Samples of an external run: ``[{"step", "prompt", "completion", "rewards": {fn: value},
        "reward"?, "acc"?, "index"?, "split"?, "advantage"?, "length"?, ...}]``; one sent again (same step,
        split and index) overwrites its row."""
        body = {"samples": [_json_safe(dict(s)) for s in samples]}
        return self._request("POST", f"/api/runs/{_id(run_id)}/external/samples/", body=body)

    def finish_external_run(self, run_id: int, status: str = "succeeded", error: str = "") -> dict[str, Any]:
        """Mark an external run "succeeded" or "failed" (with ``error``); it takes no records afterwards."""
        body = {"status": status, **({"error": error} if error else {})}
        return self._request("POST", f"/api/runs/{_id(run_id)}/external/finish/", body=body)

    def trl_log_history(self, run_id: int) -> list[dict[str, Any]]:
        """The run's metrics as TRL's ``log_history``: ``[{"step": N, name: value}]``, TRL's names where
        they mean ours (``learning_rate``, ``grad_norm``, ``rewards/<fn>/mean``...)."""
        return self._request("GET", f"/api/runs/{_id(run_id)}/trl-log-history.json")

    def download_verl(self, run_id: int, path: str | os.PathLike[str]) -> str:
        """Save the run as verl's files, zipped, at ``path``: ``rollout/<step>.jsonl`` and
        ``validation/<step>.jsonl`` (``_dump_generations``' format), ``metrics.jsonl`` (its file logger's)
        and ``config.json``. Returns ``path``."""
        data = self._request("GET", f"/api/runs/{_id(run_id)}/verl.zip", raw=True)
        with open(path, "wb") as f:
            f.write(data)
        return os.fspath(path)

    # ---- metrics and samples ------------------------------------------------------------------------

    def metrics(
        self,
        run_id: int,
        names: list[str] | None = None,
        *,
        min_step: int | None = None,
        max_step: int | None = None,
        max_points: int | None = None,
    ) -> dict[str, dict[str, list[Any]]]:
        """{metric name: {"steps": [...], "values": [...]}} (every metric unless ``names``); ``max_points``
        thins each series evenly, keeping both ends."""
        params = {
            "names": ",".join(names) if names else None,
            "min_step": min_step,
            "max_step": max_step,
            "max_points": max_points,
        }
        return self._request("GET", f"/api/runs/{_id(run_id)}/metrics/", params=params)["metrics"]

    def metrics_frame(self, run_id: int, names: list[str] | None = None, **kwargs: Any) -> Any:
        """The metrics as a pandas DataFrame: one row per step (the index, named "step"), one column per
        metric, NaN where a metric has no value at a step (validation runs every few steps). Needs pandas."""
        try:
            import pandas
        except ImportError:
            raise ImportError(
                "metrics_frame needs pandas, an optional extra: pip install pandas (or the package's "
                "'frames' extra: pip install '.[frames]'); metrics() returns the same data as dicts"
            ) from None
        columns = {
            name: dict(zip(s["steps"], s["values"], strict=True))
            for name, s in self.metrics(run_id, names, **kwargs).items()
        }
        frame = pandas.DataFrame(columns).sort_index()
        frame.index.name = "step"
        return frame

    def samples(
        self,
        run_id: int,
        *,
        step: int | None = None,
        split: str | None = None,
        acc: bool | None = None,
        kept: bool | None = None,
        truncated: bool | None = None,
        q: str | None = None,
        page_size: int = 200,
    ) -> Iterator[dict[str, Any]]:
        """Every sample that matches, newest step first, fetched a page (``page_size``, at most 500) at a
        time as the iteration goes: ``split`` "train" or "val", ``acc`` correct or not, ``kept`` by
        dynamic sampling, ``truncated`` at the length limit, ``q`` text in prompt, response or answer."""
        params = {
            "step": step,
            "split": split,
            "acc": acc,
            "kept": kept,
            "truncated": truncated,
            "q": q,
            "page_size": page_size,
        }
        return self._pages(f"/api/runs/{_id(run_id)}/samples/", params)

    # ---- the catalog --------------------------------------------------------------------------------

    def models(self) -> list[dict[str, Any]]:
        """The catalog's base models."""
        return list(self._pages("/api/models/", {}))

    def register_model(self, name: str, path: str, description: str = "") -> dict[str, Any]:
        """Register a model folder on the server (inside its model roots); BadRequest names each problem
        (no config.json, no tokenizer, no safetensors weights, a truncated file...)."""
        return self._request(
            "POST", "/api/models/", body={"name": name, "path": path, "description": description}
        )

    def datasets(self, name: str | None = None) -> list[dict[str, Any]]:
        """Every dataset version (one name's, newest first, with ``name``)."""
        return list(self._pages("/api/datasets/", {"name": name}))

    def delete_dataset(self, dataset_id: int) -> None:
        """Delete one dataset version; Conflict while a queued or running run reads it."""
        self._request("DELETE", f"/api/datasets/{_id(dataset_id)}/")

    # ---- your settings: notifications and saved views ----------------------------------------------

    def notification_settings(self) -> dict[str, Any]:
        """Your notification settings ({"webhook_url", "email", "stall_minutes", "address",
        "email_configured"}) and "deliveries": your last 20 notifications, each with its "status"
        (pending, sent, failed), "attempts" and "last_error"."""
        return self._request("GET", "/api/notifications/")

    def update_notification_settings(self, **fields: Any) -> dict[str, Any]:
        """Change any of ``webhook_url`` (under the server's DAPO_WEBHOOK_URLS; "" for none), ``email``
        (True/False), ``stall_minutes`` (0: never) and ``address``; the others keep their values. Returns
        the settings as ``notification_settings``; BadRequest names each bad field and nothing changed."""
        return self._request("PATCH", "/api/notifications/", body=fields)

    def saved_views(self) -> list[dict[str, Any]]:
        """Your saved views of the runs list: {"id", "name", "filter", "sort", "columns", "archived",
        "url"}; ``list_runs``' filters and the runs list page read the same syntax."""
        return self._request("GET", "/api/views/")

    def save_view(
        self,
        name: str,
        *,
        filter: str = "",
        sort: str = "",
        columns: list[str] | None = None,
        archived: str = "active",
    ) -> dict[str, Any]:
        """Save a view of the runs list (your view of the same name is replaced): a ``filter`` such as
        "optim.lr < 1e-4 and val/acc/mean@4 > 0.8", a ``sort`` field ("-" first: descending), extra
        ``columns`` and which runs by ``archived`` (active, archived, all). BadRequest names the field
        that does not parse, and nothing is saved."""
        body = {
            "name": name,
            "filter": filter,
            "sort": sort,
            "columns": list(columns or []),
            "archived": archived,
        }
        return self._request("POST", "/api/views/", body=body)

    def delete_view(self, view_id: int) -> None:
        """Delete one of your saved views (NotFound when it is not yours)."""
        self._request("DELETE", f"/api/views/{_id(view_id)}/")

    # ---- transport ----------------------------------------------------------------------------------

    def _pages(self, path: str, params: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        page = 1
        while True:
            answer = self._request("GET", path, params={**params, "page": page})
            yield from answer["results"]
            if not answer.get("next"):
                return
            page += 1

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        raw: bool = False,
    ) -> Any:
        query = urllib.parse.urlencode({k: _param(v) for k, v in (params or {}).items() if v is not None})
        url = f"{self.url}{path}" + (f"?{query}" if query else "")
        headers = {"Authorization": f"Token {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body, allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                answer = response.read()
        except urllib.error.HTTPError as e:
            raise _api_error(e.code, e.read()) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            reason = getattr(e, "reason", e)
            raise ServerUnreachable(f"{method} {url}: no answer ({reason})") from None
        return answer if raw else json.loads(answer) if answer else None


class _TokenRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects followed as urllib follows them, except that the token stays with the origin it was
    given for: a redirect to another scheme, host or port (a misconfigured or compromised server, a proxy's
    login page) would otherwise carry ``Authorization`` there, since urllib copies every header."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and not _same_origin(req.full_url, new.full_url):
            new.remove_header("Authorization")
        return new


def _same_origin(old: str, new: str) -> bool:
    """Whether a redirect from ``old`` to ``new`` may keep the token: same scheme, host and port, or the
    upgrade from http to https on the default ports of the same host (the one exception requests makes)."""
    a, b = urllib.parse.urlsplit(old), urllib.parse.urlsplit(new)
    try:
        ports = (a.port or _DEFAULT_PORTS.get(a.scheme), b.port or _DEFAULT_PORTS.get(b.scheme))
    except ValueError:  # a port that is no number
        return False
    if a.hostname != b.hostname:
        return False
    if (a.scheme, b.scheme) == ("http", "https"):
        return ports == (80, 443)
    return a.scheme == b.scheme and ports[0] == ports[1]


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _api_error(status: int, raw: bytes) -> ApiError:
    """The API's message: {"detail", "errors"?}, or DRF's {field: [messages]}, or the start of the text."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = raw.decode("utf-8", "replace")
    if isinstance(body, dict):
        detail = body.get("detail")
        errors = body.get("errors") if isinstance(body.get("errors"), dict) else None
        if detail is None and errors is None:  # a DRF serializer or query-parameter error
            errors = body
        text = str(detail) if detail is not None else "invalid request"
    else:
        text, errors = " ".join(str(body).split())[:300] or f"HTTP {status}", None
    cls = _ERRORS.get(status, ApiError)
    return cls(status, text, errors, body)


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _json_safe(value: Any) -> Any:
    """``value`` with NaN and infinities as None (JSON has neither) and tuples as lists."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"an id is a positive integer, got {value!r}")
    return value


def _text(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(_text(v) for v in value)
    return str(value)
