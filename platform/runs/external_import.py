"""Import a finished verl run in one go: from its folder (``manage.py import_run DIR --owner USER``) or from
files uploaded in the browser (``runs.external_views``). Every file is read and checked first
(``dapo.integrations.verl_files``: verl's own formats, then the API's checks of runs.external); a bad line
is an error naming the file and line, and nothing is written. Then the run, its steps and its end are
written in one transaction: the run appears whole or not at all."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from dapo.integrations.verl import Layout, total_steps  # the follower's own rules for where files are
from dapo.integrations.verl_files import DumpReader, VerlFormatError, dump_step, metric_points, read_config
from runs import external
from runs.models import Run, Status

MAX_FILE_BYTES = 64 * 1024 * 1024


class ImportProblem(ValueError):
    """Why an import was refused: one message per bad file or field (``problems``)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass
class VerlFiles:
    """A verl run's files as text: its metric records, its dumps (name, text) per split, its config."""

    metrics: list[tuple[str, str]] = field(default_factory=list)
    rollout: list[tuple[str, str]] = field(default_factory=list)
    validation: list[tuple[str, str]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_folder(cls, root: Path) -> VerlFiles:
        if not root.is_dir():
            raise ImportProblem([f"{root} is not a folder"])
        layout = Layout.find(root)
        files = cls()
        if layout.metrics is not None and layout.metrics.is_file():
            files.metrics.append((str(layout.metrics), _read(layout.metrics)))
        for folder, target in ((layout.rollout, files.rollout), (layout.validation, files.validation)):
            for path in sorted(folder.iterdir()) if folder is not None and folder.is_dir() else []:
                if dump_step(path.name) is not None:
                    target.append((str(path), _read(path)))
        if layout.config is not None:
            try:
                files.config = read_config(layout.config)
            except (VerlFormatError, ValueError) as e:
                raise ImportProblem([f"{layout.config}: {e}"]) from None
        if not files.metrics and not files.rollout and not files.validation:
            found = "metrics.jsonl (or one *.jsonl, or *.log), rollout/, validation/"
            raise ImportProblem([f"{root} holds none of verl's files: {found}"])
        return files


def _read(path: Path) -> str:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ImportProblem([f"{path}: larger than {MAX_FILE_BYTES // 2**20} MiB"])
    return path.read_text(encoding="utf-8", errors="replace")


def parse(files: VerlFiles) -> list[external.StepIn]:
    """Every step of the files, checked as the API checks a body; ImportProblem lists what is wrong."""
    problems: list[str] = []
    points: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []
    for where, text in files.metrics:
        try:
            points += metric_points(where, text.splitlines())
        except VerlFormatError as e:
            problems.append(str(e))
    for dumps, split in ((files.rollout, "train"), (files.validation, "val")):
        for where, text in dumps:
            step = dump_step(Path(where).name)
            if step is None:
                problems.append(f"{where}: a dump is named <step>.jsonl (verl's _dump_generations)")
                continue
            try:
                samples += DumpReader(where, step, split).samples(text.splitlines())
            except VerlFormatError as e:
                problems.append(str(e))
    if problems:
        raise ImportProblem(problems)
    steps: dict[int, external.StepIn] = {}
    if points:
        cleaned, errors = external.clean_points({"points": points}, "verl")
        problems += [f"metrics {k}: {v}" for k, v in errors.items()]
        steps |= {s.step: s for s in cleaned}
    for start in range(0, len(samples), external.MAX_SAMPLES):
        cleaned, errors = external.clean_samples({"samples": samples[start : start + external.MAX_SAMPLES]})
        problems += [f"samples {k}: {v}" for k, v in errors.items()]
        for s in cleaned:
            entry = steps.setdefault(s.step, external.StepIn(step=s.step))
            entry.samples += s.samples
            entry.val_samples += s.val_samples
    if problems:
        raise ImportProblem(problems[:20])
    if not steps:
        raise ImportProblem(["the files hold no metric record and no sample"])
    return sorted(steps.values(), key=lambda s: s.step)


def import_verl(owner: Any, name: str, files: VerlFiles) -> Run:
    """A finished external verl run made of ``files``; ImportProblem (nothing written) when one is bad."""
    if errors := external.validate_name(name):
        raise ImportProblem([f"name: {errors['name']}"])
    steps = parse(files)
    fields, errors = external.clean_create({"name": name, "source": "verl", "config": files.config})
    if errors:
        raise ImportProblem([f"{k}: {v}" for k, v in errors.items()])
    with transaction.atomic():
        run = external.create(owner, {**fields, "total_steps": total_steps(files.config)})
        external.record(run, steps)
        # finished as it was imported: no "run succeeded" notification, it did not just happen
        Run.objects.filter(pk=run.pk).update(
            status=Status.SUCCEEDED, finished_at=timezone.now(), running_since=None
        )
    run.refresh_from_db()
    return run
