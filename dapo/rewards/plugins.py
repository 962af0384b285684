"""Reward plugins: rewards named ``package.module:callable`` that live outside this package.

A user may only name a callable the administrator allowed, found in one of two places:

1. an entry point of an installed distribution in the group ``dapo.rewards``, e.g. in its
   pyproject.toml: ``[project.entry-points."dapo.rewards"] exact = "my_rewards.exact:ExactReward"``
   (named by its value ``my_rewards.exact:ExactReward`` or by its name ``exact``);
2. a module file under a folder listed in ``DAPO_REWARD_PLUGINS`` (folders separated by ``os.pathsep``):
   ``my_rewards.exact:ExactReward`` is allowed when ``<folder>/my_rewards/exact.py`` defines the class
   or function ``ExactReward`` at top level and lists it (in its ``__all__``, or public when it has none).
   Nothing else of the module is a reward: not what it imports (``re``, ``subprocess.run``), a constant
   or a helper its ``__all__`` leaves out.

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
MAX_NAMED = 20
"""An error message names at most this many allowed plugins."""


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
    """Why ``name`` may not be used as a reward plugin, or None when it is allowed. Imports nothing. A
    folder plugin must be what :func:`available` offers; the error lists that."""
    eps = entry_points()
    if name in eps or name in eps.values():
        return None
    if not PLUGIN_NAME.match(name):
        return f"a reward plugin is named package.module:callable, got {name!r:.80}"
    module, _, attr = name.partition(":")
    found = _find_module(module)
    if found is not None:
        folder, source = found
        if attr in _listed_callables(source):
            return None
        return f"{name} is not a reward that {module} (in {folder}) lists; allowed: {_allowed_text()}"
    return (
        f"{name!r:.80} is not an allowed reward plugin: plugins are entry points in the group {GROUP} "
        f"or modules in the folders named by {FOLDERS_ENV}; allowed now: {_allowed_text()}"
    )


def available() -> list[str]:
    """Every plugin name a config may use now: entry point values, and each public top-level class or
    function of the modules in the plugin folders (those in ``__all__`` when the module has one). A module
    found in two folders is the first folder's, as the import finds it."""
    names = sorted(set(entry_points().values()))
    seen: set[str] = set()
    for folder in folders():
        for module, path in _folder_modules(folder):
            if module not in seen:
                seen.add(module)
                names += [f"{module}:{n}" for n in _listed_callables(path)]
    return names


def describe(name: str) -> str:
    """A plugin's help text without importing it: the docstring of its class or function in a plugin
    folder, or the distribution that registered the entry point."""
    module, _, attr = name.partition(":")
    found = _find_module(module)
    if found is not None:
        node = _parse(found[1]).get(attr)
        doc = ast.get_docstring(node) if isinstance(node, ast.ClassDef | ast.FunctionDef) else None
        return " ".join((doc or f"plugin from {found[0]}").split())
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
    found = _find_module(module)
    if found is None:  # removed since check() looked
        raise RewardError(f"reward plugin module {module} is in no folder of {FOLDERS_ENV}")
    obj = getattr(_import_from(found[0], module), attr)
    if getattr(obj, "__module__", None) != module:  # bound at run time to what the file did not define
        raise RewardError(f"reward plugin {name}: {attr} is not defined in {module}")
    return _instance(obj, name)


def _instance(obj: Any, name: str) -> Any:
    reward = obj() if isinstance(obj, type) else obj
    if not callable(reward) and not hasattr(reward, "score_batch"):
        raise RewardError(f"reward plugin {name}: {type(reward).__name__} is not callable")
    return reward


def _find_module(module: str) -> tuple[Path, Path] | None:
    """(folder, file) of ``module`` in the first plugin folder that holds it, as the import finds it."""
    for folder in folders():
        source = _module_file(folder, module)
        if source is not None:
            return folder, source
    return None


def _folder_modules(folder: Path) -> list[tuple[str, Path]]:
    """(dotted module name, file) of the modules a plugin folder offers; test files are left out."""
    files = sorted(p for p in folder.rglob("*.py") if _offered(p))[:MAX_LISTED_FILES]
    out = []
    for path in files:
        parts = path.relative_to(folder).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and all(p.isidentifier() for p in parts):
            out.append((".".join(parts), path))
    return out


def _offered(path: Path) -> bool:
    """Whether a file of a plugin folder offers rewards (a test module beside the plugins does not)."""
    return "test" not in path.name


def _allowed_text() -> str:
    names = available()
    shown = ", ".join(names[:MAX_NAMED]) + (
        f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else ""
    )
    return shown or "none"


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


def _listed_callables(path: Path) -> list[str]:
    """The rewards a plugin module lists: the classes and functions it defines at top level (not those it
    imports or assigns), public ones or those its ``__all__`` names; none for a test file."""
    if not _offered(path):
        return []
    defs = _parse(path)
    defined = [n for n, node in defs.items() if isinstance(node, ast.ClassDef | ast.FunctionDef)]
    exported = defs.get("__all__")
    if isinstance(exported, ast.Assign) and isinstance(exported.value, ast.List | ast.Tuple):
        listed = {e.value for e in exported.value.elts if isinstance(e, ast.Constant)}
        return [n for n in defined if n in listed]
    return [n for n in defined if not n.startswith("_")]


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
