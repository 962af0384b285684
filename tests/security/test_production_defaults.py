"""With nothing configured (no DJANGO_* variable at all), the site runs as in production: no debug mode,
whose 404 page lists every URL pattern of the site to anyone, and a Content-Security-Policy that is
enforced, not only reported. Each probe starts a fresh process, since the settings are read at import and
the test process's own environment turns debugging on (tests/platform/support.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.platform.support import fresh_environment

REPO = Path(__file__).resolve().parents[2]
MISSING = ["/no-such-page/", "/api/no-such-endpoint/", "/runs/no-such/"]
PROBE = f"""
import django, json
django.setup()
from django.conf import settings
from django.test import Client
client = Client(HTTP_HOST="localhost")
answers = {{}}
for path in {MISSING!r}:
    response = client.get(path)
    answers[path] = {{
        "status": response.status_code,
        "body": response.content.decode(errors="replace"),
        "csp": response.get("Content-Security-Policy"),
        "report_only": response.get("Content-Security-Policy-Report-Only"),
    }}
print(json.dumps({{"debug": settings.DEBUG, "answers": answers}}))
"""


def _probe(tmp_path: Path) -> dict:
    argv = [sys.executable, "-c", PROBE]
    env = fresh_environment(tmp_path / "var")
    result = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_by_default_debug_is_off_and_a_404_lists_no_url(tmp_path):
    probe = _probe(tmp_path)
    assert probe["debug"] is False
    for path, answer in probe["answers"].items():
        assert answer["status"] == 404, path
        assert "URLconf" not in answer["body"] and "api/runs/" not in answer["body"], path


def test_by_default_the_csp_is_enforced(tmp_path):
    for path, answer in _probe(tmp_path)["answers"].items():
        assert answer["csp"] and "script-src 'self'" in answer["csp"], path
        assert answer["report_only"] is None, path
