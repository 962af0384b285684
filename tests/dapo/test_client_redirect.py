"""dapo.client sends its token only to the origin it was given: a redirect to another scheme, host or port
(a compromised or misconfigured server, a proxy) is followed without the Authorization header, as
``requests`` does; a redirect within the site keeps it. Two local HTTP servers on different ports: the
first redirects, both record the headers they receive."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from dapo import client as client_module
from dapo.client import Client

TOKEN = "0123456789abcdef-the-users-api-token"


class Recorder(BaseHTTPRequestHandler):
    """Answers every GET with ``{"id": 1}``, or with the redirect ``server.redirects`` holds for the path;
    records (path, Authorization header) in ``server.seen``."""

    def do_GET(self) -> None:
        server: Any = self.server
        server.seen.append((self.path, self.headers.get("Authorization")))
        target = server.redirects.get(self.path)
        if target:
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps({"id": 1}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        return


@pytest.fixture
def servers() -> Iterator[tuple[Any, Any]]:
    """Two recording servers on 127.0.0.1, on two free ports."""
    started = []
    for _ in range(2):
        httpd: Any = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
        httpd.seen, httpd.redirects = [], {}
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        started.append(httpd)
    yield started[0], started[1]
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()


def _base(httpd: Any, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{httpd.server_address[1]}"


def test_a_redirect_to_another_port_loses_the_token(servers):
    site, elsewhere = servers
    site.redirects["/api/runs/1/"] = f"{_base(elsewhere)}/collect/"
    assert Client(_base(site), token=TOKEN).get_run(1) == {"id": 1}
    assert site.seen == [("/api/runs/1/", f"Token {TOKEN}")]
    assert elsewhere.seen == [("/collect/", None)]  # followed, without the token


def test_a_redirect_to_another_host_name_loses_the_token(servers):
    site, _ = servers
    site.redirects["/api/runs/1/"] = f"{_base(site, 'localhost')}/collect/"  # same port, another host
    Client(_base(site), token=TOKEN).get_run(1)
    assert site.seen == [("/api/runs/1/", f"Token {TOKEN}"), ("/collect/", None)]


def test_a_redirect_within_the_site_keeps_the_token(servers):
    site, _ = servers
    site.redirects["/api/runs/1/"] = "/api/runs/1/moved/"
    Client(_base(site), token=TOKEN).get_run(1)
    assert site.seen == [("/api/runs/1/", f"Token {TOKEN}"), ("/api/runs/1/moved/", f"Token {TOKEN}")]


def test_the_token_stays_dropped_when_a_second_redirect_comes_back(servers):
    site, elsewhere = servers
    site.redirects["/api/runs/1/"] = f"{_base(elsewhere)}/bounce/"
    elsewhere.redirects["/bounce/"] = f"{_base(site)}/back/"
    Client(_base(site), token=TOKEN).get_run(1)
    assert elsewhere.seen == [("/bounce/", None)]
    assert site.seen[-1] == ("/back/", None)  # a third party's redirect never earns the token back


@pytest.mark.parametrize(
    ("old", "new", "keeps"),
    [
        ("http://dapo.example.org/api/", "http://dapo.example.org:80/api/runs/", True),
        ("http://dapo.example.org/api/", "https://dapo.example.org/api/", True),  # as requests allows
        ("https://dapo.example.org/api/", "http://dapo.example.org/api/", False),  # a downgrade
        ("http://dapo.example.org:8000/", "https://dapo.example.org:8443/", False),
        ("https://dapo.example.org/", "https://dapo.example.org:8443/", False),
        ("https://dapo.example.org/", "https://evil.example.org/", False),
        ("https://dapo.example.org/", "https://DAPO.example.org/", True),  # host names ignore case
        ("https://dapo.example.org/", "https://dapo.example.org:x/", False),
    ],
)
def test_which_redirects_keep_the_token(old, new, keeps):
    assert client_module._same_origin(old, new) is keeps
