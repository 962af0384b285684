"""Pages that manage runs: edit (name, tags, notes), archive, share and delete a run; saved views of the
runs list (saved comparisons: compare.saved). Rules: runs.access; validation: runs.manage. Every form
answers a mistake with a message and changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from runs import access, manage
from runs.manage import MAX_SAVED
from runs.models import RunGone, SavedView


def _user(request: HttpRequest) -> Any:
    """The logged-in user (the login middleware lets no anonymous visitor reach these views)."""
    return request.user


def run_action(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A page action on one run: when the run is deleted while it works (another tab's Delete), the
    answer is the 404 page with a message that says so (runs.models.RunGone), never a 500."""

    @wraps(view)
    def wrapped(request: HttpRequest, run_id: int) -> HttpResponse:
        try:
            return view(request, run_id)
        except RunGone as gone:
            messages.error(request, str(gone))
            return render(request, "404.html", status=404)

    return wrapped


def form_errors(request: HttpRequest, what: str, errors: dict[str, str]) -> None:
    messages.error(request, f"{what}: " + "; ".join(f"{k.replace('_', ' ')} {v}" for k, v in errors.items()))


@require_POST
@run_action
def run_edit(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run page's "Edit" form: name, tags (comma-separated) and notes, all at once."""
    run = access.run_for(request, run_id, write=True)
    body = {k: request.POST[k] for k in ("name", "tags", "notes") if k in request.POST}
    changes, errors = manage.validate_changes(run, body, request.user)
    if errors:
        form_errors(request, "Not saved", errors)
    else:
        manage.apply_changes(run, changes)
        messages.info(request, "Saved.")
    return redirect("runs:detail", run_id=run.pk)


@require_POST
@run_action
def run_archive(request: HttpRequest, run_id: int) -> HttpResponse:
    run = access.run_for(request, run_id, write=True)
    archive = request.POST.get("archived", "true") != "false"
    manage.apply_changes(run, {"archived": archive})
    messages.info(
        request,
        "Archived: the runs list hides it unless you show archived runs." if archive else "Restored.",
    )
    return redirect("runs:detail", run_id=run.pk)


@require_POST
@run_action
def run_share(request: HttpRequest, run_id: int) -> HttpResponse:
    """Users (comma-separated usernames) and groups who may read the run; replaces the current lists."""
    run = access.run_for(request, run_id, write=True)
    body = {"shared_users": request.POST.get("users", ""), "shared_groups": request.POST.getlist("groups")}
    changes, errors = manage.validate_changes(run, body, request.user)
    if errors:
        form_errors(request, "Not shared", errors)
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
@run_action
def run_delete(request: HttpRequest, run_id: int) -> HttpResponse:
    """GET: what deleting removes, and a form to confirm by typing the run's number (or its name: a ladder's
    or a sweep's generated names hold a "·" no keyboard has). POST: delete."""
    run = access.run_for(request, run_id, write=True)
    summary = manage.deletion_summary(run)
    if request.method == "POST":
        if not manage.delete_confirmed(run, request.POST.get("confirm", "")):
            context = {
                "run": run,
                "summary": summary,
                "error": f"Type the run's number, {run.pk}, to confirm.",
            }
            return render(request, "runs/delete.html", context, status=400)
        manage.delete_run(run)
        messages.info(request, f"Deleted run #{run_id} {run.name!r} with its data and files.")
        return redirect("runs:list")
    return render(request, "runs/delete.html", {"run": run, "summary": summary})


# ---- saved views of the runs list -------------------------------------------------------------------


@require_POST
def view_save(request: HttpRequest) -> HttpResponse:
    """Save the list's current filter, sort, columns and archive state under a name (same name: replaced;
    the checks: runs.manage.validate_view, as POST /api/views/)."""
    fields = {k: request.POST.get(k, "") for k in ("filter", "sort", "columns", "archived")}
    values, problems = manage.validate_view(_user(request), {**fields, "name": request.POST.get("name", "")})
    if problems:
        form_errors(request, "View not saved", problems)
        return redirect(f"{reverse('runs:list')}?{urlencode(fields)}")
    view, _ = manage.save_view(_user(request), values)
    messages.info(request, f"Saved the view {values['name']!r}.")
    return redirect(view_url(view))


@require_POST
def view_delete(request: HttpRequest, view_id: int) -> HttpResponse:
    deleted, _ = SavedView.objects.filter(owner=_user(request), pk=view_id).delete()
    messages.info(request, "View deleted." if deleted else "No such view of yours.")
    return redirect("runs:list")


def view_url(view: SavedView) -> str:
    """The runs list showing this view."""
    return f"{reverse('runs:list')}?{urlencode(view.query())}"


def saved_views(user: Any) -> list[dict[str, Any]]:
    return [
        {"id": v.pk, "name": v.name, "url": view_url(v)}
        for v in SavedView.objects.filter(owner=user)[:MAX_SAVED]
    ]


def saved_comparisons(user: Any) -> list[dict[str, Any]]:
    """The saved comparisons this user may open (theirs and those shared with them), for the runs list."""
    return [
        {
            "id": c.pk,
            "name": c.name,
            "url": c.get_absolute_url(),
            "owner": c.owner.get_username(),
            "mine": c.owner_id == user.pk,
        }
        for c in access.readable_comparisons(user).select_related("owner")[:MAX_SAVED]
    ]
