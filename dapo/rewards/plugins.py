"""Reward plugins: rewards named ``package.module:callable`` that live outside this package.

A user may only name a callable the administrator allowed, found in one of two places:

1. an entry point of an installed distribution in the group ``dapo.rewards``, e.g. in its
   pyproject.toml: ``[project.entry-points."dapo.rewards"] exact = "my_rewards.exact:ExactReward"``
   (named by its value ``my_rewards.exact:ExactReward`` or by its name ``exact``);
2. a module file under a folder listed in ``DAPO_REWARD_PLUGINS`` (folders separated by ``os.pathsep``):
   ``my_rewards.exact:ExactReward`` is allowed when ``<folder>/my_rewards/exact.py`` defines
   ``ExactReward`` at top level.

Checking a name (config validation, the web process) never imports anything: it reads entry point
metadata, looks for the file and parses it with ``ast`` (which runs no code). Only :func:`load_plugin`,
called where rewards are computed, imports the module, and only after the same check.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

from dapo.rewards.base import RewardError

GROUP = "dapo.rewards"
"""The entry point group of reward plugins."""
FOLDERS_ENV = "DAPO_REWARD_PLUGINS"
"""Environment variable: folders whose modules may be named as rewards (separated by os.pathsep)."""
PLUGIN_NAME = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
MAX_SOURCE_BYTES = 1_000_000
MAX_LISTED_FILES = 200


def is_plugin_name(name: str) -> bool:
    """Whether a reward name asks for a plugin (it has a colon) rather than a built-in."""
    return ":" in name


def folders() -> list[Path]:
    """The allowlisted plugin folders (absolute, existing) from DAPO_REWARD_PLUGINS."""
    raw = os.environ.get(FOLDERS_ENV, "")
    found = [Path(p).expanduser().resolve() for p in raw.split(os.pathsep) if p.strip()]
    return [p for p in found if p.is_dir()]


def entry_points() -> dict[str, str]:
    """{entry point name: "module:callable"} of the group dapo.rewards, read from metadata only."""
    return {
        ep.name: ep.value
        for ep in importlib.metadata.entry_points(group=GROUP)
        if PLUGIN_NAME.match(ep.value)
    }


def check(name: str) -> str | None:
    """Why ``name`` may not be used as a reward plugin, or None when it is allowed. Imports nothing."""
    eps = entry_points()
    if name in eps or name in eps.values():
        return None
    if not PLUGIN_NAME.match(name):
        return f"a reward plugin is named package.module:callable, got {name!r:.80}"
    module, _, attr = name.partition(":")
    for folder in folders():
        source = _module_file(folder, module)
        if source is not None:
            if attr in _top_level_names(source):
                return None
            return f"{module} (in {folder}) defines no top-level {attr}"
    return (
        f"{name!r:.80} is not an allowed reward plugin: plugins are entry points in the group {GROUP} "
        f"or modules in the folders named by {FOLDERS_ENV}; allowed now: {', '.join(available()) or 'none'}"
    )


def available() -> list[str]:
    """Every plugin name a config may use now: entry point values, and each public top-level class or
    function of the modules in the plugin folders (those in ``__all__`` when the module has one)."""
    names = sorted(set(entry_points().values()))
    for folder in folders():
        files = sorted(p for p in folder.rglob("*.py") if "test" not in p.name)[:MAX_LISTED_FILES]
        for path in files:
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if parts and all(p.isidentifier() for p in parts):
                names += [f"{'.'.join(parts)}:{n}" for n in _public_callables(path)]
    return names


def describe(name: str) -> str:
    """A plugin's help text without importing it: the docstring of its class or function in a plugin
    folder, or the distribution that registered the entry point."""
    module, _, attr = name.partition(":")
    for folder in folders():
        source = _module_file(folder, module)
        if source is not None:
            node = _parse(source).get(attr)
            doc = ast.get_docstring(node) if isinstance(node, ast.ClassDef | ast.FunctionDef) else None
            return " ".join((doc or f"plugin from {folder}").split())
    for ep in importlib.metadata.entry_points(group=GROUP):
        if name in (ep.name, ep.value):
            dist = ep.dist
            return f"plugin {ep.value} from {dist.name if dist else 'an installed package'}"
    return ""


def load_plugin(name: str) -> Any:
    """The plugin's reward: the class instantiated with no arguments, or the function as it is.
    Checked against the allowlist first; a module file is imported from its plugin folder only."""
    problem = check(name)
    if problem is not None:
        raise RewardError(f"reward {name!r:.80}: {problem}")
    for ep in importlib.metadata.entry_points(group=GROUP):
        if name in (ep.name, ep.value):
            return _instance(ep.load(), name)
    module, _, attr = name.partition(":")
    folder = next(f for f in folders() if _module_file(f, module) is not None)
    return _instance(getattr(_import_from(folder, module), attr), name)


def _instance(obj: Any, name: str) -> Any:
    reward = obj() if isinstance(obj, type) else obj
    if not callable(reward) and not hasattr(reward, "score_batch"):
        raise RewardError(f"reward plugin {name}: {type(reward).__name__} is not callable")
    return reward


def _module_file(folder: Path, module: str) -> Path | None:
    base = folder.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file() and path.resolve().is_relative_to(folder):
            return path
    return None


def _parse(path: Path) -> dict[str, ast.AST]:
    """Top-level definitions of a module file: {name: node}; empty when it is too big or invalid."""
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            return {}
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return {}
    defs: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            defs[node.name] = node
        elif isinstance(node, ast.Assign):
            defs.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.ImportFrom | ast.Import):
            defs.update({(a.asname or a.name).split(".")[0]: node for a in node.names})
    return defs


def _top_level_names(path: Path) -> set[str]:
    return set(_parse(path))


def _public_callables(path: Path) -> list[str]:
    defs = _parse(path)
    exported = defs.get("__all__")
    if isinstance(exported, ast.Assign) and isinstance(exported.value, ast.List | ast.Tuple):
        return [e.value for e in exported.value.elts if isinstance(e, ast.Constant) and e.value in defs]
    return [
        n
        for n, node in defs.items()
        if not n.startswith("_") and isinstance(node, ast.ClassDef | ast.FunctionDef)
    ]


def _import_from(folder: Path, module: str) -> Any:
    """Import ``module`` from ``folder`` only: a same-named module already loaded from elsewhere (the
    standard library, site-packages) is refused, never used."""
    top = module.split(".")[0]
    loaded = sys.modules.get(top)
    if loaded is None:
        spec = importlib.machinery.PathFinder.find_spec(top, [str(folder)])
        if spec is None or spec.loader is None:
            raise RewardError(f"reward plugin module {top} is not importable from {folder}")
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[top] = loaded
        try:
            spec.loader.exec_module(loaded)
        except BaseException:
            del sys.modules[top]
            raise
    where = getattr(loaded, "__file__", None) or next(iter(getattr(loaded, "__path__", [])), "")
    if not where or not Path(where).resolve().is_relative_to(folder):
        raise RewardError(f"reward plugin module {top} is shadowed by {where or 'a built-in module'}")
    return importlib.import_module(module)
