"""The runs app's models, and nothing else: the rules that act on them live in the modules of ``runs``.

run.py      Run (its lifecycle, lease and the recording of its steps), Status, Kind, LeaseLost, RunGone
records.py  what a run records: metric points, samples, checkpoints, distributions, hardware samples
exports.py  a checkpoint exported into the model catalog
saved.py    saved views of the runs list, saved comparisons
quotas.py   per-user caps on queued and running runs and their steps, and the rule that applies them
rates.py    actions counted against an hourly limit (runs.throttle)
capacity.py the cluster as a training worker last saw it (the launch refuses what it can never hold)
"""

from runs.models.capacity import ClusterCapacity
from runs.models.exports import ExportStatus, ModelExport
from runs.models.quotas import QuotaExceeded, RunQuota
from runs.models.rates import RateHit
from runs.models.records import Checkpoint, HardwareSample, MetricPoint, Sample, StepDistribution
from runs.models.run import Run, RunQuerySet
from runs.models.saved import SavedComparison, SavedView
from runs.models.states import FINAL, Kind, LeaseLost, RunGone, Source, Status

__all__ = [
    "FINAL",
    "Checkpoint",
    "ClusterCapacity",
    "ExportStatus",
    "HardwareSample",
    "Kind",
    "LeaseLost",
    "MetricPoint",
    "ModelExport",
    "QuotaExceeded",
    "RateHit",
    "Run",
    "RunGone",
    "RunQuerySet",
    "RunQuota",
    "Sample",
    "SavedComparison",
    "SavedView",
    "Source",
    "Status",
    "StepDistribution",
]
