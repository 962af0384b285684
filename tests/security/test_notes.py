"""A run's markdown notes, which everyone the run is shared with reads: no image is ever loaded (a remote
one would tell its host who read the notes, and when; a same-site one would make the reader's browser
send a request with their cookies), and links go only to http(s), mailto or the site itself."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db

IMAGES = [
    "![chart](https://tracker.example/pixel.png)",
    '![chart](https://tracker.example/pixel.png "title")',
    "![chart][ref]\n\n[ref]: https://tracker.example/pixel.png",
    "![chart](//tracker.example/pixel.png)",
    "![chart](/accounts/logout/)",
    "[![chart](https://tracker.example/pixel.png)](https://example.org/)",
]

UNSAFE_LINKS = [
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "<javascript:alert(1)>",
    "[x](vbscript:msgbox(1))",
    "[x](data:text/html;base64,PHNjcmlwdD4=)",
    "[x](data:image/png;base64,iVBORw0KGgo=)",
    "![x](data:image/png;base64,iVBORw0KGgo=)",
    "[x](file:///etc/passwd)",
    "[x][ref]\n\n[ref]: javascript:alert(1)",
]


def _notes_html(client, run, notes: str) -> str:
    run.notes = notes
    run.save(update_fields=["notes"])
    html = client.get(f"/runs/{run.pk}/").content.decode()
    return html.split('id="run-notes"')[1].split("</section>")[0]


@pytest.mark.parametrize("notes", IMAGES)
def test_an_image_in_the_notes_is_a_link_never_loaded(alice_client, alice_run, notes):
    html = _notes_html(alice_client, alice_run, notes)
    assert "<img" not in html and "src=" not in html
    assert "image: chart" in html  # the reader still learns an image was meant


def test_a_remote_image_becomes_a_link_to_it(alice_client, alice_run):
    html = _notes_html(alice_client, alice_run, "see ![the <b>curve</b>](https://example.org/curve.png)")
    assert '<a class="md-image" href="https://example.org/curve.png">image: the &lt;b&gt;curve' in html


def test_an_image_inside_a_link_is_its_text(alice_client, alice_run):
    notes = "[![chart](https://tracker.example/pixel.png)](https://example.org/)"
    html = _notes_html(alice_client, alice_run, notes)
    assert '<a href="https://example.org/">image: chart</a>' in html


@pytest.mark.parametrize("notes", UNSAFE_LINKS)
def test_a_link_with_an_unsafe_scheme_stays_text(alice_client, alice_run, notes):
    html = _notes_html(alice_client, alice_run, notes)
    hrefs = re.findall(r'href="([^"]*)"', html)
    assert hrefs == [] and "<img" not in html, hrefs


@pytest.mark.parametrize(
    ("notes", "href"),
    [
        ("[paper](https://arxiv.org/abs/2503.14476)", "https://arxiv.org/abs/2503.14476"),
        ("[mail](mailto:team@example.org)", "mailto:team@example.org"),
        ("[run 7](/runs/7/)", "/runs/7/"),
        ("[below](#results)", "#results"),
        ("<https://example.org/x>", "https://example.org/x"),
    ],
)
def test_ordinary_links_still_work(alice_client, alice_run, notes, href):
    html = _notes_html(alice_client, alice_run, notes)
    assert f'href="{href}"' in html
