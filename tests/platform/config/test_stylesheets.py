"""The stylesheets: app.css holds what every page shares, each page links its own file after it, and every
file keeps one declaration a line (so a diff shows which property changed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

FRONTEND = Path(__file__).resolve().parents[3] / "frontend"
CSS = FRONTEND / "static" / "css"
PAGE_STYLES = {
    "runs/detail.html": "run.css",
    "runs/new.html": "new.css",
    "compare/compare.html": "compare.css",
    "inspector/samples.html": "inspector.css",
    "inspector/sample.html": "inspector.css",
    "inspector/problem.html": "inspector.css",
    "inspector/group.html": "inspector.css",
    "catalog/list.html": "datasets.css",
    "catalog/detail.html": "datasets.css",
    "catalog/models.html": "datasets.css",
    "catalog/model_detail.html": "datasets.css",
    "runs/api_docs.html": "api_docs.css",
    "runs/cluster.html": "cluster.css",
}


@pytest.mark.parametrize(("template", "sheet"), sorted(PAGE_STYLES.items()))
def test_each_page_links_its_stylesheet_after_app_css(template, sheet):
    html = (FRONTEND / "templates" / template).read_text()
    assert f"{{% static 'css/{sheet}' %}}" in html
    base = (FRONTEND / "templates" / "base.html").read_text()
    assert base.index("css/app.css") < base.index("{% block head %}")  # the page's file comes after


def test_every_stylesheet_is_linked_by_some_page():
    linked = {"app.css", *PAGE_STYLES.values()}
    assert {p.name for p in CSS.glob("*.css")} == linked


@pytest.mark.parametrize("sheet", sorted(p.name for p in CSS.glob("*.css")))
def test_one_declaration_a_line(sheet):
    text = re.sub(r"/\*.*?\*/", "", (CSS / sheet).read_text(), flags=re.S)
    crowded = [line for line in text.splitlines() if line.count(";") > 1 or ("{" in line and ";" in line)]
    assert not crowded, crowded[:3]


def test_badges_take_their_colours_from_the_tone_palette():
    """Status, group and discard-reason badges share one palette (--tone-*-bg / --tone-*-ink in app.css,
    light and dark): no badge rule names a colour of its own."""
    rules = re.findall(
        r"([^{}]*\.[grb]?badge[^{}]*)\{([^{}]*)\}", "".join(p.read_text() for p in CSS.glob("*.css"))
    )
    assert len(rules) >= 12
    for selector, body in rules:
        for prop, value in re.findall(r"(?m)^\s*(color|background|background-color):\s*([^;]+);", body):
            assert value.startswith("var(--"), f"{selector.strip()} sets {prop}: {value}"
    app = (CSS / "app.css").read_text()
    tones = set(re.findall(r"--tone-([a-z]+)-bg:", app))
    assert tones >= {"neutral", "info", "good", "bad", "muted", "warn", "indigo", "violet"}
    for tone in tones:  # each tone defined for both schemes
        assert app.count(f"--tone-{tone}-bg:") == 2 and app.count(f"--tone-{tone}-ink:") == 2, tone
