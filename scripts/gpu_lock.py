"""The GPU lock (requirements-gpu.lock): resolve it with pip, and check that it resolves to itself.

    python3.11 -m scripts.gpu_lock          # the CI step of `make test`
    python3.11 -m scripts.gpu_lock --force  # resolve even when nothing changed since the last resolve

The check runs `pip install --dry-run --ignore-installed --report` of the lock (nothing is installed, nor
downloaded beyond what pip needs to read the dependencies of each pinned release) and fails when pip would
install anything the lock does not pin, or another version. When the package index does not answer, it
says so and passes: a machine without the network cannot tell a good lock from a bad one.

A resolve takes minutes, and its answer only changes with the files it reads: after a successful one,
``requirements-gpu.resolved`` (committed) records a hash of every ``requirements*.in`` and lock file, and the
next check resolves again only when one of them differs from what that hash records.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU_IN = ROOT / "requirements-gpu.in"
GPU_LOCK = ROOT / "requirements-gpu.lock"
STAMP = ROOT / "requirements-gpu.resolved"
PYPI = "https://pypi.org/simple"
PROBE_TIMEOUT_S = 10.0
RESOLVE_TIMEOUT_S = 300.0
SKIPPED = 0  # exit status of a check that could not run (the index is unreachable)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines(path: Path) -> list[str]:
    """The requirement lines of a requirements file, comments and blank lines dropped."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def requirement_name(line: str) -> str:
    return canonical(re.split(r"[\[=<>~!; ]", line, maxsplit=1)[0])


def lock_pins(path: Path) -> dict[str, str]:
    """Canonical name -> pinned version of a lock file (`-r` lines are not followed)."""
    pins = {}
    for line in requirement_lines(path):
        if not line.startswith("-"):
            name, version = line.split("==")
            pins[canonical(name)] = version
    return pins


def resolve(python: Path | str, pip_args: list[str], timeout: float = RESOLVE_TIMEOUT_S) -> dict[str, str]:
    """What `pip install --dry-run --ignore-installed <pip_args>` would install: canonical name ->
    "Name==version" (pip's own spelling of the name). Raises CalledProcessError / TimeoutExpired."""
    cmd = [str(python), "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    cmd += ["--disable-pip-version-check", "--no-input", "--report", "-", *pip_args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, cmd, done.stdout, done.stderr)
    report = json.loads(done.stdout)
    pins = {}
    for item in report["install"]:
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        pins[canonical(name)] = f"{name}=={version}"
    return pins


def differences(lock: dict[str, str], resolved: dict[str, str]) -> list[str]:
    """Human-readable differences between a lock's pins and what pip resolved from it (empty: equal)."""
    found = {name: line.split("==", 1)[1] for name, line in resolved.items()}
    out = [f"{name}: resolved {found[name]}, not in the lock" for name in sorted(found.keys() - lock.keys())]
    out += [f"{name}: locked {lock[name]}, not resolved" for name in sorted(lock.keys() - found.keys())]
    out += [
        f"{name}: locked {lock[name]}, resolved {found[name]}"
        for name in sorted(lock.keys() & found.keys())
        if lock[name] != found[name]
    ]
    return out


def index_url(python: Path | str) -> str:
    """The index pip uses: PIP_INDEX_URL, else pip's configured index-url, else PyPI."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    cmd = [str(python), "-m", "pip", "config", "get", "global.index-url"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else PYPI


def reachable(url: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when `url` answers, else why not (one line)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"


def inputs_hash(root: Path = ROOT) -> str:
    """A hash of what a resolve reads: every requirements*.in and requirements*.lock, by name and content."""
    digest = hashlib.sha256()
    for path in sorted(root.glob("requirements*.in")) + sorted(root.glob("requirements*.lock")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def unchanged_since_resolve(stamp: Path = STAMP, root: Path = ROOT) -> bool:
    """True when the stamp of the last successful resolve holds the hash of today's files."""
    return stamp.is_file() and stamp.read_text().split()[:1] == [inputs_hash(root)]


def check(
    python: Path | str = sys.executable, lock: Path = GPU_LOCK, *, force: bool = False, stamp: Path = STAMP
) -> int:
    """The CI step: 0 when the lock resolves to exactly itself (or the index is unreachable, or nothing
    changed since the last successful resolve and ``force`` is off), else 1."""
    if not force and unchanged_since_resolve(stamp, lock.parent):
        print(f"[gpu lock] ok: no requirements file changed since the resolve recorded in {stamp.name}")
        return 0
    index = index_url(python)
    probe = f"{index.rstrip('/')}/vllm/"
    why = reachable(probe)
    if why is not None:
        print(f"[gpu lock] SKIPPED: the package index does not answer ({probe}: {why}); not checked")
        return SKIPPED
    started = time.monotonic()
    try:
        resolved = resolve(python, ["-r", str(lock)])
    except subprocess.TimeoutExpired:
        print(f"[gpu lock] FAIL: pip did not resolve {lock.name} within {RESOLVE_TIMEOUT_S:.0f} s")
        return 1
    except subprocess.CalledProcessError as exc:
        tail = "\n".join(str(exc.stderr).strip().splitlines()[-15:])
        print(f"[gpu lock] FAIL: pip cannot resolve {lock.name} (exit {exc.returncode}):\n{tail}")
        return 1
    problems = differences(lock_pins(lock), resolved)
    seconds = time.monotonic() - started
    if problems:
        print(f"[gpu lock] FAIL: {lock.name} does not resolve to itself ({seconds:.0f} s):")
        print("\n".join(f"  {line}" for line in problems))
        return 1
    print(
        f"[gpu lock] ok: {lock.name} resolves to its {len(resolved)} pins and nothing else ({seconds:.0f} s)"
    )
    stamp.write_text(
        f"{inputs_hash(lock.parent)}\n# requirements*.in and *.lock as of the last successful resolve\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(check(force="--force" in sys.argv[1:]))
