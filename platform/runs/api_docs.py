"""GET /api/docs/: the API's reference as a page, built from the same OpenAPI schema as /api/schema/.

Rendered on the server from drf-spectacular's schema (no script, no CDN: the site's Content-Security-Policy
allows scripts from itself only), and only for a logged-in user, like the schema itself.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

METHODS = ("get", "post", "put", "patch", "delete")


@require_GET
def api_docs(request: HttpRequest) -> HttpResponse:
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    operations = [
        _operation(path, method, op, schema)
        for path, item in schema.get("paths", {}).items()
        for method, op in item.items()
        if method in METHODS
    ]
    return render(request, "runs/api_docs.html", {"info": schema.get("info", {}), "operations": operations})


def _operation(path: str, method: str, op: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    return {
        "id": f"{method}-{path}".replace("/", "-").replace("{", "").replace("}", "").strip("-"),
        "method": method.upper(),
        "path": path,
        "description": op.get("description", ""),
        "parameters": [
            {
                "name": p.get("name"),
                "in": p.get("in"),
                "required": p.get("required", False),
                "type": _type(p.get("schema", {}), schema),
                "description": p.get("description", ""),
            }
            for p in op.get("parameters", [])
        ],
        "body": _fields(_resolve(body, schema), schema),
        "responses": sorted(op.get("responses", {})),
    }


def _resolve(node: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref", "")
    if ref.startswith("#/components/schemas/"):
        return schema.get("components", {}).get("schemas", {}).get(ref.rsplit("/", 1)[1], {})
    return node


def _fields(node: dict[str, Any], schema: dict[str, Any]) -> list[dict[str, Any]]:
    required = set(node.get("required", []))
    return [
        {
            "name": name,
            "type": _type(prop, schema),
            "required": name in required,
            "description": prop.get("description", ""),
        }
        for name, prop in node.get("properties", {}).items()
    ]


def _type(node: dict[str, Any], schema: dict[str, Any]) -> str:
    node = _resolve(node, schema)
    if "enum" in node:
        return " | ".join(map(str, node["enum"]))
    kind = node.get("type", "object")
    return f"{kind} ({node['format']})" if "format" in node else str(kind)
