"""Our own "page not found" everywhere, even while debugging.

With ``DJANGO_DEBUG=false`` (the default) Django renders ``404.html`` and ``500.html`` (frontend/templates)
itself. With ``DJANGO_DEBUG=true`` it answered a missing page with its technical page, which lists every
URL pattern of the site and leads nowhere; this middleware puts our 404 page, with its way back, in place
of that one for pages a browser asks for. The API keeps its JSON answers; a server error while debugging
keeps Django's traceback page, which a developer needs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.utils.decorators import sync_and_async_middleware

KEPT_PREFIXES = ("/api/", "/static/", "/admin/")


def _replace(request: HttpRequest, response: HttpResponse) -> bool:
    return (
        settings.DEBUG
        and response.status_code == 404
        and "text/html" in response.get("Content-Type", "")
        and not getattr(response, "dapo_error_page", False)
        and not request.path.startswith(KEPT_PREFIXES)
    )


def _not_found(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    page = HttpResponse(render_to_string("404.html", request=request), status=404)
    page.dapo_error_page = True  # type: ignore[attr-defined]
    for header in ("Content-Security-Policy", "Content-Security-Policy-Report-Only"):
        if header in response:
            page[header] = response[header]
    return page


@sync_and_async_middleware
def friendly_not_found(get_response: Callable[[HttpRequest], Any]) -> Callable[[HttpRequest], Any]:
    if iscoroutinefunction(get_response):

        async def middleware(request: HttpRequest) -> HttpResponse:
            response: Awaitable[HttpResponse] = get_response(request)
            result = await response
            if _replace(request, result):  # the page reads the session's user: in a thread
                return await sync_to_async(_not_found)(request, result)
            return result

        return middleware

    def sync_middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        return _not_found(request, response) if _replace(request, response) else response

    return sync_middleware
