"""Saved comparisons: the compare page's runs, metrics, smoothing and axes under a name, at
``/runs/compare/saved/<id>/``, shared read-only with users or groups (the rules: runs.access; the model:
runs.models.SavedComparison). Every form answers a mistake with a message and changes nothing."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from core.params import DB_ID_MAX
from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from runs import access, manage
from runs.manage_views import MAX_SAVED, form_errors
from runs.models import SavedComparison
from runs.names import name_problem

from compare.views import CompareError, compare_context, parse_ids, script_json


def _user(request: HttpRequest) -> Any:
    """The logged-in user (the login middleware lets no anonymous visitor reach these views)."""
    return request.user


@require_POST
def comparison_save(request: HttpRequest) -> HttpResponse:
    """The compare page's "Save comparison": its runs and settings under a name, with a URL of its own."""
    post, user = request.POST, _user(request)
    name = post.get("name", "").strip()
    back = f"{reverse('compare:compare')}?{urlencode({'ids': post.get('ids', '')})}"
    problems: dict[str, str] = {}
    if not name or len(name) > 200:
        problems["name"] = "must be 1 to 200 characters of text"
    elif problem := name_problem(name):
        problems["name"] = problem
    try:
        ids = parse_ids(post.get("ids"))
    except CompareError as e:
        problems["ids"], ids = e.message, []
    runs = {
        r.pk: r for r in access.visible_runs(request.user).filter(pk__in=[i for i in ids if i <= DB_ID_MAX])
    }
    if ids and len(runs) != len(ids):
        problems["ids"] = "a run is missing or not one you may see"
    metrics = [m.strip() for m in post.get("metrics", "").split(",") if m.strip()][:40]
    if any(len(m) > 128 or "\x00" in m for m in metrics):
        problems["metrics"] = "a metric name is too long"
    try:
        smoothing = float(post.get("smooth", "0.6"))
        if not 0 <= smoothing <= 0.99:
            raise ValueError
    except ValueError:
        problems["smooth"], smoothing = "must be a number from 0 to 0.99", 0.6
    x, by = post.get("x", "step"), post.get("by", "none")
    if x not in ("step", "wall", "tokens"):
        problems["x"] = "must be step, wall or tokens"
    if by not in ("none", "preset", "seed", "group"):
        problems["by"] = "must be none, preset, seed or group"
    if SavedComparison.objects.filter(owner=user).count() >= MAX_SAVED:
        problems["name"] = f"you have {MAX_SAVED} saved comparisons: delete one first"
    if problems:
        form_errors(request, "Comparison not saved", problems)
        return redirect(back)
    with transaction.atomic():
        saved = SavedComparison.objects.create(
            owner=user, name=name, run_ids=ids, metrics=metrics, smoothing=smoothing, x=x, by=by
        )
        saved.runs.set([runs[i] for i in ids])
    messages.info(request, f"Saved the comparison {name!r}: this page's address is its link.")
    return redirect(saved.get_absolute_url())


@require_GET
def saved_comparison(request: HttpRequest, comparison_id: int) -> HttpResponse:
    """A saved comparison: its runs (those this user may read) with its settings."""
    saved = access.comparison_for(request.user, comparison_id)
    runs_by_id = {r.pk: r for r in access.visible_runs(request.user).filter(saved_comparisons=saved)}
    runs = [runs_by_id[i] for i in saved.run_ids if i in runs_by_id]
    hidden = len(saved.run_ids) - len(runs)
    if not runs:
        missing = {"error": "None of this comparison's runs is visible to you (deleted, or not shared)."}
        return render(request, "compare/compare.html", missing, status=404)
    metrics = request.GET.get("metrics") or saved.metrics or None  # the page's controls rewrite ?metrics=
    context = compare_context(runs, metrics, {"ids": ",".join(str(r.pk) for r in runs)})
    context |= {
        "saved": saved,
        "hidden_runs": hidden,
        "can_share": saved.owner_id == request.user.pk or request.user.is_superuser,
        **manage.share_choices(request.user, saved.shared_groups.all()),
        "shared_user_names": ", ".join(u.get_username() for u in saved.shared_users.all()),
        "shared_group_names": [g.name for g in saved.shared_groups.all()],
    }
    context["page_data"]["saved"] = {
        "id": saved.pk,
        "name": saved.name,
        **{k: str(v) for k, v in saved.settings().items() if k != "metrics"},
    }
    context["data_json"] = script_json(context["page_data"])
    return render(request, "compare/compare.html", context)


@require_POST
def comparison_share(request: HttpRequest, comparison_id: int) -> HttpResponse:
    saved = access.comparison_for(request.user, comparison_id, write=True)
    known = access.shareable_users(request.user, already=saved.shared_users.values("pk"))
    users, user_problem = manage.resolve_users(request.POST.get("users", ""), saved.owner, known)
    known_groups = access.shareable_groups(request.user, already=saved.shared_groups.values("pk"))
    groups, group_problem = manage.resolve_groups(request.POST.getlist("groups"), known_groups)
    if user_problem or group_problem:
        problems = {"users": user_problem or "", "groups": group_problem or ""}
        form_errors(request, "Not shared", {k: v for k, v in problems.items() if v})
    else:
        with transaction.atomic():
            saved.shared_users.set(users)
            saved.shared_groups.set(groups)
        messages.info(
            request,
            "Shared read-only (with the runs in it that you own)."
            if users or groups
            else "Private: shared with no one.",
        )
    return redirect(saved.get_absolute_url())


@require_POST
def comparison_delete(request: HttpRequest, comparison_id: int) -> HttpResponse:
    saved = access.comparison_for(request.user, comparison_id, write=True)
    saved.delete()
    messages.info(request, f"Deleted the saved comparison {saved.name!r} (its runs stay).")
    return redirect("runs:list")
