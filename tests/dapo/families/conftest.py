"""Fixtures of the model-family matrix (``matrix.py``): one test per family, and a model folder per family."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dapo.families.matrix import BY_NAME, FAMILIES, Family, build


@pytest.fixture(params=[f.name for f in FAMILIES])
def family(request: pytest.FixtureRequest) -> Family:
    return BY_NAME[request.param]


@pytest.fixture(scope="session")
def family_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A HuggingFace folder per family: the tiny model and the demo tokenizer (what a run's model.path is)."""
    from dapo.data.demo import build_tokenizer

    root = tmp_path_factory.mktemp("families")
    tokenizer = build_tokenizer()
    folders = {}
    for family in FAMILIES:
        folder = root / family.name
        build(family.name).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders[family.name] = folder
    return folders
