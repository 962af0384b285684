"""A Python that has TRL, for the test of dapo.integrations.trl.

TRL is pinned in requirements-dev.lock (it resolves with our pins, and never enters the runtime lock):
where the project's venv has it, that is the Python. Otherwise (a venv made before the pin) one is built on
demand under var/trl-venv: a venv that sees the project's site-packages through a .pth file (so torch
and transformers are the project's, never downloaded again) with TRL installed at the lock's pin and
constrained to the lock's versions. It is rebuilt only when requirements-dev.lock changes (a stamp holds its
SHA-256). ``python_with_trl`` returns None with the reason when the install is impossible (no package
index answers).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
LOCK = REPO / "requirements-dev.lock"
VENV = REPO / "var" / "trl-venv"


def trl_pin() -> str:
    match = re.search(r"^trl==(\S+)", LOCK.read_text(), re.MULTILINE)
    if match is None:
        raise AssertionError(f"{LOCK} pins no trl: run make lock")
    return match.group(1)


def has_trl(python: str) -> bool:
    code = f"import trl, sys; sys.exit(trl.__version__ != {trl_pin()!r})"
    return subprocess.run([python, "-c", code], capture_output=True, timeout=120).returncode == 0


def python_with_trl() -> tuple[str | None, str]:
    """(a Python with TRL at the lock's pin, "") or (None, why there is none)."""
    if has_trl(sys.executable):
        return sys.executable, ""
    stamp = VENV / "stamp"
    digest = hashlib.sha256(LOCK.read_bytes()).hexdigest()
    python = VENV / "bin" / "python"
    if stamp.is_file() and stamp.read_text() == digest and python.exists():
        return str(python), ""
    subprocess.run(
        [sys.executable, "-m", "venv", "--clear", "--without-pip", str(VENV)], check=True, timeout=120
    )
    site = Path(sysconfig.get_paths()["purelib"])
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (VENV / "lib" / version / "site-packages" / "zz_project.pth").write_text(f"{site}\n")
    # pip is the project venv's, run with the new venv's Python (which sees it through the .pth)
    install = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "-q",
            f"trl=={trl_pin()}",
            "-c",
            str(LOCK),
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=900,
    )
    if install.returncode != 0:
        text = install.stderr + install.stdout
        if re.search(r"No matching distribution|Could not find a version|NewConnectionError|Network", text):
            return None, f"TRL cannot be installed here (no package index answers): {text[-400:]}"
        raise AssertionError(f"installing trl into {VENV} failed:\n{text[-3000:]}")
    if not has_trl(str(python)):
        raise AssertionError(f"{python} still has no trl=={trl_pin()} after installing it")
    stamp.write_text(digest)
    return str(python), ""
