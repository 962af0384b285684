"""The page that imports a finished verl run from uploaded files (runs.external_import): its metric
records (the file backend's JSONL or a console log), its rollout and validation dumps (``<step>.jsonl``)
and, optionally, its config (JSON or YAML). A bad file is a 400 page naming it and its line; nothing is
written."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from runs.external_import import MAX_FILE_BYTES, ImportProblem, VerlFiles, import_verl


def _text(upload: UploadedFile) -> str:
    if (upload.size or 0) > MAX_FILE_BYTES:
        raise ImportProblem([f"{upload.name}: larger than {MAX_FILE_BYTES // 2**20} MiB"])
    return upload.read().decode("utf-8", errors="replace")


def _config(upload: UploadedFile | None) -> dict[str, Any]:
    if upload is None:
        return {}
    text = _text(upload)
    kind = "YAML" if (upload.name or "").endswith((".yaml", ".yml")) else "JSON"
    try:
        if kind == "YAML":
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except ImportError:
        raise ImportProblem(
            [f"{upload.name}: reading YAML needs PyYAML on the server; upload JSON"]
        ) from None
    except Exception as e:  # json.JSONDecodeError, yaml.YAMLError: the file is not what it says
        raise ImportProblem([f"{upload.name}: not valid {kind}: {e}"]) from None
    if not isinstance(data, dict):
        raise ImportProblem([f"{upload.name}: the config must be a mapping"])
    return data


@require_http_methods(["GET", "POST"])
def import_page(request: HttpRequest) -> HttpResponse:
    context: dict[str, Any] = {"name": "", "problems": []}
    if request.method == "POST":
        name = request.POST.get("name", "").strip()
        context["name"] = name
        try:
            files = VerlFiles(
                metrics=[(f.name or "metrics", _text(f)) for f in request.FILES.getlist("metrics")],
                rollout=[(f.name or "", _text(f)) for f in request.FILES.getlist("rollout")],
                validation=[(f.name or "", _text(f)) for f in request.FILES.getlist("validation")],
                config=_config(request.FILES.get("config")),
            )
            if not (files.metrics or files.rollout or files.validation):
                raise ImportProblem(["choose the metric records or at least one dump"])
            run = import_verl(request.user, name, files)
        except ImportProblem as e:
            context["problems"] = e.problems
            return render(request, "runs/import.html", context, status=400)
        messages.info(request, f"Imported the verl run {run.name!r}: {run.step} steps.")
        return redirect("runs:detail", run_id=run.pk)
    return render(request, "runs/import.html", context)
