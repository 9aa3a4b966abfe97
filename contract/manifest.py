"""``manifest.json``: the facts a run's traces lack, written by the tracer's rank 0.

One typed struct read by the analyzer and written by the tracer. Every key is a
contract (documented in ``tracer/README.md``); keys may be added within a major
``schema_version``, never renamed. A reader accepts keys it does not know (a
newer minor version) and refuses a newer major version with one line. Lists that
do not apply to a run are empty (``buckets`` of an FSDP run, ``units`` of a DDP
run); single facts that do not apply are null.
"""

from __future__ import annotations

import msgspec

from overlapscope.contract.names import MANIFEST_FILE

# Version of the manifest's keys and meanings; a new major version means a key
# changed its meaning, and readers of an older major version refuse the file.
SCHEMA_VERSION = 1

PARALLELISMS = ("ddp", "fsdp", "hsdp")
WRAPPINGS = ("per-block", "root-only")


class Device(msgspec.Struct, kw_only=True):
    """One rank's device: ``cpu`` or ``cuda:<i>``, its name and memory."""

    rank: int | None = None
    device: str | None = None
    name: str | None = None
    memory_bytes: int | None = None


class Bucket(msgspec.Struct, kw_only=True):
    """One DDP gradient bucket as DDP used it after its rebuild."""

    index: int
    bytes: int | None = None  # the gradient buffer
    params: int | None = None  # parameter elements
    param_names: list[str] = []
    param_bytes: list[int] = []  # gradient bytes of each parameter, in param_names' order


class Unit(msgspec.Struct, kw_only=True):
    """One FSDP unit: ``name`` is the module FQN as FSDP2 prints it ("" for the root)."""

    name: str
    params: int | None = None  # elements this unit manages (not those of nested units)
    bytes: int | None = None  # their unsharded size at param_dtype
    reshard_after_forward: bool | int = True  # the effective value (an int: resharded to a smaller group)
    param_names: list[str] = []
    param_bytes: list[int] = []  # unsharded bytes of each parameter at param_dtype, in param_names' order


class Mesh(msgspec.Struct, kw_only=True):
    """HSDP's 2-D device mesh: ``shape`` is ``[replicate, shard]``."""

    shape: list[int]
    dim_names: list[str] = []


class CalibratedCollective(msgspec.Struct, kw_only=True):
    """One timed collective of the tracer's calibration."""

    kind: str  # all_reduce, all_gather, reduce_scatter
    group: str | None = None  # data_parallel, shard, replicate
    group_size: int
    dtype: str | None = None
    bytes: int  # the full buffer
    seconds: float  # the slowest rank's mean per call
    algbw_bytes_per_s: float | None = None
    busbw_bytes_per_s: float | None = None


class Calibration(msgspec.Struct, kw_only=True):
    """F and W measured on the run's own hardware before profiling."""

    flops_per_s: float | None = None  # F
    bus_bandwidth_bytes_per_s: float | None = None  # W over every kind (the largest message)
    matmul: dict | None = None
    collectives: list[CalibratedCollective] = []

    def bus_bandwidth_of(self, kind: str, group: str | None = None) -> float | None:
        """W of one collective kind: the median bus bandwidth of its largest calibrated message;
        with ``group`` (HSDP's shard or replicate), of that group's calibration where it has one
        (an HSDP run calibrates all-reduces in both groups, on different links)."""
        mine = [c for c in self.collectives if c.kind == kind and c.busbw_bytes_per_s]
        if group and any(c.group == group for c in mine):
            mine = [c for c in mine if c.group == group]
        if not mine:
            return None
        largest = max(c.bytes for c in mine)
        values = sorted(c.busbw_bytes_per_s for c in mine if c.bytes == largest)
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


class Manifest(msgspec.Struct, kw_only=True):
    """The manifest's keys, in contract order (tracer/README.md says what each means)."""

    schema_version: int = SCHEMA_VERSION
    world_size: int | None = None
    backend: str | None = None
    devices: list[Device] = []
    parallelism: str | None = None  # ddp, fsdp or hsdp
    params: int | None = None  # parameter elements of the whole unsharded model
    param_dtype: str | None = None
    reduce_dtype: str | None = None
    tokens_per_microbatch: int | None = None
    accumulation_steps: int | None = None
    buckets: list[Bucket] = []
    units: list[Unit] = []
    mesh: Mesh | None = None
    calibration: Calibration | None = None
    torch_version: str | None = None
    nccl_version: str | None = None
    hostnames: list[str | None] = []
    start_time: str | None = None
    command_line: str | None = None
    model: dict = {}
    micro_batch_size: int | None = None
    no_sync: bool | None = None
    wrapping: str | None = None
    bucket_cap_mb: float | None = None
    bucket_cap_default: bool | None = None
    profiled_steps: list[int] = []
    gradient_bytes: int | None = None
    buckets_verified: bool | None = None
    trace_files: list[str] = []
    profile: dict = {}

    @property
    def hsdp_shape(self) -> tuple[int, int] | None:
        """(replicate, shard) group sizes of an HSDP run's mesh, else None."""
        if self.parallelism != "hsdp" or self.mesh is None or len(self.mesh.shape) != 2:
            return None
        replicate, shard = self.mesh.shape
        return int(replicate), int(shard)

    def group_sizes(self) -> dict[str, int]:
        """Ranks in each collective kind's group where the trace does not say (gloo):
        HSDP gathers and reduce-scatters in the shard group, all-reduces across replicas."""
        shape = self.hsdp_shape
        if shape is None:
            return {}
        replicate, shard = shape
        return {"all_gather": shard, "reduce_scatter": shard, "all_reduce": replicate}

    def data_parallel_gpus(self, world_size: int | None) -> int | None:
        """Ranks one gradient is sharded over: the shard group for HSDP, else the world."""
        shape = self.hsdp_shape
        return shape[1] if shape else world_size

    @property
    def reshard_after_forward(self) -> bool:
        """Whether the named units reshard after forward (all of them; True without named units).
        The root unit ("") is left out: FSDP2 never reshards it after forward."""
        named = [u for u in self.units if u.name]
        return all(bool(u.reshard_after_forward) for u in named) if named else True

    @property
    def device_memory_bytes(self) -> int | None:
        """The smallest device memory over the ranks (the tracer records RAM for CPU ranks)."""
        sizes = [d.memory_bytes for d in self.devices if d.memory_bytes and d.memory_bytes > 0]
        return min(sizes) if sizes else None


EMPTY = Manifest()
_DECODER = msgspec.json.Decoder(Manifest)
_ENCODER = msgspec.json.Encoder()


class ManifestError(ValueError):
    """A manifest that cannot be read; ``str()`` is the problem in one line."""


def _major(raw: bytes) -> int | None:
    """The schema_version of a manifest before decoding the rest (a newer major
    version may have changed any other key's type)."""
    try:
        head = msgspec.json.decode(raw, type=_Version)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    return head.schema_version


class _Version(msgspec.Struct):
    schema_version: int | None = None


def decode(raw: bytes) -> Manifest:
    """Read a manifest; raises ManifestError (one line) for bad JSON, a wrong type or a newer major version."""
    major = _major(raw)
    if major is not None and major > SCHEMA_VERSION:
        raise ManifestError(f"manifest schema_version {major} is newer than this overlapscope reads "
                            f"({SCHEMA_VERSION}); upgrade overlapscope")
    try:
        manifest = _DECODER.decode(raw)
    except msgspec.ValidationError as err:
        raise ManifestError(f"manifest does not match the contract: {err}") from None
    except msgspec.DecodeError as err:
        raise ManifestError(f"manifest is not valid JSON: {err}") from None
    if manifest.schema_version < 1:
        raise ManifestError(f"manifest schema_version {manifest.schema_version} is not a version")
    return manifest


def encode(manifest: Manifest, indent: int = 2) -> bytes:
    """The manifest as JSON (keys in contract order)."""
    return msgspec.json.format(_ENCODER.encode(manifest), indent=indent)


def to_dict(manifest: Manifest) -> dict:
    """The manifest as plain JSON-ready values."""
    return msgspec.to_builtins(manifest)


__all__ = ["MANIFEST_FILE", "SCHEMA_VERSION", "Manifest", "ManifestError", "decode", "encode", "to_dict"]
