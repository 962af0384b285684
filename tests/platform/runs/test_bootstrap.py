from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest
from catalog.models import BaseModel, Dataset
from django.contrib.auth import get_user_model
from django.core.management import call_command

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_repo(tmp_path: Path, settings) -> Path:
    """A repository root with a built demo: a model directory (config + a safetensors header) and parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    model = tmp_path / "assets" / "demo" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [10, 20], "data_offsets": [0, 800]}}).encode()
    (model / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 800)
    data = tmp_path / "assets" / "demo" / "data"
    data.mkdir()
    # a valid DAPO parquet (the trainer, and so the catalog's import, refuses one without reward_model)
    table = pa.table(
        {
            "prompt": ["Compute 1+1.", "Compute 2+2."],
            "reward_model": [{"ground_truth": "2"}, {"ground_truth": "4"}],
        }
    )
    pq.write_table(table, data / "train.parquet")
    pq.write_table(table.slice(0, 1), data / "test.parquet")
    settings.BASE_DIR = tmp_path
    settings.DAPO_MODEL_ROOTS = [tmp_path / "assets"]
    settings.DAPO_DATASET_ROOTS = [tmp_path / "assets"]
    return tmp_path


def _bootstrap() -> str:
    out = io.StringIO()
    call_command("bootstrap", "--no-build", stdout=out)
    return out.getvalue()


def test_bootstrap_creates_the_admin_once_and_prints_the_same_password(demo_repo, settings):
    first, second = _bootstrap(), _bootstrap()
    password = (Path(settings.DAPO_VAR_DIR) / "admin-password.txt").read_text().strip()
    assert f"as admin / {password}" in first and f"as admin / {password}" in second
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.check_password(password)
    assert oct((Path(settings.DAPO_VAR_DIR) / "admin-password.txt").stat().st_mode)[-3:] == "600"


def test_bootstrap_registers_the_demo_in_the_catalog_idempotently(demo_repo):
    _bootstrap()
    _bootstrap()
    model, dataset = BaseModel.objects.get(), Dataset.objects.get()
    assert (model.path, model.architecture, model.parameter_count) == (
        "assets/demo/model",
        "LlamaForCausalLM",
        200,
    )
    assert dataset.splits == {"train": 2, "val": 1} and dataset.schema["prompt"] == "string"
    assert list(dataset.rows.values_list("split", "index", "ground_truth")) == [
        ("train", 0, "2"),
        ("train", 1, "4"),
        ("val", 0, "2"),
    ]  # one set of rows, though bootstrap ran twice


def test_bootstrap_without_a_built_demo_says_how_to_build_it(tmp_path, settings):
    settings.BASE_DIR = tmp_path
    out = _bootstrap()
    assert "python -m dapo.data.demo --out assets/demo" in out and not BaseModel.objects.exists()


def test_register_commands_add_a_model_and_a_dataset(demo_repo):
    out = io.StringIO()
    call_command("register_model", "m", str(demo_repo / "assets" / "demo" / "model"), stdout=out)
    call_command("register_dataset", "d", "assets/demo/data/train.parquet", "--val", "", stdout=out)
    assert BaseModel.objects.get(name="m").parameter_count == 200
    assert Dataset.objects.get(name="d").splits == {"train": 2}


def test_register_model_refuses_a_path_outside_the_model_roots(demo_repo):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="must be inside one of the model roots"):
        call_command("register_model", "evil", "/etc")
