"""No credentials in the repository: every tracked text file is scanned for private keys, cloud and hub
tokens, credentials in URLs and long literal secrets assigned in code. What matches on purpose (test
users' passwords, placeholders in docs) is on an allow-list of its own, by file and text.
Settings come from the environment; what the platform writes at run time (var/) is ignored by git.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_BYTES = 8_000_000

PATTERNS = {
    "private key": re.compile(r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY(?: BLOCK)?-----"),
    "AWS access key": re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "GitHub token": re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})\b"),
    "Slack token": re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    "Google API key": re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"),
    "OpenAI/Anthropic key": re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{32,}"),
    "Hugging Face token": re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),
    "Stripe key": re.compile(r"\b[rs]k_live_[A-Za-z0-9]{20,}"),
    "JWT": re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
    "password in a URL": re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:([^@\s/'\"]{3,})@"),
    "literal secret": re.compile(
        r"(?i)\b[\w.]*(?:secret|passw(?:or)?d|api_?key|auth_?token|access_?key)[\w.]*\s*[:=]\s*"
        r"[\"']([^\"'\s]{12,})[\"']"
    ),
}
ALLOWED = [
    # (file pattern, text pattern): matches that are no credential
    (
        r"(tests|bench)/.*",
        r"(alice|bob|bench|root)-pass-123",
    ),  # throwaway users of tests and benchmarks
    # Swagger UI's minified form labels ('Password:' then a React call), not values
    (
        r"frontend/static/vendor/swagger-ui-[0-9.]+-bundle\.js",
        r'(?i)(password|client_secret):"\),\w+\?\$e\.createElement\("',
    ),
    (r"tests/platform/config/test_settings\.py", r"production-like-secret-for-the-deploy-check-only"),
    (r".*", r"://[^:]+:(secret|pw|password|\$\{[A-Z_]+(:-\w+)?\}|<[^>]+>)@"),  # placeholders in docs
    # Kubernetes' reference to an env var of the same container, filled from a Secret at run time
    (r"deploy/kubernetes/.*\.yaml", r"://[^:]+:\$\([A-Z_]+\)@"),
]
# The scanner's own patterns would match themselves in this file; nothing else is exempt.
SELF = "tests/security/test_no_secrets.py"


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [name for name in out.decode().split("\0") if name and name != SELF]


def _text(path: Path) -> str | None:
    if not path.is_file() or path.stat().st_size > MAX_BYTES:
        return None
    data = path.read_bytes()
    return None if b"\0" in data[:8192] else data.decode("utf-8", "replace")


def _allowed(name: str, match: str) -> bool:
    return any(re.fullmatch(f, name) and re.search(t, match) for f, t in ALLOWED)


def find_secrets(names: list[str]) -> list[str]:
    found = []
    for name in names:
        text = _text(REPO / name)
        if text is None:
            continue
        for what, pattern in PATTERNS.items():
            for m in pattern.finditer(text):
                if not _allowed(name, m.group(0)):
                    line = text.count("\n", 0, m.start()) + 1
                    found.append(f"{name}:{line}: {what}: {m.group(0)[:60]}")
    return found


def test_no_tracked_file_holds_a_credential():
    names = tracked_files()
    assert len(names) > 50
    found = find_secrets(names)
    assert not found, "credentials in the repository (move them to the environment):\n" + "\n".join(found)


def test_the_scanner_finds_what_it_looks_for(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    fake = {
        "key.pem": "-----BEGIN OPENSSH " + "PRIVATE KEY-----\nb3Blbn\n",
        "conf.py": 'API_KEY = "' + "Zx8" * 8 + '"\n',
        "deploy.sh": "psql postgres://dapo:" + "hunter2hunter2" + "@db/dapo\n",
        "ci.yml": "token: gh" + "p_" + "a" * 36 + "\n",
        "notes.md": "use hf" + "_" + "B" * 34 + "\n",
    }
    for name, text in fake.items():
        (tmp_path / name).write_text(text)
    found = find_secrets(list(fake))
    assert sorted(f.split(":")[0] for f in found) == sorted(fake), found


def test_runtime_state_and_env_files_are_ignored_by_git():
    for path in ("var/admin-password.txt", "var/db.sqlite3", "var/redis/dump.rdb", "staticfiles/x.js"):
        result = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO)
        assert result.returncode == 0, f"{path} is not ignored by git: a secret could be committed"
