"""Managing a run: rename, tags, notes (markdown shown without raw HTML), archive, share, delete.

One validation serves the run page's forms and ``PATCH /api/runs/<id>/``; ``delete_run`` is the one way a
run is removed (page and API): a running run is cancelled first, then its rows (metrics, samples,
checkpoints, exports, shares) and its files (``DAPO_RUNS_DIR/<id>``, its log) go in one action.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models import QuerySet
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token

from dapo.runconfig import is_unicode, shown
from runs import access
from runs.configuring import validate_name
from runs.events import publish, status_event
from runs.listing import ARCHIVED
from runs.models import Run, RunGone, SavedView, Status
from runs.names import name_problem
from runs.run_filter import FilterError, parse, parse_columns, parse_sort
from runs.run_log import log_path

Errors = dict[str, str]
MAX_TAGS = 20
MAX_TAG_CHARS = 40
MAX_NOTES_CHARS = 20_000
MAX_SHARES = 100
SUGGESTED = 50
"""Usernames the share form suggests, at most."""
EDITABLE = ("name", "tags", "notes", "archived", "shared_users", "shared_groups")

LINK_SCHEMES = ("http", "https", "mailto")
"""Schemes a link in the notes may have (or none: a link within the site)."""
_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*):", re.IGNORECASE)


class _NotesMarkdown(MarkdownIt):
    """CommonMark with tables and strikethrough; raw HTML is escaped (``html`` off); a link whose target
    has another scheme (``javascript:``, ``data:``, ``file:``...) is left as text. markdown-it's own check
    lets ``data:image/...`` through."""

    def validateLink(self, url: str) -> bool:  # noqa: N802 (markdown-it's name)
        scheme = _SCHEME.match(url.strip())
        return scheme is None or scheme.group(1).lower() in LINK_SCHEMES


def _image_as_link(self: RendererHTML, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    """An image is drawn as a link to it, "image: <alt>", never loaded: whoever reads the notes would
    otherwise fetch what the writer chose (a tracking pixel elsewhere, a same-site URL with the reader's
    cookies). Inside a link it is the text alone (links do not nest)."""
    alt = escapeHtml(self.renderInlineAsText(tokens[idx].children or [], options, env))
    opened = sum(t.type == "link_open" for t in tokens[:idx]) - sum(
        t.type == "link_close" for t in tokens[:idx]
    )
    if opened > 0:
        return f"image: {alt}"
    href = escapeHtml(str(tokens[idx].attrGet("src") or ""))
    return f'<a class="md-image" href="{href}">image: {alt}</a>'


_MARKDOWN = _NotesMarkdown("js-default")
_MARKDOWN.add_render_rule("image", _image_as_link)


def render_notes(text: str) -> SafeString:
    """Markdown to HTML with every raw tag escaped and no image loaded: notes can never inject markup,
    script, or a request to another site."""
    return mark_safe(_MARKDOWN.render(text or ""))  # noqa: S308 (html=False: markdown-it escapes raw HTML)


def _text_errors(field: str, value: Any, limit: int, *, multiline: bool = False) -> str | None:
    """Why ``value`` cannot be a tag (one line: runs.names) or the notes (lines of text), or None."""
    if not isinstance(value, str):
        return f"must be a string, got {shown(value)}"
    if len(value) > limit:
        return f"is too long ({limit} characters at most)"
    if not multiline:
        return name_problem(value)
    if any(ord(c) < 32 and c not in "\n\r\t" for c in value) or not is_unicode(value):
        return "must be text without control characters"
    return None


def clean_tags(raw: Any) -> tuple[list[str], str | None]:
    """Tags from a list of strings (API) or a comma-separated string (form): trimmed, deduplicated."""
    if isinstance(raw, str):
        raw = raw.split(",")
    if not isinstance(raw, list):
        return [], f"must be a list of strings, got {shown(raw)}"
    tags: list[str] = []
    for item in raw:
        if not isinstance(item, str):
            return [], f"each tag must be a string, got {shown(item)}"
        tag = item.strip()
        if not tag:
            continue
        if problem := _text_errors("tag", tag, MAX_TAG_CHARS):
            return [], f"tag {shown(tag)} {problem}"
        if "," in tag:
            return [], f"tag {shown(tag)} must not contain a comma"
        if tag not in tags:
            tags.append(tag)
    if len(tags) > MAX_TAGS:
        return [], f"at most {MAX_TAGS} tags (got {len(tags)})"
    return tags, None


def _names(raw: Any) -> tuple[list[str], str | None]:
    if isinstance(raw, str):
        raw = raw.replace("\n", ",").split(",")
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        return [], f"must be a list of names, got {shown(raw)}"
    names = list(dict.fromkeys(x.strip() for x in raw if x.strip()))
    if len(names) > MAX_SHARES:
        return [], f"at most {MAX_SHARES} names"
    if any(len(n) > 150 or not is_unicode(n) or "\x00" in n for n in names):
        return [], "a name is too long or not valid text"
    return names, None


def resolve_users(raw: Any, owner: Any, known: QuerySet) -> tuple[list[Any], str | None]:
    """Users named in ``raw`` (usernames) among ``known`` (runs.access.shareable_users: a name outside
    reads exactly as one that exists nowhere); an unknown name or the owner is an error, not skipped."""
    names, problem = _names(raw)
    if problem:
        return [], problem
    found = known.filter(username__in=names) | get_user_model().objects.filter(pk=owner.pk)
    users = {u.get_username(): u for u in found if u.get_username() in names}
    unknown = [n for n in names if n not in users]
    if unknown:
        return [], f"no user named {', '.join(map(repr, unknown[:5]))}"
    if owner.get_username() in users:
        return [], "the owner sees the run anyway: share it with other users"
    return [users[n] for n in names], None


def resolve_groups(raw: Any, known: QuerySet[Group]) -> tuple[list[Group], str | None]:
    """Groups named in ``raw`` among ``known`` (runs.access.shareable_groups), as ``resolve_users``."""
    names, problem = _names(raw)
    if problem:
        return [], problem
    groups = {g.name: g for g in known.filter(name__in=names)}
    unknown = [n for n in names if n not in groups]
    if unknown:
        return [], f"no group named {', '.join(map(repr, unknown[:5]))}"
    return [groups[n] for n in names], None


def validate_changes(run: Run, body: Any, actor: Any) -> tuple[dict[str, Any], Errors]:
    """The changes a PATCH body (or a form) asks for, validated; nothing is applied while any is wrong.
    ``actor``, the user asking, may share with the users and groups runs.access lets them name."""
    if not isinstance(body, Mapping):
        return {}, {"body": "must be a JSON object"}
    errors: Errors = {}
    unknown = sorted(str(k)[:100] for k in body if k not in EDITABLE)
    for key in unknown:
        errors[key] = f"unknown field; editable fields: {', '.join(EDITABLE)}"
    changes: dict[str, Any] = {}
    if "name" in body:
        if name_errors := validate_name(body["name"]):
            errors["name"] = name_errors["name"]
        else:
            changes["name"] = body["name"].strip()
    if "tags" in body:
        tags, problem = clean_tags(body["tags"])
        errors.update({"tags": problem} if problem else {})
        changes["tags"] = tags
    if "notes" in body:
        problem = _text_errors("notes", body["notes"], MAX_NOTES_CHARS, multiline=True)
        errors.update({"notes": problem} if problem else {})
        changes["notes"] = body["notes"] if not problem else ""
    if "archived" in body:
        if not isinstance(body["archived"], bool):
            errors["archived"] = f"must be true or false, got {shown(body['archived'])}"
        changes["archived"] = body["archived"]
    if "shared_users" in body:
        known = access.shareable_users(actor, already=run.shared_users.values("pk"))
        users, problem = resolve_users(body["shared_users"], run.owner, known)
        errors.update({"shared_users": problem} if problem else {})
        changes["shared_users"] = users
    if "shared_groups" in body:
        known_groups = access.shareable_groups(actor, already=run.shared_groups.values("pk"))
        groups, problem = resolve_groups(body["shared_groups"], known_groups)
        errors.update({"shared_groups": problem} if problem else {})
        changes["shared_groups"] = groups
    return ({} if errors else changes), errors


def apply_changes(run: Run, changes: dict[str, Any]) -> None:
    """Save validated changes in one transaction, and tell open run pages (their title and tags)."""
    fields = [k for k in changes if k in ("name", "tags", "notes", "archived")]
    with transaction.atomic():
        Run.lock(run.pk)  # deleted meanwhile: a 404 (RunGone), not a save that affects no row
        for key in fields:
            setattr(run, key, changes[key])
        if fields:
            run.save(update_fields=fields)
        if "shared_users" in changes:
            run.shared_users.set(changes["shared_users"])
        if "shared_groups" in changes:
            run.shared_groups.set(changes["shared_groups"])
    if fields:
        publish(run.pk, status_event(run))


def share_choices(actor: Any, shared_groups: QuerySet[Group]) -> dict[str, Any]:
    """The share form's menus for ``actor`` (runs.access): the groups they may pick (``shared_groups``,
    those already picked, included) and up to SUGGESTED users of their groups to name; never a list of
    everyone on the site."""
    users = access.shareable_users(actor).exclude(pk=actor.pk).order_by("username")
    return {
        "all_groups": access.shareable_groups(actor, already=shared_groups.values("pk")),
        "share_suggestions": [u.get_username() for u in users[:SUGGESTED]],
    }


def sharing(run: Run) -> dict[str, list[str]]:
    return {
        "shared_users": sorted(u.get_username() for u in run.shared_users.all()),
        "shared_groups": sorted(g.name for g in run.shared_groups.all()),
    }


# ---- delete ------------------------------------------------------------------------------------------


def run_files(run_id: int) -> list[Path]:
    """Everything on disk that belongs to a run: its folder (and folders set aside as stale), its log."""
    runs_dir = Path(settings.DAPO_RUNS_DIR)
    found = [runs_dir / str(run_id), *runs_dir.glob(f"{int(run_id)}.stale-*"), log_path(run_id)]
    return [p for p in found if p.exists() or p.is_symlink()]


def disk_bytes(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        total += sum(p.stat().st_size for p in files if not p.is_symlink())
    return total


def deletion_summary(run: Run) -> dict[str, Any]:
    """What deleting a run removes (the confirm page lists it)."""
    files = run_files(run.pk)
    return {
        "metric_points": run.metric_points.count(),
        "samples": run.samples.count(),
        "checkpoints": run.checkpoints.count(),
        "exports": run.model_exports.count(),
        "forks": run.forks.count(),
        "paths": [str(p) for p in files],
        "bytes": disk_bytes(files),
        "running": run.status in (Status.QUEUED, Status.RUNNING),
    }


def remove_files(run_id: int) -> None:
    for path in run_files(run_id):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def delete_confirmed(run: Run, typed: str) -> bool:
    """Whether ``typed`` confirms deleting ``run``: its number (``12`` or ``#12``) or its exact name."""
    typed = typed.strip()
    return typed.removeprefix("#").strip() == str(run.pk) or (bool(typed) and typed == run.name.strip())


def delete_run(run: Run) -> dict[str, Any]:
    """Cancel the run if it is queued or running, then delete its rows and files. Returns what went.

    A running run's controller finds its row gone at its next write (the lease fence: it writes nothing
    more and saves no checkpoint) and stops at the step boundary; the worker then removes whatever that
    last step wrote (worker.tasks.launch_run). Exported models stay in the catalog: they are models of
    their own, which other runs may use; only the run's export records go."""
    summary = deletion_summary(run)
    run_id = run.pk
    if not run.is_final:
        run.request_cancel()
    with transaction.atomic():
        # The run's row locked first: a controller's step write (fenced by an update of this row) then ends
        # before the cascade reads the children, or finds the row gone. Without it, points written between
        # the cascade's delete of them and the run's broke the commit (a foreign key still referenced).
        list(Run.objects.select_for_update().filter(pk=run_id).values_list("pk", flat=True))
        deleted, _ = Run.objects.filter(pk=run_id).delete()  # cascades: points, samples, checkpoints...
    if not deleted:  # another request deleted it first: it removes the files
        raise RunGone(run_id)
    remove_files(run_id)
    publish(run_id, {"type": "deleted", "run": {"id": run_id}})
    return summary


# ---- saved views of the runs list (the list's "Save view" form and /api/views/) ----------------------

MAX_SAVED = 200
"""Saved views (or comparisons) per user."""
VIEW_FIELDS = ("name", "columns", "sort", "filter", "archived")


def validate_view(owner: Any, body: Mapping[str, Any]) -> tuple[dict[str, Any], Errors]:
    """A view to save from the form's strings or the API's JSON: (its fields, the errors by field). The
    filter, sort and columns are read as the runs list reads them (runs.run_filter), so a view that saves
    also opens; ``columns`` is comma-separated text or a list of names. A name the owner used already is
    replaced; a new one past ``MAX_SAVED`` is refused."""
    errors: Errors = {}
    name = body.get("name", "")
    name = name.strip() if isinstance(name, str) else ""
    if not name or len(name) > 100:
        errors["name"] = "must be 1 to 100 characters of text"
    elif problem := name_problem(name):
        errors["name"] = problem
    text = {}
    for field in ("filter", "sort", "archived"):
        raw = body.get(field, "")
        if not isinstance(raw, str) or not is_unicode(raw):
            errors[field] = f"must be text, got {shown(raw)}"
        text[field] = raw.strip() if isinstance(raw, str) and field not in errors else ""
    columns: list[str] = []
    try:
        parse(text["filter"])
    except FilterError as e:
        errors.setdefault("filter", str(e))
    try:
        if len(text["sort"]) > 200:
            raise FilterError("sort: at most 200 characters")
        if text["sort"]:
            parse_sort(text["sort"])
    except FilterError as e:
        errors.setdefault("sort", str(e).removeprefix("sort: "))
    raw_columns = body.get("columns", "")
    if not (isinstance(raw_columns, str) or _strings(raw_columns)):
        errors["columns"] = f"must be names, comma-separated or a list of strings, got {shown(raw_columns)}"
    else:
        try:
            columns = parse_columns(raw_columns)
        except FilterError as e:
            errors["columns"] = str(e).removeprefix("columns: ")
    archived = text["archived"] or "active"
    if "archived" not in errors and archived not in ARCHIVED:
        errors["archived"] = f"must be one of {', '.join(ARCHIVED)}"
    existing = SavedView.objects.filter(owner=owner)
    if "name" not in errors and not existing.filter(name=name).exists() and existing.count() >= MAX_SAVED:
        errors["name"] = f"you have {MAX_SAVED} saved views: delete one first"
    view = {"name": name, "filter": text["filter"], "sort": text["sort"], "columns": columns}
    return {**view, "archived": archived}, errors


def _strings(raw: Any) -> bool:
    return isinstance(raw, list) and all(isinstance(v, str) for v in raw)


def save_view(owner: Any, values: dict[str, Any]) -> tuple[SavedView, bool]:
    """Store a view ``validate_view`` passed (the same name: replaced); (the view, whether it is new)."""
    fields = {k: values[k] for k in ("filter", "sort", "columns", "archived")}
    return SavedView.objects.update_or_create(owner=owner, name=values["name"], defaults=fields)
