"""Dataset versions belong to one owner: names are unique per owner (``created_by``; none for the server's
registrations), compared case-folded (``name_key``).

Existing rows are sorted out deterministically:

1. every version keeps its owner (``created_by``) and its id; its ``name_key`` is its name case-folded;
2. a name whose versions were added by several users becomes one dataset per user: the versions each added
   (another user's "version 2" of an upload, say) are that user's own dataset of the name;
3. each version keeps its number, so the record of a run (``Run.data_files``: id, name, version) stays
   true; only two versions of one owner's name that now share a number (the same name written in two
   cases, once each) are renumbered: in (version, id) order, a version that would repeat a number takes
   the next one free above the owner's highest so far, and the runs that recorded it are updated.
"""

from __future__ import annotations

import unicodedata

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def _key(name: str) -> str:
    """catalog.models.name_key, as of this migration."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())
    return " ".join(folded.split())


def split_names_by_owner(apps, schema_editor):
    Dataset = apps.get_model("catalog", "Dataset")
    Run = apps.get_model("runs", "Run")
    last: dict[tuple[int | None, str], int] = {}
    renumbered: dict[int, int] = {}
    for dataset in Dataset.objects.order_by("version", "id"):
        line = (dataset.created_by_id, _key(dataset.name))
        version = dataset.version if dataset.version > last.get(line, 0) else last[line] + 1
        if version != dataset.version:
            renumbered[dataset.pk] = version
        last[line] = version
        dataset.name_key, dataset.version = line[1], version
        dataset.save(update_fields=["name_key", "version"])
    if renumbered:
        _update_run_records(Run, renumbered)


def _update_run_records(Run, renumbered: dict[int, int]) -> None:
    """Runs that recorded a renumbered version name its new number."""
    for run in Run.objects.exclude(data_files=[]).only("id", "data_files").iterator():
        entries = run.data_files if isinstance(run.data_files, list) else []
        changed = False
        for entry in entries:
            picked = entry.get("dataset") if isinstance(entry, dict) else None
            if isinstance(picked, dict) and picked.get("id") in renumbered:
                picked["version"] = renumbered[picked["id"]]
                changed = True
        if changed:
            run.save(update_fields=["data_files"])


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0003_h19b_versions_model_details"),
        ("runs", "0009_h19b_data_files"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="dataset", name="dataset_name_version"),
        migrations.AddField(
            model_name="dataset",
            name="name_key",
            field=models.CharField(
                default="",
                editable=False,
                help_text="The name case-folded (catalog.models.name_key).",
                max_length=800,
            ),
            preserve_default=False,
        ),
        migrations.RunPython(split_names_by_owner, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="dataset",
            name="created_by",
            field=models.ForeignKey(
                blank=True,
                help_text="The owner of this name's versions; empty: registered on the server (command line).",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AlterField(
            model_name="dataset",
            name="version",
            field=models.PositiveIntegerField(
                default=1, help_text="1, 2, ...: the versions of one owner's name share it."
            ),
        ),
        migrations.AddConstraint(
            model_name="dataset",
            constraint=models.UniqueConstraint(
                fields=("created_by", "name_key", "version"), name="dataset_owner_name_version"
            ),
        ),
        migrations.AddConstraint(
            model_name="dataset",
            constraint=models.UniqueConstraint(
                condition=models.Q(("created_by__isnull", True)),
                fields=("name_key", "version"),
                name="dataset_server_name_version",
            ),
        ),
        migrations.AddIndex(
            model_name="dataset",
            index=models.Index(fields=["name_key", "created_by"], name="dataset_name_key"),
        ),
    ]
