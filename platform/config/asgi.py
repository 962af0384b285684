"""ASGI entry point (daphne): HTTP through Django, websockets through Channels.

Run from the repository root: ``PYTHONPATH=platform daphne -b 127.0.0.1 -p 8000 config.asgi:application``
(``platform/`` is a source folder: see the house style).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_PLATFORM = str(Path(__file__).resolve().parents[1])
if _PLATFORM not in sys.path:
    sys.path.insert(0, _PLATFORM)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()  # sets Django up before the consumers import models

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from runs.origin import SameOriginValidator  # noqa: E402
from runs.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
