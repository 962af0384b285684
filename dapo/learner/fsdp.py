"""FSDP learners (``execution.learner_strategy = "fsdp"``): PyTorch FSDP2 sharding of the policy.

Each learner keeps 1/W of every parameter, gradient and AdamW moment (W learners) instead of a whole copy:
``fully_shard`` makes each decoder layer one unit, gathered just before its forward (and again for its
backward) and freed after, then the root (embeddings, final norm, LM head). Gradients are reduce-scattered,
averaged over the ranks like DDP's all-reduce, so the actor's ``loss * world_size`` scaling is unchanged.
On GPU the layers compute in bfloat16 and reduce gradients in float32 (verl's mixed-precision default);
on CPU everything stays in the model's dtype. ``fsdp_cpu_offload`` keeps the shards (and so the optimiser
state) in host memory between uses.

Parameters become DTensors, so nothing may read ``model.state_dict()`` tensors as whole weights. The
helpers here gather a full state one tensor at a time (``full_state``: every rank must consume it, they
are collectives) and load a full state by keeping each rank's own slice (``load_full_state``), so a
checkpoint's ``state.pt`` has the same keys and shapes for every strategy.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Shard


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The model's decoder layers: ``model.model.layers`` for Llama/Qwen2-style causal LMs, else the
    largest ``ModuleList`` anywhere in the model (GPT-2's ``transformer.h``, ...)."""
    inner = getattr(getattr(model, "model", None), "layers", None)
    if isinstance(inner, nn.ModuleList) and len(inner):
        return list(inner)
    lists = [list(m) for m in model.modules() if isinstance(m, nn.ModuleList)]
    if not lists:
        raise ValueError(f"FSDP: found no list of decoder layers in {type(model).__name__}")
    return max(lists, key=len)


def shard_model(model: nn.Module, device: torch.device, *, cpu_offload: bool = False) -> nn.Module:
    """Shard ``model`` in place over the default process group: one FSDP unit per decoder layer, then
    the root. Build the optimiser AFTER this call (its parameters are the sharded ones)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    offload = CPUOffloadPolicy(pin_memory=device.type == "cuda") if cpu_offload else OffloadPolicy()
    options: dict[str, Any] = {"mesh": mesh, "offload_policy": offload}
    if device.type == "cuda":
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, **options)
    fully_shard(model, **options)
    return model


def is_sharded(model: nn.Module) -> bool:
    return any(isinstance(p, DTensor) for p in model.parameters())


def _gather(value: torch.Tensor) -> torch.Tensor:
    """The whole tensor behind ``value`` (a collective for a DTensor: all ranks must call it)."""
    if not isinstance(value, DTensor):
        return value.detach()
    mesh_device = value.device_mesh.device_type
    if value.device.type != mesh_device:  # offloaded shard: gather on the device the collectives use
        moved = value.to(mesh_device)
        assert isinstance(moved, DTensor)
        value = moved
    return value.full_tensor().detach()


def full_state(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, whole tensor)`` for every entry of the model's state dict, in its order, gathered one at
    a time (a layer's weights are never all in flight at once). A collective: every rank must iterate it
    to the end. Tied weights (one parameter under two names) are gathered once and yielded under both
    names as the same tensor, like an unsharded model's ``state_dict()``."""
    entries = model.state_dict(keep_vars=True)
    aliases = _aliases(entries)
    shared = set(aliases.values())
    kept: dict[str, torch.Tensor] = {}
    for name, value in entries.items():
        if name in aliases:
            yield name, kept[aliases[name]]
            continue
        whole = _gather(value)
        if name in shared:
            kept[name] = whole
        yield name, whole


def _aliases(entries: dict[str, torch.Tensor]) -> dict[str, str]:
    """{later name: first name} for entries that are the same tensor object (tied weights)."""
    first: dict[int, str] = {}
    return {name: first[id(v)] for name, v in entries.items() if first.setdefault(id(v), name) != name}


def full_state_dict(model: nn.Module, *, keep: bool) -> dict[str, torch.Tensor]:
    """The whole model state on the CPU where ``keep`` (rank 0), an empty dict elsewhere (the other
    ranks still take part in every gather). Tied names share one CPU tensor."""
    out: dict[str, torch.Tensor] = {}
    aliases = _aliases(model.state_dict(keep_vars=True))
    for name, tensor in full_state(model):
        if keep:
            out[name] = out[aliases[name]] if name in aliases else tensor.cpu()
    return out


def load_full_state(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load a full (unsharded) state dict into a sharded model: each rank copies its own slice of each
    tensor (no communication; every rank must hold ``state``)."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unknown = [k for k in state if k not in own]
    if missing or unknown:
        raise ValueError(f"FSDP load: missing keys {missing[:5]}, unknown keys {unknown[:5]}")
    with torch.no_grad():
        for name, target in own.items():
            if isinstance(target, DTensor):
                local = target.to_local()
                local.copy_(_local_slice(state[name], target).to(local.dtype))
            else:
                target.copy_(state[name])


def _local_slice(full: torch.Tensor, like: DTensor) -> torch.Tensor:
    """This rank's part of ``full`` when sharded like ``like``: FSDP2 cuts dim 0 in ``torch.chunk``
    pieces, one per rank (ranks past the last piece hold an empty one)."""
    if tuple(full.shape) != tuple(like.shape):
        raise ValueError(f"FSDP load: shape {tuple(full.shape)} where the model has {tuple(like.shape)}")
    if tuple(like.placements) != (Shard(0),):
        raise ValueError(f"FSDP load: unexpected placements {like.placements}")
    rank, world = like.device_mesh.get_local_rank(), like.device_mesh.size()
    pieces = torch.chunk(full, world, dim=0)
    local = pieces[rank] if rank < len(pieces) else full[:0]
    if tuple(local.shape) != tuple(like.to_local().shape):
        raise ValueError(f"FSDP load: slice {tuple(local.shape)}, shard {tuple(like.to_local().shape)}")
    return local.to(like.to_local().device)


def full_optimizer_state(optimizer: torch.optim.Optimizer, *, keep: bool) -> dict[str, Any]:
    """The optimiser's ``state_dict()`` with every sharded tensor gathered whole (on the CPU), in the
    format of an unsharded optimiser (integer parameter indices); empty where not ``keep``."""
    state = optimizer.state_dict()
    gathered: dict[int, dict[str, Any]] = {}
    for index in sorted(state["state"]):
        entry = {
            k: _gather(v).cpu() if isinstance(v, torch.Tensor) else v
            for k, v in state["state"][index].items()
        }
        if keep:
            gathered[index] = entry
    return {"state": gathered, "param_groups": state["param_groups"]} if keep else {}


def load_full_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load a full optimiser state (``full_optimizer_state``'s or an unsharded optimiser's) into an
    optimiser over sharded parameters: each moment is cut like its parameter."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    sharded: dict[int, dict[str, Any]] = {}
    for index, entry in state["state"].items():
        param = params[int(index)]
        sharded[int(index)] = {
            k: _local_like(v, param) if k != "step" and isinstance(v, torch.Tensor) else v
            for k, v in entry.items()
        }
    optimizer.load_state_dict({"state": sharded, "param_groups": state["param_groups"]})


def _local_like(full: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    if not isinstance(param, DTensor):
        return full
    local = _local_slice(full, param).to(param.dtype)
    return DTensor.from_local(
        local, param.device_mesh, param.placements, shape=param.shape, stride=param.stride()
    )


def learner_state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of parameters, gradients and optimiser state held by this rank (a DTensor's local shard
    only): {"params": ..., "grads": ..., "optimizer": ...}."""
    params = list(model.parameters())
    grads = [p.grad for p in params if p.grad is not None]
    moments = [v for entry in optimizer.state.values() for v in entry.values() if isinstance(v, torch.Tensor)]
    return {"params": _local_bytes(params), "grads": _local_bytes(grads), "optimizer": _local_bytes(moments)}


def _local_bytes(tensors: Sequence[torch.Tensor]) -> int:
    locals_ = [t.to_local() if isinstance(t, DTensor) else t for t in tensors]
    return sum(t.numel() * t.element_size() for t in locals_)
