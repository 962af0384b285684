"""Field documentation of the run config, read from the source: the CLI's ``--help`` and ``--reference``,
the web form's help texts and docs/config-reference.md all come from the attribute docstrings."""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import types
import typing
from typing import Any, Literal

from dapo.runconfig.run import SECTIONS, RunConfig


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a config dataclass: {field name: docstring}."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for prev, node in zip(body, body[1:], strict=False):
        if (
            isinstance(prev, ast.AnnAssign)
            and isinstance(prev.target, ast.Name)
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            docs[prev.target.id] = " ".join(node.value.value.split())
    return docs


def describe_fields() -> list[dict[str, Any]]:
    """Every field of RunConfig as {name, section, type, default, choices, help}: for forms and --help."""
    defaults = RunConfig().flat()
    out: list[dict[str, Any]] = []
    for section, cls in [*SECTIONS.items(), ("", RunConfig)]:
        hints = typing.get_type_hints(cls)
        docs = field_docs(cls)
        for f in dataclasses.fields(cls):
            if section == "" and f.name in SECTIONS:
                continue
            name = f"{section}.{f.name}" if section else f.name
            tp = hints[f.name]
            out.append(
                {
                    "name": name,
                    "section": section or "run",
                    "type": type_name(tp),
                    "choices": list(typing.get_args(tp)) if typing.get_origin(tp) is Literal else None,
                    "nullable": type(None) in typing.get_args(tp),
                    "default": defaults[name],
                    "help": docs.get(f.name, ""),
                }
            )
    return out


def type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "choice"
    if origin is tuple and typing.get_args(tp)[-1] is Ellipsis:
        return "list"
    if origin is tuple:
        return "pair"
    if origin in (typing.Union, types.UnionType):
        return type_name(next(a for a in typing.get_args(tp) if a is not type(None)))
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(tp, str(tp))
