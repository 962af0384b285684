"""Export and vLLM's weight names, per family.

Export: a checkpoint of the family's learner state (``state.pt``, as every learner strategy saves it)
becomes a HuggingFace folder that transformers reloads to the same outputs. vLLM (static, on CPU): the
vllm engine sends the learner's weights in the layout vLLM loaded from the model folder, so what
``CheckpointFormat`` makes of the in-memory state is exactly what ``save_pretrained`` writes: the same
names, shapes and values (transformers 5 fuses a mixture-of-experts model's experts in memory only).
"""

from __future__ import annotations

import json

import pytest
import torch

from dapo.learner import export
from dapo.learner.families import exact_attention
from tests.dapo.families.matrix import VOCAB, build


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def trained(name: str) -> torch.nn.Module:
    """The family's model with every weight moved, as after training (not the base folder's weights)."""
    model = build(name)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.02)
    return model


def test_an_exported_checkpoint_reloads_to_the_same_outputs(family, family_dirs, tmp_path):
    from transformers import AutoModelForCausalLM

    model = trained(family.name)
    step = tmp_path / "run" / "checkpoints" / "step_000003"
    step.mkdir(parents=True)
    torch.save({"model": model.state_dict()}, step / "state.pt")
    (step / "trainer.json").write_text(json.dumps({"saved_at": 0.0}))
    result = export.export(tmp_path / "run", tmp_path / "out", model_path=family_dirs[family.name])
    assert result.step == 3
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "out", local_files_only=True).eval()
    exact_attention(loaded)  # Gemma 2: transformers' default kernel (sdpa) would skip its attention soft cap
    ids = torch.randint(3, VOCAB, (2, 21), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = model(ids).logits, loaded(ids).logits
    assert type(loaded) is type(model)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_vllm_weight_names_are_those_of_the_checkpoint_files(family, family_dirs, tmp_path):
    from safetensors.torch import load_file

    from dapo.rollout.checkpoint_names import CheckpointFormat

    model = trained(family.name)
    model.save_pretrained(tmp_path)
    files = {k: v for f in sorted(tmp_path.glob("*.safetensors")) for k, v in load_file(f).items()}
    fmt = CheckpointFormat(family_dirs[family.name])
    assert fmt.converts == family.checkpoint_layout
    state = model.state_dict()
    seen: set[int] = set()
    distinct = []  # a tied alias travels once, as the engine's stream sends it
    for name, tensor in state.items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            distinct.append((name, tensor))
    sent = dict(fmt.convert(distinct))
    assert sorted(sent) == sorted(files)
    for name, tensor in files.items():
        assert torch.equal(sent[name], tensor), name
