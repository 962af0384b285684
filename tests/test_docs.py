"""The repository stands on its own: every document a file cites is in the repository; the documentation
site (mkdocs.yml, docs/) builds strictly, so its links and anchors hold; the README stays a quick start."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = re.compile(r"dapo-reference(\.md)?|scale-notes\.md|(?<![\w/-])(design|style)\.md|\.\./shared/")
CITED = re.compile(r"docs/([\w-]+\.md)")


def _tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    paths = [ROOT / n for n in names.splitlines() if not n.startswith(("assets/", "frontend/static/vendor/"))]
    skip = {".png", ".parquet", ".safetensors", ".lock"}
    return [p for p in paths if p.is_file() and p.suffix not in skip and p != Path(__file__).resolve()]


def test_no_tracked_file_cites_a_document_outside_the_repository():
    offenders = []
    for path in _tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        offenders += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in OUTSIDE.finditer(text)]
    assert offenders == []


def test_every_cited_docs_page_exists():
    missing = set()
    for path in _tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        missing |= {name for name in CITED.findall(text) if not (ROOT / "docs" / name).is_file()}
    assert missing == set()


# ---- the documentation site and the README ------------------------------------------------------------

README_MAX_LINES = 300
"""The README is the quick start, the picture and links; the detail lives in docs/ (issue #30)."""
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as a reader would build it: strict, so a broken link, anchor or nav entry fails."""
    out = tmp_path_factory.mktemp("site")
    argv = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.yml", "--site-dir", str(out)]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # silences the theme's banner about MkDocs 2.0
    result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_the_documentation_site_builds_strictly_with_every_page(site: Path):
    pages = {p.stem for p in (ROOT / "docs").glob("*.md")} - {"index"}
    assert (site / "index.html").is_file()
    assert sorted(p for p in pages if not (site / p / "index.html").is_file()) == []


def test_the_readme_stays_a_quick_start_under_300_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines: move the detail into docs/"


def test_every_link_of_the_readme_reaches_a_file_and_every_docs_anchor_exists(site: Path):
    """The README is not part of the site, so mkdocs does not check its links: this does."""
    broken = []
    for target in LINK.findall((ROOT / "README.md").read_text(encoding="utf-8")):
        path, _, anchor = target.partition("#")
        if "://" in target or not path:
            continue
        if not (ROOT / path).exists():
            broken.append(target)
        elif anchor and path.startswith("docs/") and path.endswith(".md"):
            stem = Path(path).stem
            html = site / ("" if stem == "index" else stem) / "index.html"
            if f'id="{anchor}"' not in html.read_text(encoding="utf-8"):
                broken.append(target)
    assert broken == []
