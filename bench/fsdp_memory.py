"""Per-rank learner memory of DDP against FSDP: parameters, gradients and AdamW state, 2 CPU ranks.

Builds a random Qwen2-shaped causal LM from a config (no download; ``--hidden``/``--layers``/``--vocab``
set its size, untied LM head), then for each strategy spawns ``--ranks`` gloo processes that wrap it the
way a learner does (``DistributedDataParallel``, or ``dapo.learner.fsdp.shard_model``: one FSDP2 unit per
decoder layer, then the root), run one forward, backward and AdamW step on a random batch, and count the
bytes each rank holds (``dapo.learner.fsdp.learner_state_bytes``: a DTensor counts its local shard only). Also
the rank's peak resident set size (``ru_maxrss``), which includes torch itself and the activations.

    .venv/bin/python bench/fsdp_memory.py --hidden 512 --layers 8 --vocab 16000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def build_model(args: argparse.Namespace):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 11 // 4,
        num_hidden_layers=args.layers,
        num_attention_heads=max(1, args.hidden // 64),
        num_key_value_heads=max(1, args.hidden // 256),
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    return Qwen2ForCausalLM(config)


def rank_main(rank: int, args: argparse.Namespace, strategy: str, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from dapo.learner.fsdp import learner_state_bytes, shard_model

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    try:
        model = build_model(args)
        if strategy == "fsdp":
            shard_model(model, torch.device("cpu"))
            train = model
        else:
            train = torch.nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = torch.randint(0, args.vocab, (2, args.tokens), generator=torch.Generator().manual_seed(rank))
        train(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        found = learner_state_bytes(model, optimizer)
        found["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        found["parameters"] = sum(p.numel() for p in build_model(args).parameters()) if rank == 0 else 0
        Path(out, f"{strategy}-{rank}.json").write_text(json.dumps(found))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=16000)
    parser.add_argument("--tokens", type=int, default=64, help="tokens per sequence of the batch (2 rows)")
    parser.add_argument("--ranks", type=int, default=2)
    args = parser.parse_args()

    import torch.multiprocessing as mp

    from dapo.cluster.ray_cluster import free_port

    with tempfile.TemporaryDirectory() as out:
        for strategy in ("ddp", "fsdp"):
            mp.spawn(rank_main, args=(args, strategy, free_port(), out), nprocs=args.ranks)
        results = {
            (s, r): json.loads(Path(out, f"{s}-{r}.json").read_text())
            for s in ("ddp", "fsdp")
            for r in range(args.ranks)
        }
    n = results[("ddp", 0)]["parameters"]
    shape = f"hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}"
    print(f"model: {n / 1e6:.1f}M parameters ({shape})")
    print("| strategy | rank | params MB | grads MB | AdamW state MB | total MB | peak RSS MB |")
    print("|---|---|---|---|---|---|---|")
    totals = {}
    for (strategy, rank), found in results.items():
        total = found["params"] + found["grads"] + found["optimizer"]
        totals.setdefault(strategy, []).append(total)
        cells = [found["params"], found["grads"], found["optimizer"], total, found["peak_rss"]]
        print(f"| {strategy} | {rank} | " + " | ".join(f"{c / 1e6:,.1f}" for c in cells) + " |")
    ratio = max(totals["fsdp"]) / max(totals["ddp"])
    print(f"fsdp / ddp, params + grads + AdamW state per rank (largest rank): {ratio:.3f}")


if __name__ == "__main__":
    main()
