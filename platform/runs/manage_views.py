"""Pages that manage runs: edit (name, tags, notes), archive, share and delete a run; saved views of the
runs list; saved comparisons (their own URL, shared read-only). Rules: runs.access; validation:
runs.manage. Every form answers a mistake with a message and changes nothing."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.models import Group
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from runs import access, manage
from runs.compare import CompareError, compare_context, parse_ids, script_json
from runs.listing import ARCHIVED
from runs.models import SavedComparison, SavedView
from runs.run_filter import FilterError, parse, parse_columns, parse_sort

MAX_SAVED = 200
"""Saved views (or comparisons) per user."""


def _form_errors(request: HttpRequest, what: str, errors: dict[str, str]) -> None:
    messages.error(request, f"{what}: " + "; ".join(f"{k.replace('_', ' ')} {v}" for k, v in errors.items()))


@require_POST
def run_edit(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run page's "Edit" form: name, tags (comma-separated) and notes, all at once."""
    run = access.run_for(request.user, run_id, write=True)
    body = {k: request.POST[k] for k in ("name", "tags", "notes") if k in request.POST}
    changes, errors = manage.validate_changes(run, body)
    if errors:
        _form_errors(request, "Not saved", errors)
    else:
        manage.apply_changes(run, changes)
        messages.info(request, "Saved.")
    return redirect("runs:detail", run_id=run.pk)


@require_POST
def run_archive(request: HttpRequest, run_id: int) -> HttpResponse:
    run = access.run_for(request.user, run_id, write=True)
    archive = request.POST.get("archived", "true") != "false"
    manage.apply_changes(run, {"archived": archive})
    messages.info(
        request,
        "Archived: the runs list hides it unless you show archived runs." if archive else "Restored.",
    )
    return redirect("runs:detail", run_id=run.pk)


@require_POST
def run_share(request: HttpRequest, run_id: int) -> HttpResponse:
    """Users (comma-separated usernames) and groups who may read the run; replaces the current lists."""
    run = access.run_for(request.user, run_id, write=True)
    body = {"shared_users": request.POST.get("users", ""), "shared_groups": request.POST.getlist("groups")}
    changes, errors = manage.validate_changes(run, body)
    if errors:
        _form_errors(request, "Not shared", errors)
    else:
        manage.apply_changes(run, changes)
        who = [
            *manage.sharing(run)["shared_users"],
            *(f"group {g}" for g in manage.sharing(run)["shared_groups"]),
        ]
        messages.info(
            request, f"Shared read-only with {', '.join(who)}." if who else "Private: shared with no one."
        )
    return redirect("runs:detail", run_id=run.pk)


@require_http_methods(["GET", "POST"])
def run_delete(request: HttpRequest, run_id: int) -> HttpResponse:
    """GET: what deleting removes, and a form to confirm by typing the run's name. POST: delete."""
    run = access.run_for(request.user, run_id, write=True, related=("owner",))
    summary = manage.deletion_summary(run)
    if request.method == "POST":
        if request.POST.get("confirm", "").strip() != run.name.strip():
            context = {"run": run, "summary": summary, "error": "Type the run's name exactly to confirm."}
            return render(request, "runs/delete.html", context, status=400)
        manage.delete_run(run)
        messages.info(request, f"Deleted run #{run_id} {run.name!r} with its data and files.")
        return redirect("runs:list")
    return render(request, "runs/delete.html", {"run": run, "summary": summary})


# ---- saved views of the runs list -------------------------------------------------------------------


@require_POST
def view_save(request: HttpRequest) -> HttpResponse:
    """Save the list's current filter, sort, columns and archive state under a name (same name: replaced)."""
    name = request.POST.get("name", "").strip()
    fields = {k: request.POST.get(k, "") for k in ("filter", "sort", "columns", "archived")}
    problems: dict[str, str] = {}
    if not name or len(name) > 100 or any(ord(c) < 32 for c in name):
        problems["name"] = "must be 1 to 100 characters of text"
    try:
        parse(fields["filter"])
        sort = fields["sort"].strip()
        if sort:
            parse_sort(sort)
        columns = parse_columns(fields["columns"])
    except FilterError as e:
        problems["view"] = str(e)
        columns, sort = [], ""
    if (fields["archived"] or "active") not in ARCHIVED:
        problems["archived"] = f"must be one of {', '.join(ARCHIVED)}"
    existing = SavedView.objects.filter(owner=request.user)
    if not existing.filter(name=name).exists() and existing.count() >= MAX_SAVED:
        problems["name"] = f"you have {MAX_SAVED} saved views: delete one first"
    if problems:
        _form_errors(request, "View not saved", problems)
        return redirect(f"{reverse('runs:list')}?{urlencode(fields)}")
    view, _ = SavedView.objects.update_or_create(
        owner=request.user, name=name,
        defaults={"filter": fields["filter"].strip(), "sort": sort, "columns": columns,
                  "archived": fields["archived"] or "active"},
    )  # fmt: skip
    messages.info(request, f"Saved the view {name!r}.")
    return redirect(f"{reverse('runs:list')}?{urlencode(view.query())}")


@require_POST
def view_delete(request: HttpRequest, view_id: int) -> HttpResponse:
    deleted, _ = SavedView.objects.filter(owner=request.user, pk=view_id).delete()
    messages.info(request, "View deleted." if deleted else "No such view of yours.")
    return redirect("runs:list")


def saved_views(user: Any) -> list[dict[str, Any]]:
    return [{"id": v.pk, "name": v.name, "url": f"{reverse('runs:list')}?{urlencode(v.query())}"}
            for v in SavedView.objects.filter(owner=user)[:MAX_SAVED]]  # fmt: skip


# ---- saved comparisons --------------------------------------------------------------------------------


@require_POST
def comparison_save(request: HttpRequest) -> HttpResponse:
    """The compare page's "Save comparison": its runs and settings under a name, with a URL of its own."""
    post = request.POST
    name = post.get("name", "").strip()
    back = f"{reverse('runs:compare')}?{urlencode({'ids': post.get('ids', '')})}"
    problems: dict[str, str] = {}
    if not name or len(name) > 200 or any(ord(c) < 32 for c in name):
        problems["name"] = "must be 1 to 200 characters of text"
    try:
        ids = parse_ids(post.get("ids"))
    except CompareError as e:
        problems["ids"], ids = e.message, []
    runs = {r.pk: r for r in access.readable_runs(request.user).filter(pk__in=[i for i in ids if i < 2**63])}
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
    if SavedComparison.objects.filter(owner=request.user).count() >= MAX_SAVED:
        problems["name"] = f"you have {MAX_SAVED} saved comparisons: delete one first"
    if problems:
        _form_errors(request, "Comparison not saved", problems)
        return redirect(back)
    with transaction.atomic():
        saved = SavedComparison.objects.create(
            owner=request.user, name=name, run_ids=ids, metrics=metrics, smoothing=smoothing, x=x, by=by
        )
        saved.runs.set([runs[i] for i in ids])
    messages.info(request, f"Saved the comparison {name!r}: this page's address is its link.")
    return redirect(saved.get_absolute_url())


@require_GET
def saved_comparison(request: HttpRequest, comparison_id: int) -> HttpResponse:
    """A saved comparison: its runs (those this user may read) with its settings."""
    saved = access.comparison_for(request.user, comparison_id)
    runs_by_id = {r.pk: r for r in access.readable_runs(request.user).filter(saved_comparisons=saved)}
    runs = [runs_by_id[i] for i in saved.run_ids if i in runs_by_id]
    hidden = len(saved.run_ids) - len(runs)
    if not runs:
        context = {"error": "None of this comparison's runs is visible to you (deleted, or not shared)."}
        return render(request, "runs/compare.html", context, status=404)
    metrics = request.GET.get("metrics") or saved.metrics or None  # the page's controls rewrite ?metrics=
    context = compare_context(runs, metrics, {"ids": ",".join(str(r.pk) for r in runs)})
    context |= {"saved": saved, "hidden_runs": hidden, "can_share": saved.owner_id == request.user.pk
                or request.user.is_superuser, "all_groups": Group.objects.order_by("name"),
                "shared_user_names": ", ".join(u.get_username() for u in saved.shared_users.all()),
                "shared_group_names": [g.name for g in saved.shared_groups.all()]}  # fmt: skip
    context["page_data"]["saved"] = {"id": saved.pk, "name": saved.name, **{k: str(v) for k, v in
                                     saved.settings().items() if k != "metrics"}}  # fmt: skip
    context["data_json"] = script_json(context["page_data"])
    return render(request, "runs/compare.html", context)


@require_POST
def comparison_share(request: HttpRequest, comparison_id: int) -> HttpResponse:
    saved = access.comparison_for(request.user, comparison_id, write=True)
    users, user_problem = manage.resolve_users(request.POST.get("users", ""), saved.owner)
    groups, group_problem = manage.resolve_groups(request.POST.getlist("groups"))
    if user_problem or group_problem:
        problems = {"users": user_problem or "", "groups": group_problem or ""}
        _form_errors(request, "Not shared", {k: v for k, v in problems.items() if v})
    else:
        with transaction.atomic():
            saved.shared_users.set(users)
            saved.shared_groups.set(groups)
        messages.info(request, "Shared read-only (with the runs in it that you own)." if users or groups
                      else "Private: shared with no one.")  # fmt: skip
    return redirect(saved.get_absolute_url())


@require_POST
def comparison_delete(request: HttpRequest, comparison_id: int) -> HttpResponse:
    saved = access.comparison_for(request.user, comparison_id, write=True)
    saved.delete()
    messages.info(request, f"Deleted the saved comparison {saved.name!r} (its runs stay).")
    return redirect("runs:list")


def saved_comparisons(user: Any) -> list[dict[str, Any]]:
    return [{"id": c.pk, "name": c.name, "url": c.get_absolute_url(), "owner": c.owner.get_username(),
             "mine": c.owner_id == user.pk}
            for c in access.readable_comparisons(user).select_related("owner")[:MAX_SAVED]]  # fmt: skip
