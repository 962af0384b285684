"""Print the installed distributions a requirements file needs, transitively (run by scripts/lock.py).

    VENV/bin/python scripts/lock_closure.py requirements.in

Runs inside the venv being locked (it reads that venv's metadata and needs `packaging`, which the
runtime tree always contains). Extras are followed (`psycopg[binary]` brings psycopg-binary); markers
are evaluated for this interpreter.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def top_level(path: Path) -> list[Requirement]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line and not line.startswith("-")]


def applies(requirement: Requirement, extras: set[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras | {""})


def closure(roots: list[Requirement]) -> dict[str, set[str]]:
    """Canonical name -> the extras asked of it, for every distribution reachable from `roots`."""
    seen: dict[str, set[str]] = {}
    todo = [req for req in roots if applies(req, set())]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        extras = set(requirement.extras)
        if name in seen and extras <= seen[name]:
            continue
        seen.setdefault(name, set()).update(extras)
        for line in metadata.distribution(requirement.name).requires or []:
            child = Requirement(line)
            if applies(child, seen[name]):
                todo.append(child)
    return seen


def main() -> None:
    for name in sorted(closure(top_level(Path(sys.argv[1])))):
        print(name)


if __name__ == "__main__":
    main()
