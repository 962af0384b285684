"""``{% sweep_panel %}``: the new-run form's sweep panel, drawn where the runs app's form includes it (the
runs app builds its form without importing this app; the template asks for the panel)."""

from __future__ import annotations

from typing import Any

from django import template

from sweeps import form, plan

register = template.Library()


@register.inclusion_tag("sweeps/panel.html", takes_context=True)
def sweep_panel(context: template.Context) -> dict[str, Any]:
    """The panel as posted (``sweep`` in the page's context, when a sweep was refused), or empty."""
    return {
        "sweep": context.get("sweep") or form.form_state(),
        "sweep_fields": form.field_menu(),
        "sweep_limits": {"max_runs": plan.MAX_RUNS, "max_fields": plan.MAX_FIELDS},
        "csrf_token": context.get("csrf_token"),
    }
