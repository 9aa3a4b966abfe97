"""FSDP: the unit map, dtypes and mesh of an FSDP2 or FSDP1 model.

FSDP already writes its own profiler ranges (``FSDP::all_gather (<fqn>)`` and
friends), so the tracer adds none; it records which unit holds what, with the
names those ranges carry. Read the map after the first forward: FSDP fills in
unit names and the root's effective ``reshard_after_forward`` lazily.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP1

try:
    from torch.distributed.fsdp import FSDPModule
except ImportError:  # torch < 2.6 kept FSDP2 under _composable
    from torch.distributed._composable.fsdp import FSDPModule

_FSDP1_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")


@dataclass(frozen=True)
class UnitInfo:
    """One FSDP unit: the parameters that one all-gather brings together."""

    name: str
    """Module FQN as FSDP2 prints it in ``FSDP::... (<fqn>)``; "" for the root."""
    params: int
    """Parameter elements the unit manages (not those of nested units)."""
    bytes: int
    """Those parameters' unsharded bytes at the unit's param dtype."""
    reshard_after_forward: bool | int
    """Effective value: True, False, or the group size it reshards to."""
    param_names: tuple[str, ...]
    """Fully qualified names of the unit's parameters."""
    param_bytes: tuple[int, ...] = ()
    """Unsharded bytes of each of those parameters (the what-if engine re-wraps units from them)."""

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "params": self.params,
            "bytes": self.bytes,
            "reshard_after_forward": self.reshard_after_forward,
            "param_names": list(self.param_names),
            "param_bytes": list(self.param_bytes),
        }


@dataclass(frozen=True)
class ShardingLayout:
    """What the manifest needs from a sharded model."""

    parallelism: str
    """"fsdp" or "hsdp"."""
    params: int
    """Parameter elements of the whole unsharded model."""
    units: list[UnitInfo]
    param_dtype: torch.dtype
    reduce_dtype: torch.dtype
    mesh: dict | None
    """``{"shape": [replicate, shard], "dim_names": [...]}`` for HSDP, else None."""


@dataclass(frozen=True)
class ShardingGroups:
    """The process groups FSDP communicates on (None where a group has one rank)."""

    shard: dist.ProcessGroup | None
    replicate: dist.ProcessGroup | None


def is_fsdp(model: nn.Module) -> bool:
    """True when ``model`` or a submodule is sharded by FSDP2 or FSDP1."""
    return any(isinstance(m, (FSDPModule, FSDP1)) for m in model.modules())


def sharding_layout(model: nn.Module) -> ShardingLayout:
    """The unit map of an FSDP2 (``fully_shard``) or FSDP1 model."""
    if any(isinstance(m, FSDP1) for m in model.modules()):
        return _fsdp1_layout(model)
    return _fsdp2_layout(model)


def sharding_groups(model: nn.Module) -> ShardingGroups:
    """The shard and replicate groups of the model's (first) FSDP unit."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            for group in _param_groups(module):
                info = group.mesh_info
                return ShardingGroups(
                    _bigger_than_one(getattr(info, "shard_process_group", None)),
                    _bigger_than_one(getattr(info, "replicate_process_group", None)),
                )
        if isinstance(module, FSDP1):
            return ShardingGroups(
                _bigger_than_one(module.process_group),
                _bigger_than_one(getattr(module, "_inter_node_pg", None)),
            )
    raise ValueError("the model has no FSDP unit")


def _param_groups(module: FSDPModule) -> list:
    """The module's FSDP2 parameter groups (one, before per-parameter meshes)."""
    state = module._get_fsdp_state()
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is None:  # older releases keep a single optional group
        group = state._fsdp_param_group
        groups = [group] if group is not None else []
    return groups


def _bigger_than_one(group: dist.ProcessGroup | None) -> dist.ProcessGroup | None:
    return group if group is not None and group.size() > 1 else None


def _fsdp2_layout(model: nn.Module) -> ShardingLayout:
    units, groups, seen = [], [], set()
    for module_name, module in model.named_modules():
        if not isinstance(module, FSDPModule):
            continue
        for group in _param_groups(module):
            if id(group) in seen:  # fully_shard([a, b]) shares one group
                continue
            seen.add(id(group))
            groups.append(group)
            units.append(_fsdp2_unit(group, module_name))
    if not groups:
        raise ValueError("the model has no FSDP2 unit with parameters")
    first = groups[0]
    orig_dtype = first.fsdp_params[0].sharded_param.dtype
    param_dtype = first.mp_policy.param_dtype or orig_dtype
    reduce_dtype = first.mp_policy.reduce_dtype or param_dtype
    mesh = first.mesh_info.mesh
    return ShardingLayout(
        parallelism="hsdp" if mesh.ndim == 2 else "fsdp",
        # A DTensor's numel is the global one; parameters outside any unit count too.
        params=sum(p.numel() for p in model.parameters()),
        units=units,
        param_dtype=param_dtype,
        reduce_dtype=reduce_dtype,
        mesh=_mesh_json(mesh.shape, mesh.mesh_dim_names) if mesh.ndim == 2 else None,
    )


def _fsdp2_unit(group, module_name: str) -> UnitInfo:
    params = [fp._orig_size.numel() for fp in group.fsdp_params]
    dtypes = [_fsdp2_param_dtype(fp, group.mp_policy) for fp in group.fsdp_params]
    post = group.post_forward_mesh_info
    if post is None:
        reshard: bool | int = False
    elif post is group.mesh_info or post.shard_mesh_size == group.mesh_info.shard_mesh_size:
        reshard = True
    else:
        reshard = post.shard_mesh_size
    name = group._module_fqn if group._module_fqn is not None else module_name
    return UnitInfo(
        name=name,
        params=sum(params),
        bytes=sum(n * d.itemsize for n, d in zip(params, dtypes)),
        reshard_after_forward=reshard,
        param_names=tuple(getattr(fp, "_param_fqn", "?") for fp in group.fsdp_params),
        param_bytes=tuple(n * d.itemsize for n, d in zip(params, dtypes)),
    )


def _fsdp2_param_dtype(fsdp_param, mp_policy) -> torch.dtype:
    # FSDP casts floating-point parameters only (FSDPParam.init_dtype_attrs,
    # which runs lazily; this works before the first forward as well).
    orig = fsdp_param.sharded_param.dtype
    return mp_policy.param_dtype if mp_policy.param_dtype and orig.is_floating_point else orig


def _fsdp1_layout(model: nn.Module) -> ShardingLayout:
    from torch.distributed.fsdp._flat_param import RESHARD_AFTER_FORWARD_HANDLE_STRATEGIES, HandleShardingStrategy

    units, handles = [], []
    for module_name, module in model.named_modules():
        if not isinstance(module, FSDP1) or module._handle is None:
            continue
        handle = module._handle
        handles.append(handle)
        name = _fsdp1_name(module_name)
        numels = handle.flat_param._numels
        units.append(
            UnitInfo(
                name=name,
                params=sum(numels),
                bytes=sum(numels) * handle._fwd_bwd_param_dtype.itemsize,
                # FSDP1 never frees the root's parameters after forward.
                reshard_after_forward=bool(
                    not module._is_root and handle._sharding_strategy in RESHARD_AFTER_FORWARD_HANDLE_STRATEGIES
                ),
                param_names=tuple(_join(name, fqn) for fqn in handle.flat_param._fqns),
                param_bytes=tuple(n * handle._fwd_bwd_param_dtype.itemsize for n in numels),
            )
        )
    if not handles:
        raise ValueError("the model has no FSDP1 unit with parameters")
    first = handles[0]
    root = next(m for m in model.modules() if isinstance(m, FSDP1))
    # FSDP1 turns HYBRID_SHARD into NO_SHARD when a shard group has one rank,
    # but keeps the replicate group it all-reduces over.
    inter_node = getattr(root, "_inter_node_pg", None)
    hybrid = inter_node is not None or first._sharding_strategy in (
        HandleShardingStrategy.HYBRID_SHARD,
        HandleShardingStrategy._HYBRID_SHARD_ZERO2,
    )
    mesh = None
    if hybrid:
        mesh = _mesh_json((root._inter_node_pg.size(), root.process_group.size()), ("replicate", "shard"))
    return ShardingLayout(
        parallelism="hsdp" if hybrid else "fsdp",
        params=sum(u.params for u in units),
        units=units,
        param_dtype=first._fwd_bwd_param_dtype,
        reduce_dtype=first._reduce_dtype or first._fwd_bwd_param_dtype,
        mesh=mesh,
    )


def _fsdp1_name(module_name: str) -> str:
    for prefix in _FSDP1_PREFIXES:
        module_name = module_name.replace(prefix, "")
    return module_name.removesuffix("._fsdp_wrapped_module").removesuffix("_fsdp_wrapped_module")


def _join(prefix: str, name: str) -> str:
    for marker in _FSDP1_PREFIXES:
        name = name.replace(marker, "")
    return f"{prefix}.{name}" if prefix else name


def _mesh_json(shape, dim_names) -> dict:
    return {"shape": [int(s) for s in shape], "dim_names": list(dim_names or ("replicate", "shard"))}
