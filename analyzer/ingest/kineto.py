"""Typed msgspec schema of the Kineto (PyTorch profiler) JSON trace.

Only the fields the analyzer uses are declared; msgspec skips the rest while
parsing, which is what makes decoding fast (measured in the benchmark README:
msgspec into these structs 0.12 s for the 47 MB reference trace, stdlib json
1.1 s, orjson 0.31 s, DuckDB's read_json 0.54 s, polars' read_json 1.1 s).
``gc=False`` keeps the cyclic GC from walking hundreds of thousands of structs.

Events decode by their ``ph`` into one struct type per phase (a tagged union),
so separating slices from flows is a type check, and flows never allocate the
name strings they do not need.

Event arguments are kept as raw JSON (``msgspec.Raw``) and decoded a second
time, by event class, into the small typed structs below: a kernel's args and a
memory event's args share no field, and decoding each class into its own struct
avoids materialising a dozen ``None`` attributes per event.
"""

from __future__ import annotations

import typing

import msgspec

# The sentinel for "no value" in msgspec defaults and int64 NumPy columns (columns.py's too):
# defined here, where nothing imports NumPy or Arrow (the scan starts before they load).
NULL_I64 = -(2**63)

_ABSENT = msgspec.Raw(b"")  # an optional raw field that is not there
_NO_ARGS = msgspec.Raw(b"{}")  # events without args decode as an empty object


class Slice(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    """A complete event (ph X): a CPU op, annotation, runtime call, kernel, copy, ...

    Absent or null fields stay None here, as the C scanner leaves them absent: both
    decoders then apply the same checks (frames.py)."""

    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None  # microseconds, fractional part = nanoseconds
    dur: float | None = None  # microseconds
    args: msgspec.Raw = _NO_ARGS


class Instant(Slice, tag="i"):
    """An instant event (ph i): allocator ``[memory]`` events, markers."""


class InstantUpper(Slice, tag="I"):
    """An instant event in the legacy spelling (ph I)."""


class Meta(msgspec.Struct, gc=False, tag_field="ph", tag="M"):
    """Metadata (ph M): thread and process names."""

    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    args: msgspec.Raw = _NO_ARGS


class FlowStart(msgspec.Struct, gc=False, tag_field="ph", tag="s"):
    """A flow event (ph s/t/f): links a CPU launch to its kernel, or forward to backward."""

    cat: str | None = None
    name: str | None = None
    id: int | str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None


class FlowStep(FlowStart, tag="t"):
    pass


class FlowEnd(FlowStart, tag="f"):
    pass


def _ignored(ph: str) -> type:
    # Other Chrome-trace phases Kineto does not write; parsed and dropped.
    return msgspec.defstruct(f"Ignored_{ord(ph)}", [], gc=False, tag_field="ph", tag=ph)


_IGNORED = tuple(_ignored(ph) for ph in "BECbnePONDRcVv()")
FLOW_TYPES = (FlowStart, FlowStep, FlowEnd)
AnyEvent = typing.Union[(Slice, Instant, InstantUpper, Meta, FlowStart, FlowStep, FlowEnd) + _IGNORED]


class DeviceProperties(msgspec.Struct, gc=False):
    id: int | None = None
    name: str | None = None
    totalGlobalMem: int | None = None


class DistributedInfo(msgspec.Struct, gc=False):
    backend: str | None = None
    rank: int | None = None
    world_size: int | None = None
    nccl_version: str | None = None
    pg_config: msgspec.Raw = msgspec.Raw(b"")


class TraceHeader(msgspec.Struct, gc=False):
    """The top-level members of a trace file besides its events."""

    distributedInfo: DistributedInfo | None = None
    deviceProperties: list[DeviceProperties] | None = None
    baseTimeNanoseconds: int | None = None
    schemaVersion: int | None = None
    host_name: str | None = None
    hostname: str | None = None
    traceName: str | None = None
    overlapscope_zero_ns: int | None = None
    """Set in the rank files of an export read back (ingest/exported.py): the ts are
    microseconds from this instant, so events before the run's first step are negative
    there, and kept; in a Kineto trace a negative ts is a broken clock, left out."""


class Trace(TraceHeader, kw_only=True):
    """The top-level object of a Kineto trace file."""

    traceEvents: list[AnyEvent]  # type: ignore[valid-type]


# Lenient scalar types: exporters differ in whether they quote numbers. Integer
# fields default to NULL_I64 (not None) so columns build as plain int64 arrays.
IntLike = int | str
StrLike = str | int | None


class CollectiveArgs(msgspec.Struct, gc=False):
    """What a collective kernel's args say of its collective (kind, sizes, group): the
    fields that ``decode._collective_kernels`` reads, and no others, so that
    both decoders judge the same fields at every detail (the scanner keeps none of the ids
    it reads into columns in an args text: a stream of the wrong type is refused through
    those columns where a detail reads it, and nowhere else)."""

    collective: StrLike = msgspec.field(default=None, name="Collective name")
    in_elems: IntLike = msgspec.field(default=NULL_I64, name="In msg nelems")
    out_elems: IntLike = msgspec.field(default=NULL_I64, name="Out msg nelems")
    group_size: IntLike = msgspec.field(default=NULL_I64, name="Group size")
    dtype: StrLike = None
    pg_name: StrLike = msgspec.field(default=None, name="Process Group Name")
    pg_desc: StrLike = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: msgspec.Raw = msgspec.field(default=_ABSENT, name="Process Group Ranks")


class DeviceArgs(CollectiveArgs, gc=False):
    """Arguments of GPU-side events (kernels, memcpy, memset, sync, GPU annotations)."""

    device: IntLike = NULL_I64
    stream: IntLike = NULL_I64
    correlation: IntLike = NULL_I64
    external_id: IntLike = msgspec.field(default=NULL_I64, name="External id")
    bytes: IntLike = NULL_I64  # memcpy / memset size


class HostArgs(CollectiveArgs, gc=False):
    """Arguments of CPU-side events: ops, annotations, runtime calls."""

    external_id: IntLike = msgspec.field(default=NULL_I64, name="External id")
    correlation: IntLike = NULL_I64
    input_dims: msgspec.Raw = msgspec.field(default=_ABSENT, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=_ABSENT, name="Input type")
    flops: float | None = None


class CorrelationArgs(msgspec.Struct, gc=False):
    """Only the correlation id of a runtime call (what the overlap analysis reads)."""

    correlation: IntLike = NULL_I64


class LaunchArgs(msgspec.Struct, gc=False):
    """A runtime call's ids (correlation to its kernel, External id to its op): most of
    a GPU trace's host rows are these, and they need no more."""

    correlation: IntLike = NULL_I64
    external_id: IntLike = msgspec.field(default=NULL_I64, name="External id")


class OpArgs(msgspec.Struct, gc=False):
    """A CPU op's ids and FLOP estimate: all that most ops carry that the analyses read
    (comm launches and matmuls, whose shapes and groups matter, decode as HostArgs)."""

    external_id: IntLike = msgspec.field(default=NULL_I64, name="External id")
    correlation: IntLike = NULL_I64
    flops: float | None = None


class TakenArgs(msgspec.Struct, gc=False):
    """The args values the C scanner reads while scanning (scan.TAKE_KEYS), raw: the
    msgspec decoder reads the same values the same way (frames.taken_of)."""

    correlation: msgspec.Raw = _ABSENT
    external_id: msgspec.Raw = msgspec.field(default=_ABSENT, name="External id")
    stream: msgspec.Raw = _ABSENT
    device: msgspec.Raw = _ABSENT
    flops: msgspec.Raw = _ABSENT
    collective: msgspec.Raw = msgspec.field(default=_ABSENT, name="Collective name")
    memory_device_type: msgspec.Raw = msgspec.field(default=_ABSENT, name="Device Type")
    memory_device_id: msgspec.Raw = msgspec.field(default=_ABSENT, name="Device Id")
    memory_bytes: msgspec.Raw = msgspec.field(default=_ABSENT, name="Bytes")
    total_allocated: msgspec.Raw = msgspec.field(default=_ABSENT, name="Total Allocated")
    total_reserved: msgspec.Raw = msgspec.field(default=_ABSENT, name="Total Reserved")


class MemoryArgs(msgspec.Struct, gc=False):
    """Arguments of ``[memory]`` instant events (profile_memory=True)."""

    device_type: IntLike = msgspec.field(default=NULL_I64, name="Device Type")
    device_id: IntLike = msgspec.field(default=NULL_I64, name="Device Id")
    bytes: IntLike = msgspec.field(default=NULL_I64, name="Bytes")
    total_allocated: IntLike = msgspec.field(default=NULL_I64, name="Total Allocated")
    total_reserved: IntLike = msgspec.field(default=NULL_I64, name="Total Reserved")


class MetaArgs(msgspec.Struct, gc=False):
    """Arguments of metadata events (thread_name, process_name, process_labels)."""

    name: str | None = None
    labels: str | None = None


TRACE_DECODER = msgspec.json.Decoder(Trace)
HEADER_DECODER = msgspec.json.Decoder(TraceHeader)


DEVICE_ARGS_DECODER = msgspec.json.Decoder(list[DeviceArgs])
COLLECTIVE_ARGS_DECODER = msgspec.json.Decoder(list[CollectiveArgs])
HOST_ARGS_DECODER = msgspec.json.Decoder(list[HostArgs])
CORRELATION_DECODER = msgspec.json.Decoder(list[CorrelationArgs])
LAUNCH_DECODER = msgspec.json.Decoder(list[LaunchArgs])
OP_ARGS_DECODER = msgspec.json.Decoder(list[OpArgs])
TAKEN_ARGS_DECODER = msgspec.json.Decoder(list[TakenArgs])
MEMORY_ARGS_DECODER = msgspec.json.Decoder(list[MemoryArgs])
META_ARGS_DECODER = msgspec.json.Decoder(list[MetaArgs])


def _encode_names(*structs) -> tuple[bytes, ...]:
    return tuple(sorted({f.encode_name.encode() for s in structs for f in msgspec.structs.fields(s)}))


# The ids and FLOP counts the scanner reads into columns while scanning (scan.TAKE_KEYS):
# kept out of the args text, except in a row where one is odd (that row keeps its args whole).
_TAKEN = {b"correlation", b"External id", b"stream", b"device", b"flops"}

# The args keys each detail reads (the scanner keeps only these of each event's args;
# the full detail stores the args whole).
ARGS_KEYS = {
    # the overlap detail also reads the collective kernels' args (the clocks and waits
    # match one collective across ranks by its kind, group and size)
    "overlap": tuple(k for k in _encode_names(CorrelationArgs, MetaArgs, DeviceArgs) if k not in _TAKEN),
    "attribution": tuple(k for k in _encode_names(DeviceArgs, HostArgs, CorrelationArgs, MemoryArgs, MetaArgs)
                         if k not in _TAKEN),
    "full": None,
}
