"""Model pages: the catalog's base models with the register form, and one model inspected (shapes,
vocabulary, dtype, weights, chat template, the runs of yours that used it), with links that start a run
or an evaluation from it. Models are shared catalog entries like datasets; run lists count only the runs
the user can see."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods
from runs.access import visible_runs

from catalog.chat import TemplateError, load_chat_template
from catalog.forms import ModelRegisterForm
from catalog.model_info import inspect_model
from catalog.models import BaseModel
from catalog.paths import resolve

EXAMPLE_MESSAGES = [{"role": "user", "content": "What is 17 + 25? End with 'Answer: N'."}]
"""The message the model page renders through the chat template, to show what the policy is given."""


def runs_using_model(model: BaseModel, user: Any) -> Any:
    """The runs this user can see that trained or evaluated this model (picked, or by its folder)."""
    return (
        visible_runs(user)
        .filter(Q(base_model=model) | Q(config__model__path=model.path))
        .only("id", "name", "status", "kind", "step", "total_steps", "created_at", "latest_metrics")
        .order_by("-id")
    )


@require_http_methods(["GET", "POST"])
def model_list(request: HttpRequest) -> HttpResponse:
    form = ModelRegisterForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        model = form.save(request.user)
        messages.success(
            request, f"Registered {model.name}: {model.architecture}, {model.size_label} parameters."
        )
        return redirect("models:detail", model_id=model.pk)
    models = list(BaseModel.objects.select_related("created_by"))
    for model in models:
        model.run_count = runs_using_model(model, request.user).count()  # type: ignore[attr-defined]
    context = {"models": models, "form": form, "roots": [str(r) for r in _roots()]}
    return render(request, "catalog/models.html", context, status=400 if form.errors else 200)


@require_GET
def model_detail(request: HttpRequest, model_id: int) -> HttpResponse:
    model = get_object_or_404(BaseModel.objects.select_related("created_by"), pk=model_id)
    folder = resolve(model.path)
    present = folder.is_dir()
    details = inspect_model(folder) if present else dict(model.details or {})
    template: dict[str, Any] = {"source": "", "text": "", "example": "", "error": ""}
    if present:
        try:
            chat = load_chat_template(folder)
            template |= {"source": chat.source, "text": chat.template or ""}
            template["example"] = chat.render(EXAMPLE_MESSAGES)
            template["special_tokens"] = chat.special_tokens
        except TemplateError as e:
            template["error"] = str(e)
    context = {
        "model": model,
        "present": present,
        "details": details,
        "template": template,
        "example_message": EXAMPLE_MESSAGES[0]["content"],
        "runs": list(runs_using_model(model, request.user)[:100]),
    }
    return render(request, "catalog/model_detail.html", context)


def _roots() -> list[Any]:
    from django.conf import settings

    return list(settings.DAPO_MODEL_ROOTS)
