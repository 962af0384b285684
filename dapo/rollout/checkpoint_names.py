"""Policy weights renamed and reshaped from transformers' in-memory layout to the model's checkpoint layout.

transformers 5 keeps some families in memory in another layout than their safetensors files: the
mixture-of-experts models (Mixtral, Qwen3-MoE) fuse each layer's experts into 3-D tensors
(``mlp.experts.gate_up_proj``) and rename the router, where the files hold one tensor per expert
(``block_sparse_moe.experts.0.w1.weight``). ``save_pretrained`` converts back on the way out. vLLM loads
the files, and its ``reload_weights(is_checkpoint_format=True)`` expects their names, so the vllm engine
converts the learner's weights the same way before sending them, one tensor at a time (an FSDP learner
streams them as it gathers them): ``CheckpointFormat.convert``. Families that need no conversion (the
dense ones) pass through untouched. The family matrix checks, per family, that the converted names,
shapes and values are those ``save_pretrained`` writes (tests/dapo/families/).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch


class CheckpointFormat:
    """Converts ``(name, tensor)`` pairs of the in-memory state to the checkpoint's, for one model.

    Args:
        model_path: the model folder vLLM loaded (its config.json says the family). A path without a
            config.json (a hub name vLLM resolved itself) passes the names through as they are.
    """

    def __init__(self, model_path: str | Path) -> None:
        self._model: Any = None
        if (Path(model_path) / "config.json").is_file():
            self._model = _conversion_model(Path(model_path))

    @property
    def converts(self) -> bool:
        """Whether this family's checkpoint layout differs from the in-memory one."""
        return self._model is not None

    def convert(self, pairs: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        """The pairs in checkpoint layout, in order; a fused tensor becomes its per-expert tensors."""
        if self._model is None:
            yield from pairs
            return
        from transformers.core_model_loading import revert_weight_conversion

        for name, tensor in pairs:
            yield from revert_weight_conversion(self._model, {name: tensor}).items()


def _conversion_model(path: Path) -> Any:
    """A weightless (meta-device) model of the family carrying its conversions, or None when its
    in-memory layout is the checkpoint's. The conversions are computed once here; transformers would
    look them up again for every tensor (``revert_weight_conversion`` of a model without them)."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import PrefixChange

    config = AutoConfig.from_pretrained(path, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    # As save_pretrained does for a model it did not load: no legacy renames, no prefix changes.
    conversions = get_model_conversion_mapping(model, add_legacy=False)
    conversions = [c for c in conversions if not isinstance(c, PrefixChange)]
    if not conversions:
        return None
    model._weight_conversions = conversions
    return model
