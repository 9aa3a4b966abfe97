"""Wrap the model for DDP, FSDP2, FSDP1 or HSDP, in that order of reading."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from overlapscope.tracer.examples.model import Block, TinyLM
from overlapscope.tracer.examples.options import TrainConfig


def parallelize(model: TinyLM, cfg: TrainConfig, device: torch.device, world_size: int) -> nn.Module:
    """The model wrapped as ``cfg.parallel`` asks, on ``device``."""
    if cfg.parallel == "ddp":
        return DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=cfg.bucket_cap_mb,
        )
    mesh = _mesh(cfg, device.type, world_size)
    if cfg.fsdp_version == 1:
        return _apply_fsdp1(model, cfg, device, mesh)
    return _apply_fsdp2(model, cfg, mesh)


def _mesh(cfg: TrainConfig, device_type: str, world_size: int) -> DeviceMesh:
    if cfg.parallel == "hsdp":
        # Replicate across groups, shard inside each: the all-gathers and
        # reduce-scatters stay inside a group, only the all-reduce crosses.
        shape = (cfg.replicate_size, world_size // cfg.replicate_size)
        return init_device_mesh(device_type, shape, mesh_dim_names=("replicate", "shard"))
    return init_device_mesh(device_type, (world_size,), mesh_dim_names=("shard",))


def _apply_fsdp2(model: TinyLM, cfg: TrainConfig, mesh: DeviceMesh) -> nn.Module:
    mp_policy = MixedPrecisionPolicy(param_dtype=_dtype(cfg.param_dtype), reduce_dtype=_dtype(cfg.reduce_dtype))
    reshard = True if cfg.reshard_after_forward is None else cfg.reshard_after_forward
    # Blocks first, then the root: the root's unit then holds only what no
    # block holds (embeddings, final norm, head).
    if (cfg.wrapping or "per-block") == "per-block":
        for block in model.blocks:
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp_policy)
    # The root keeps FSDP's default: no reshard after forward, because
    # backward needs its parameters (the head) first.
    fully_shard(model, mesh=mesh, mp_policy=mp_policy)
    return model


def _apply_fsdp1(model: TinyLM, cfg: TrainConfig, device: torch.device, mesh: DeviceMesh) -> nn.Module:
    from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    if cfg.parallel == "hsdp":
        strategy = ShardingStrategy.HYBRID_SHARD
    elif cfg.reshard_after_forward is False:
        strategy = ShardingStrategy.SHARD_GRAD_OP
    else:
        strategy = ShardingStrategy.FULL_SHARD
    per_block = (cfg.wrapping or "per-block") == "per-block"
    mixed = None
    if cfg.param_dtype != "float32" or cfg.reduce_dtype is not None:
        mixed = MixedPrecision(param_dtype=_dtype(cfg.param_dtype), reduce_dtype=_dtype(cfg.reduce_dtype))
    return FullyShardedDataParallel(
        model,
        auto_wrap_policy=ModuleWrapPolicy({Block}) if per_block else None,
        sharding_strategy=strategy,
        device_id=device,
        device_mesh=mesh if cfg.parallel == "hsdp" else None,
        mixed_precision=mixed,
        use_orig_params=True,
    )


def _dtype(name: str | None) -> torch.dtype | None:
    return None if name is None else getattr(torch, name)
