"""Which URLs may be a notification webhook: http(s) under a prefix the administrator lists in
``DAPO_WEBHOOK_URLS``, compared after normalising the path.

A server or proxy resolves ``..`` and ``%2e%2e`` before it routes a request, and many decode ``%2f`` to
``/``: ``https://hooks.example/services/../admin`` is a POST to ``/admin``. So both paths, the URL's and the
prefix's, are normalised as RFC 3986 section 6.2.2 says (percent-encoded unreserved characters decoded, then
``remove_dot_segments`` of section 5.2.4), and the URL must lie under the prefix as written and as
normalised. Encoded slashes and backslashes are refused outright: whether a server reads them as separators
differs from server to server.
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, urlsplit

from django.conf import settings

_UNRESERVED_ESCAPE = re.compile(r"%(2[dDeE]|3[0-9]|[46][1-9a-fA-F]|[57][0-9aA]|5[fF]|7[eE])")
"""A percent-encoded unreserved character (ALPHA, DIGIT, ``-``, ``.``, ``_``, ``~``), which normalisation
decodes (RFC 3986 section 2.3)."""
_SEPARATOR_ESCAPE = re.compile(r"%(2[fF]|5[cC])")


def allowed_prefixes() -> list[str]:
    return list(getattr(settings, "DAPO_WEBHOOK_URLS", []))


def webhook_problem(url: str) -> str | None:
    """Why ``url`` may not be a webhook, or None. It must be http(s) and lie under a listed prefix: the
    same scheme, host and port, and a path that starts with the prefix's path at a segment boundary, both
    as written and once dot segments are resolved."""
    prefixes = allowed_prefixes()
    listed = ", ".join(prefixes) or "none (an administrator sets DAPO_WEBHOOK_URLS)"
    if len(url) > 1000 or any(c.isspace() or ord(c) < 32 for c in url):
        return "not a URL"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL"
    if parts.username or parts.password:
        return "must not carry a user name or password"
    if "\\" in parts.path or _SEPARATOR_ESCAPE.search(parts.path):
        return "must not have an encoded slash or a backslash in its path"
    if not any(_under(parts, urlsplit(prefix)) for prefix in prefixes):
        return f"is not under an allowed webhook prefix; allowed (DAPO_WEBHOOK_URLS): {listed}"
    return None


def normalised_path(path: str) -> str:
    """``path`` with percent-encoded unreserved characters decoded and dot segments removed:
    ``/services/%2e%2e/admin`` is ``/admin``."""
    decoded = _UNRESERVED_ESCAPE.sub(lambda m: chr(int(m[1], 16)), path)
    return remove_dot_segments(decoded) or "/"


def remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4, step by step (A to E): ``/a/b/../c/./d`` is ``/a/c/d``."""
    out: list[str] = []
    while path:
        if path.startswith("../") or path.startswith("./"):  # A: a relative path's leading dots
            path = path[path.index("/") + 1 :]
        elif path.startswith("/./") or path == "/.":  # B: "." is the segment itself
            path = "/" + path[3:]
        elif path.startswith("/../") or path == "/..":  # C: ".." removes the segment before it
            path = "/" + path[4:]
            if out:
                out.pop()
        elif path in (".", ".."):  # D
            path = ""
        else:  # E: move the first segment (with its leading "/") to the output
            end = path.find("/", 1)
            end = len(path) if end == -1 else end
            out.append(path[:end])
            path = path[end:]
    return "".join(out)


def _under(url: SplitResult, prefix: SplitResult) -> bool:
    try:
        same_port = (url.port or _default_port(url.scheme)) == (prefix.port or _default_port(prefix.scheme))
    except ValueError:  # a port out of range
        return False
    if (url.scheme, (url.hostname or "").lower()) != (prefix.scheme, (prefix.hostname or "").lower()):
        return False
    base = normalised_path(prefix.path or "/")
    raw, normal = url.path or "/", normalised_path(url.path or "/")
    return same_port and _path_under(raw, base) and _path_under(normal, base)


def _path_under(path: str, base: str) -> bool:
    return path == base or path.startswith(base if base.endswith("/") else base + "/")


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80
