"""DAPO: Decoupled Clip and Dynamic sAmpling Policy Optimization, on one process or on Ray.

The package by concern (docs/architecture.md has the picture):

    algo/       the pure math of the paper: the policy loss, group advantages, dynamic sampling
    runconfig/  the run configuration and its presets (torch-free: the web process validates with it)
    data/       reasoning problems from parquet/JSON(L), the order they are drawn in, the demo task
    rewards/    reward functions by name: the math verifier, rules, plugins, a remote service
    rollout/    rollout engines: the CPU engine on transformers and vLLM on GPUs
    learner/    the policy's model code: log-probs, micro-batches, FSDP, checkpoints, export
    loop/       the trainer's loop, its step reports, and where they go (sinks)
    cluster/    where the heavy work runs: this process or Ray actors
    eval/       validation during a run, evaluation on its own, and their metrics
    train.py    the command line: ``python -m dapo.train --preset tiny_cpu``
    client.py   a Python client of the platform's REST API

Earlier versions had every module at the top (``dapo.loss``, ``dapo.config``, ``dapo.trainer``...). Those
names still import, as the same module objects as their new homes (so ``mock.patch`` and pickles made by
earlier versions keep working), and ``python -m dapo.evaluate`` still runs: see ``MOVED``. ``dapo.data``
is a package now; it still offers what the module of that name did (``from dapo.data import load_problems``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import CodeType, ModuleType

MOVED: dict[str, str] = {
    "dapo.actor": "dapo.learner.actor",
    "dapo.advantage": "dapo.algo.advantage",
    "dapo.backends": "dapo.cluster.backends",
    "dapo.batching": "dapo.loop.batching",
    "dapo.checkpoint": "dapo.learner.checkpoint",
    "dapo.config": "dapo.runconfig",
    "dapo.config_base": "dapo.runconfig.base",
    "dapo.config_docs": "dapo.runconfig.docs",
    "dapo.config_sections": "dapo.runconfig.sections",
    "dapo.demo": "dapo.data.demo",
    "dapo.distributions": "dapo.loop.distributions",
    "dapo.evaluate": "dapo.eval.evaluate",
    "dapo.explain": "dapo.algo.explain",
    "dapo.export": "dapo.learner.export",
    "dapo.fsdp": "dapo.learner.fsdp",
    "dapo.hardware": "dapo.loop.hardware",
    "dapo.head_chunks": "dapo.learner.head_chunks",
    "dapo.jsonsafe": "dapo.data.jsonsafe",
    "dapo.loss": "dapo.algo.loss",
    "dapo.memory_plan": "dapo.learner.memory_plan",
    "dapo.metrics": "dapo.eval.metrics",
    "dapo.microbatch": "dapo.learner.microbatch",
    "dapo.modeling": "dapo.learner.modeling",
    "dapo.presets": "dapo.runconfig.presets",
    "dapo.ray_backend": "dapo.cluster.ray_backend",
    "dapo.ray_cluster": "dapo.cluster.ray_cluster",
    "dapo.ray_shards": "dapo.cluster.ray_shards",
    "dapo.ray_worker": "dapo.cluster.ray_worker",
    "dapo.report": "dapo.loop.report",
    "dapo.reward": "dapo.rewards",
    "dapo.runner": "dapo.loop.runner",
    "dapo.sampling": "dapo.algo.sampling",
    "dapo.shared_prompt": "dapo.learner.shared_prompt",
    "dapo.sinks": "dapo.loop.sinks",
    "dapo.stream": "dapo.data.stream",
    "dapo.timing": "dapo.loop.timing",
    "dapo.trainer": "dapo.loop.trainer",
    "dapo.validation": "dapo.eval.validation",
}
"""Old module name -> where it lives now."""


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """Answers an import of an old name with the module at its new home (one module object for both)."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the alias's spec on the real module: give it its own back.
        module.__spec__ = self._specs.pop(module.__name__)

    def _loader(self, fullname: str) -> importlib.abc.InspectLoader:
        spec = importlib.util.find_spec(MOVED[fullname])
        if spec is None or not isinstance(spec.loader, importlib.abc.InspectLoader):
            raise ImportError(f"{MOVED[fullname]} has no source to run", name=fullname)
        return spec.loader

    def get_code(self, fullname: str) -> CodeType | None:
        """For ``python -m dapo.<old name>``: runpy runs the new module's code as ``__main__``."""
        return self._loader(fullname).get_code(MOVED[fullname])

    def get_source(self, fullname: str) -> str | None:
        return self._loader(fullname).get_source(MOVED[fullname])


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())
