"""DDP: mark each bucket's collective in the trace and record the bucket map.

DDP writes no profiler range per bucket, so the tracer registers a comm hook
that wraps the real hook (the user's, or one that does what DDP's built-in
all-reduce does) in ``record_function("overlapscope:ddp_bucket#<index>")`` and
returns its future untouched: same collective, same stream, same numerics.
"""

# No ``from __future__ import annotations`` here: DDP checks a comm hook's
# annotations at registration and rejects them as strings.
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from overlapscope.contract.names import bucket_annotation

CommHook = Callable[[object, dist.GradBucket], torch.futures.Future[torch.Tensor]]


def allreduce_mean_hook(process_group: dist.ProcessGroup, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """All-reduce the bucket's mean exactly as DDP's built-in reducer does.

    The reducer multiplies each gradient by ``1/N`` as it copies it into the
    bucket; ``div_(N)`` would round differently when N is not a power of two.
    """
    buffer = bucket.buffer()
    buffer.mul_(1.0 / process_group.size())
    work = dist.all_reduce(buffer, group=process_group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


@dataclass(frozen=True)
class BucketInfo:
    """One DDP bucket as DDP used it in a synchronizing backward pass."""

    index: int
    """``GradBucket.index()``."""
    bytes: int
    """Size of the bucket's gradient buffer."""
    params: int
    """Parameter elements (not tensors) in the bucket."""
    param_names: tuple[str, ...]
    """Fully qualified names of the bucket's parameters, in bucket order."""
    param_bytes: tuple[int, ...] = ()
    """Gradient bytes of each of those parameters (the what-if engine rebuilds buckets from them)."""

    def to_json(self) -> dict:
        return {"index": self.index, "bytes": self.bytes, "params": self.params, "param_names": list(self.param_names),
                "param_bytes": list(self.param_bytes)}


class BucketRecorder:
    """Sees every bucket the comm hook gets and keeps the latest complete map.

    A map is complete when the bucket that reports ``is_last()`` arrives; the
    last complete map is the one DDP uses after its bucket rebuild.
    """

    def __init__(self, names_by_id: dict[int, str]):
        self._names_by_id = names_by_id
        self._pending: dict[int, tuple] = {}
        self._latest: dict[int, tuple] = {}
        self.synced_backwards = 0
        """Backward passes whose buckets were all reduced (not inside no_sync)."""

    def observe(self, bucket: dist.GradBucket) -> None:
        # Keep only cheap facts here: this runs on the backward's critical path.
        buffer, params = bucket.buffer(), bucket.parameters()
        numel = sum(p.numel() for p in params)
        self._pending[bucket.index()] = (buffer.numel() * buffer.element_size(), numel, tuple(id(p) for p in params),
                                         tuple(p.numel() * buffer.element_size() for p in params))
        if bucket.is_last():
            self._latest, self._pending = self._pending, {}
            self.synced_backwards += 1

    def buckets(self) -> "list[BucketInfo]":
        """The bucket map of the last synchronizing backward pass, by index."""
        return [
            BucketInfo(index, nbytes, params, tuple(self._names_by_id.get(i, "?") for i in ids), sizes)
            for index, (nbytes, params, ids, sizes) in sorted(self._latest.items())
        ]


def annotate_buckets(
    model: DistributedDataParallel,
    hook: CommHook | None = None,
    state: object = None,
) -> "BucketRecorder":
    """Register a comm hook on ``model`` that annotates each bucket's collective.

    ``hook``/``state`` are what you would pass to ``model.register_comm_hook``;
    without them the collective is DDP's default mean all-reduce. DDP accepts
    one comm hook, registered before the first backward, so register yours here
    instead of on the model.
    """
    if getattr(model, "_comm_hooks", None):  # DDP keeps no public record of a registered hook
        raise RuntimeError("a comm hook is already registered: pass it to the tracer instead")
    if hook is None:
        hook, state = allreduce_mean_hook, model.process_group
    recorder = BucketRecorder({id(p): name for name, p in model.module.named_parameters()})

    def annotated_hook(hook_state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        recorder.observe(bucket)
        with torch.profiler.record_function(bucket_annotation(bucket.index())):
            return hook(hook_state, bucket)

    annotated_hook.__qualname__ = f"overlapscope_annotated({getattr(hook, '__qualname__', 'hook')})"
    model.register_comm_hook(state, annotated_hook)
    return recorder


def reducer_bucket_bytes(model: DistributedDataParallel) -> list[int] | None:
    """Bucket sizes after the rebuild as DDP's own logging reports them, or None.

    An independent check of what the comm hook saw.
    """
    data = model._get_ddp_logging_data()
    sizes = str(data.get("rebuilt_bucket_sizes", "")).strip()
    if not data.get("has_rebuilt_buckets") or not sizes:
        return None
    return [int(s) for s in sizes.split(",")]
