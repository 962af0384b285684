"""Peak memory of exporting a checkpoint: ``dapo.learner.export`` against the plain way, side by side.

Builds a random Qwen2-shaped model (no download; ``--hidden``/``--layers`` set its size), saves it as the
base model, and writes a checkpoint in the trainer's format (``state.pt`` with the model state dict and an
AdamW state of two fp32 moments per parameter, as a run saves it). Then, each in a fresh subprocess so
that the peak resident set size (``ru_maxrss``) is its own:

- ``dapo.learner.export``: the model built on the meta device, the checkpoint memory-mapped and assigned;
- plain: ``torch.load`` of the whole checkpoint, ``from_pretrained`` of the base model, ``load_state_dict``,
  ``save_pretrained`` (what one writes without thinking about memory).

Both write the same folder; the script checks their weights are equal.

    .venv/bin/python bench/export_memory.py --hidden 1024 --layers 16
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PLAIN = """
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
run, base, out = sys.argv[1:4]
state = torch.load(f"{run}/checkpoints/step_000001/state.pt", map_location="cpu", weights_only=True)
model = AutoModelForCausalLM.from_pretrained(base, local_files_only=True)
model.load_state_dict(state["model"])
model.save_pretrained(out)
AutoTokenizer.from_pretrained(base, local_files_only=True).save_pretrained(out)
"""


def build(root: Path, hidden: int, layers: int) -> tuple[Path, Path, int]:
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from dapo.data.demo import build_tokenizer

    config = Qwen2Config(
        hidden_size=hidden,
        intermediate_size=hidden * 4,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        num_key_value_heads=max(1, hidden // 256),
        vocab_size=32000,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    base = root / "base"
    model.save_pretrained(base)
    build_tokenizer().save_pretrained(base)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()  # AdamW state: exp_avg and exp_avg_sq, fp32, one each per parameter
    run = root / "run"
    folder = run / "checkpoints" / "step_000001"
    folder.mkdir(parents=True)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, folder / "state.pt")
    meta = {"step": 1, "stream": {}, "config": {"model": {"path": str(base)}}, "saved_at": time.time()}
    (folder / "trainer.json").write_text(json.dumps(meta))
    return run, base, sum(p.numel() for p in model.parameters())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=16)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run, base, n = build(root, args.hidden, args.layers)
        size = (run / "checkpoints" / "step_000001" / "state.pt").stat().st_size / 2**20
        print(f"{n:,} parameters ({n * 4 / 2**20:.0f} MB fp32); state.pt {size:.0f} MB with the AdamW state")
        results = {}
        for name in ("dapo.learner.export", "plain"):
            out = root / f"out-{name}"
            if name == "dapo.learner.export":
                cmd = [sys.executable, "-m", "dapo.learner.export", str(run), "--out", str(out)]
            else:
                cmd = [sys.executable, "-c", PLAIN, str(run), str(base), str(out)]
            results[name] = _isolated(cmd)
        for name, (mb, wall) in results.items():
            print(f"{name:12s} peak RSS {mb:7.0f} MB   {wall:5.1f} s")
        ratio = results["plain"][0] / results["dapo.learner.export"][0]
        print(f"plain / dapo.learner.export peak RSS = {ratio:.2f}")
        _same_weights(root / "out-dapo.learner.export", root / "out-plain")


def _isolated(cmd: list[str]) -> tuple[float, float]:
    """Peak RSS of ``cmd`` alone: measured by a fresh Python parent whose only child it is."""
    probe = (
        "import resource, subprocess, sys, time, json; t = time.perf_counter(); "
        "subprocess.run(sys.argv[1:], check=True, capture_output=True); "
        "print(json.dumps([resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, "
        "time.perf_counter() - t]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *cmd], check=True, capture_output=True, text=True, cwd=REPO
    )
    mb, wall = json.loads(done.stdout)
    return float(mb), float(wall)


def _same_weights(a: Path, b: Path) -> None:
    from safetensors.torch import load_file

    def weights(folder: Path) -> dict:
        out: dict = {}
        for f in sorted(folder.glob("*.safetensors")):
            out.update(load_file(str(f)))
        return out

    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa), "exports differ"
    print("both exports hold the same weights")


if __name__ == "__main__":
    main()
