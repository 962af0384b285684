"""A run's records in the formats other trainers' tools read (any run: ours or an external one).

GET /api/runs/<id>/verl.zip            verl's files: ``rollout/<step>.jsonl`` and ``validation/<step>.jsonl``
                                       as its ``_dump_generations`` writes them (input, output, gts, score,
                                       step, acc, pred, overlong_reward, overlong), ``metrics.jsonl`` as its
                                       file logger writes it ({"step", "data"}), and ``config.json``
GET /api/runs/<id>/trl-log-history.json  TRL's ``trainer_state.json`` ``log_history``: a list of
                                       {"step": N, metric: value}, our names given TRL's where they mean
                                       the same (dapo.integrations.names.theirs)

Our metric names are verl's (docs/metrics.md), so they stay. In a dump, ``score`` is the reward
function's own score and ``overlong_reward`` the overlong penalty, as the DAPO reward manager logs them
with a reward function that returns a dict; the verl importer (runs.external_import) reads it back to
the same samples. Token, session auth; readers of the run may download.
"""

from __future__ import annotations

import json
import tempfile
import zipfile
from collections import defaultdict
from typing import Any

from django.http import FileResponse, JsonResponse
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.views import APIView

from dapo.integrations.names import theirs
from runs.access import run_for
from runs.models import MetricPoint, Run, Sample

DUMP_FIELDS = (
    "step",
    "split",
    "prompt",
    "response",
    "ground_truth",
    "score",
    "acc",
    "pred",
    "overlong_penalty",
)


def metric_steps(run: Run) -> dict[int, dict[str, float | None]]:
    steps: dict[int, dict[str, float | None]] = defaultdict(dict)
    rows = MetricPoint.objects.filter(run=run).order_by("step", "name").values_list("step", "name", "value")
    for step, name, value in rows.iterator(chunk_size=5000):
        steps[step][name] = value
    return steps


def dump_line(row: dict[str, Any]) -> str:
    """One sample as a line of verl's ``_dump_generations`` (json.dumps, ensure_ascii=False)."""
    entry: dict[str, Any] = {
        "input": row["prompt"],
        "output": row["response"],
        "gts": row["ground_truth"],
        "score": row["score"],
        "step": row["step"],
    }
    if row["acc"] is not None:
        entry["acc"] = row["acc"]
    entry["pred"] = row["pred"]
    entry["overlong_reward"] = row["overlong_penalty"]
    entry["overlong"] = row["overlong_penalty"] < 0
    return json.dumps(entry, ensure_ascii=False)


def write_verl_zip(run: Run, out: Any) -> None:
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        lines = [
            json.dumps({"step": s, "data": d}, separators=(",", ":")) for s, d in metric_steps(run).items()
        ]
        z.writestr("metrics.jsonl", "".join(f"{line}\n" for line in lines))
        z.writestr("config.json", json.dumps(run.config, indent=1))
        rows = Sample.objects.filter(run=run).order_by("split", "step", "sample_index").values(*DUMP_FIELDS)
        current: tuple[str, int] | None = None
        chunk: list[str] = []

        def flush() -> None:
            if current is not None and chunk:
                folder = "rollout" if current[0] == "train" else "validation"
                z.writestr(f"{folder}/{current[1]}.jsonl", "\n".join(chunk) + "\n")

        for row in rows.iterator(chunk_size=2000):
            key = (row["split"], row["step"])
            if key != current:
                flush()
                current, chunk = key, []
            chunk.append(dump_line(row))
        flush()


class VerlZipSerializer(serializers.Serializer):
    """A zip file (application/zip): rollout/<step>.jsonl, validation/<step>.jsonl, metrics.jsonl,
    config.json."""


class LogHistoryEntrySerializer(serializers.Serializer):
    step = serializers.IntegerField()
    metrics = serializers.DictField(help_text="Each metric's value at the step, as keys beside step.")


class RunVerlExport(APIView):
    serializer_class = VerlZipSerializer

    def get(self, request: Request, run_id: int) -> FileResponse:
        """The run as verl's files, zipped (rollout and validation dumps, metric records, config)."""
        run = run_for(request, run_id)
        spool = tempfile.TemporaryFile()
        write_verl_zip(run, spool)
        spool.seek(0)
        return FileResponse(spool, as_attachment=True, filename=f"run-{run.pk}-verl.zip")


class RunTrlLogHistory(APIView):
    serializer_class = LogHistoryEntrySerializer

    def get(self, request: Request, run_id: int) -> JsonResponse:
        """The run's metrics as TRL's log_history: one {"step": N, name: value} per step."""
        run = run_for(request, run_id)
        history = [
            {"step": s, **{theirs("trl", n): v for n, v in d.items()}} for s, d in metric_steps(run).items()
        ]
        response = JsonResponse(history, safe=False, json_dumps_params={"indent": 1})
        response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-trl-log-history.json"'
        return response
