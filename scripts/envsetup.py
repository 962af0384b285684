"""Create .venv and install the pinned lock into it; do nothing when the lock has not changed.

    python3.11 -m scripts.envsetup          # runtime lock (what `make demo` needs)
    python3.11 -m scripts.envsetup --dev    # runtime + dev lock (what `make test` needs)

The installed locks' hashes are kept in .venv/.dapo-installed.json, so a second run costs a file read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
RUNTIME_LOCK = ROOT / "requirements.lock"
DEV_LOCK = ROOT / "requirements-dev.lock"
STAMP = VENV / ".dapo-installed.json"
PIP_LOG = ROOT / "var" / "log" / "pip-install.log"
PYTHON_VERSION = (3, 11)

# The lock pins torch==2.13.0+cpu. A machine with the wheel on disk has it in /opt/wheels; elsewhere the
# CPU build comes from PyTorch's own index (PyPI only carries the multi-GB CUDA build under that version).
WHEELS_DIR = Path("/opt/wheels")
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def venv_bin(name: str) -> Path:
    return VENV / "bin" / name


def pip_source_args() -> list[str]:
    """Where pip looks for the CPU torch wheel, besides the configured index."""
    if WHEELS_DIR.is_dir():
        return ["--find-links", str(WHEELS_DIR)]
    return ["--extra-index-url", os.environ.get("DAPO_TORCH_INDEX", TORCH_CPU_INDEX)]


def files_hash(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def check_interpreter() -> None:
    if sys.version_info[:2] != PYTHON_VERSION:
        sys.exit(
            f"error: this project needs Python 3.11 (found {sys.version.split()[0]} at {sys.executable}); "
            "install python3.11 or run make with PYTHON=/path/to/python3.11"
        )


def venv_works() -> bool:
    python = venv_bin("python")
    if not python.exists():
        return False
    probe = subprocess.run(
        [str(python), "-c", "import sys; print('{}.{}'.format(*sys.version_info[:2]))"],
        capture_output=True,
        text=True,
    )
    return probe.returncode == 0 and probe.stdout.strip() == "{}.{}".format(*PYTHON_VERSION)


def create_venv() -> None:
    if VENV.exists():
        print(f"[venv] {VENV} is broken or not Python 3.11: recreating it")
        shutil.rmtree(VENV)
    print(f"[venv] creating {VENV} with {sys.executable}")
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)


def read_stamp() -> dict[str, str]:
    try:
        return dict(json.loads(STAMP.read_text()))
    except (OSError, ValueError):
        return {}


def wanted_locks(dev: bool) -> dict[str, list[Path]]:
    """Each group with the files that define it (the dev lock includes the runtime lock)."""
    locks = {"runtime": [RUNTIME_LOCK]}
    if dev:
        locks["dev"] = [RUNTIME_LOCK, DEV_LOCK]
    return locks


def pip_install(lock: Path) -> None:
    """Install one lock file (the dev lock includes the runtime one); the full log goes to var/log/."""
    PIP_LOG.parent.mkdir(parents=True, exist_ok=True)
    cmd = [str(venv_bin("python")), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    # No .pyc for all of torch and ray up front (2-3x faster); Python compiles what is imported, once.
    cmd.append("--no-compile")
    cmd += [*pip_source_args(), "-r", str(lock)]
    print(f"[venv] installing {lock.name} (the first time takes a few minutes; log: {PIP_LOG})", flush=True)
    started = time.monotonic()
    with PIP_LOG.open("w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    if done.returncode != 0:
        lines = PIP_LOG.read_text(errors="replace").splitlines()
        print("\n".join(line for line in lines[-40:] if "is ignored: it is neither" not in line))
        sys.exit(f"error: pip could not install {lock.name} (exit {done.returncode}); full log: {PIP_LOG}")
    print(f"[venv] installed {lock.name} in {time.monotonic() - started:.0f} s")


def ensure_venv(dev: bool = False) -> Path:
    """Make .venv hold exactly what the lock(s) pin; return its python. Idempotent and fast when current.

    1. create the venv when it is missing or not a working Python 3.11;
    2. compare each wanted lock's hash with the stamp;
    3. install the largest lock that changed (the dev lock pulls the runtime lock in with -r);
    4. record the hashes.
    """
    check_interpreter()
    if not venv_works():
        create_venv()
    locks = wanted_locks(dev)
    stamp = read_stamp()
    hashes = {name: files_hash(*paths) for name, paths in locks.items()}
    stale = [name for name in locks if stamp.get(name) != hashes[name]]
    if stale:
        pip_install(DEV_LOCK if "dev" in stale else RUNTIME_LOCK)
        stamp.update(hashes)
        STAMP.write_text(json.dumps(stamp, indent=1) + "\n")
    return venv_bin("python")


def project_env() -> dict[str, str]:
    """The environment every service gets: venv first on PATH, the source folders on PYTHONPATH."""
    env = dict(os.environ)
    var_dir = Path(env.get("DAPO_VAR_DIR", "var"))
    env["DAPO_VAR_DIR"] = str(var_dir if var_dir.is_absolute() else ROOT / var_dir)
    paths = [str(ROOT), str(ROOT / "platform")] + [p for p in env.get("PYTHONPATH", "").split(":") if p]
    env["PYTHONPATH"] = ":".join(paths)
    env["PATH"] = f"{VENV / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    env["VIRTUAL_ENV"] = str(VENV)
    env.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env["PYTHONUNBUFFERED"] = "1"
    # Compiled bytecode kept under var/pycache, even where PYTHONDONTWRITEBYTECODE is set (as in our
    # Dockerfile and on the machines this project is tested on): the suite and the stack start hundreds of
    # Python processes (test workers, Celery workers, Ray actors, CLIs), and without a cache each one
    # compiles every module it imports again: importing torch, transformers, ray and Django took 8.4 s of
    # CPU, 3.8 s from the cache.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYTHONPYCACHEPREFIX", str(Path(env["DAPO_VAR_DIR"]) / "pycache"))
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev", action="store_true", help="also install the dev/test tools")
    args = parser.parse_args()
    print(ensure_venv(dev=args.dev))


if __name__ == "__main__":
    main()
