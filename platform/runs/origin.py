"""The websocket origin check: a browser may open a run's stream only from a page of this very site.

Channels' AllowedHostsOriginValidator compares the Origin's host name with ALLOWED_HOSTS and ignores the
scheme and the port, so a page served by any other web app on the same host (``http://127.0.0.1:9999``)
could open the stream with the user's cookie and read it. Here the Origin must equal the site's own origin,
scheme + host + port as the browser addressed it (the Host header, the connection's scheme), or be listed in
``CSRF_TRUSTED_ORIGINS`` (a TLS proxy in front: ``https://dapo.example.org``); and the Host must be an
allowed host. Default ports are folded (``http://x`` is ``http://x:80``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

_DEFAULT_PORT = {"http": "80", "https": "443"}


def _origin(scheme: str, netloc: str) -> tuple[str, str, str] | None:
    """(scheme, host, port) of ``scheme://netloc``, lower-cased, the port made explicit; None if malformed."""
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        host, port = (parts.hostname or ""), parts.port
    except ValueError:  # a port that is not a number, a bad IPv6 literal
        return None
    if not host or scheme not in _DEFAULT_PORT:
        return None
    return scheme, host.lower(), str(port) if port is not None else _DEFAULT_PORT[scheme]


def _parsed(url: str) -> tuple[str, str, str] | None:
    scheme, sep, rest = url.partition("://")
    return _origin(scheme.lower(), rest.split("/", 1)[0]) if sep else None


def same_origin(scope: dict[str, Any]) -> bool:
    """Whether the websocket handshake in ``scope`` comes from a page of this site (see the module)."""
    headers = {name.lower(): value for name, value in scope.get("headers", [])}
    try:
        origin_header = headers.get(b"origin", b"").decode("ascii")
        host_header = headers.get(b"host", b"").decode("ascii")
    except UnicodeDecodeError:
        return False
    origin = _parsed(origin_header)
    if origin is None:
        return False
    domain, _port = split_domain_port(host_header)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    scheme = "https" if scope.get("scheme") in ("wss", "https") else "http"
    trusted = {_parsed(url) for url in settings.CSRF_TRUSTED_ORIGINS}
    return origin == _origin(scheme, host_header) or origin in trusted


class SameOriginValidator:
    """ASGI middleware: refuses (HTTP 403 at the handshake) a websocket whose Origin is not this site's."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not same_origin(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
