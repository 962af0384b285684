"""The repository stands on its own: every document a file cites is in the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

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
