"""The Content-Security-Policy header of every response (site-wide middleware)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware


def _with_csp(response: HttpResponse) -> HttpResponse:
    policy = settings.CONTENT_SECURITY_POLICY
    header = "Content-Security-Policy" + (
        "-Report-Only" if settings.CONTENT_SECURITY_POLICY_REPORT_ONLY else ""
    )
    if policy and header not in response:
        response[header] = policy
    return response


@sync_and_async_middleware
def content_security_policy(get_response: Callable[[HttpRequest], Any]) -> Callable[[HttpRequest], Any]:
    """Adds ``settings.CONTENT_SECURITY_POLICY`` (empty: none) to responses that do not set their own, as
    Content-Security-Policy-Report-Only when ``CONTENT_SECURITY_POLICY_REPORT_ONLY``."""
    if iscoroutinefunction(get_response):

        async def middleware(request: HttpRequest) -> HttpResponse:
            response: Awaitable[HttpResponse] = get_response(request)
            return _with_csp(await response)

        return middleware

    def sync_middleware(request: HttpRequest) -> HttpResponse:
        return _with_csp(get_response(request))

    return sync_middleware
