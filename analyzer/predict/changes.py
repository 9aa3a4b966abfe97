"""What a what-if changes: the flags of ``overlapscope whatif`` as one typed value.

A ``Changes`` holds every change at once (they combine); ``None`` keeps what the
run measured. Values are read here, not by argparse, so that a bad one is one
``UsageError`` line naming its flag. ``sweep`` turns ``NAME=V1,V2,...`` into one
``Changes`` per value, on top of the other changes.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from overlapscope.analyzer.errors import UsageError

WRAPS = ("per-block", "root-only")
LATE = -1  # on_time's "late": the rank the others wait for, found in the run
REDUCE_DTYPES = {"bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp32": 4, "float32": 4}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgt]?)\s*(x?)\s*$", re.IGNORECASE)
_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
# What a sweep may vary, per parallelism, with the values tried by default (the
# dashboard's sweep panel); the first is the sweep a run shows first, stored at ingest.
SWEEPS = {
    "ddp": {"bucket-mb": "1,5,25,100", "tokens": "0.5x,1x,2x,4x", "bandwidth": "0.5x,1x,2x,4x", "gpus": "2,4,8,16"},
    "fsdp": {"tokens": "0.5x,1x,2x,4x", "bandwidth": "0.5x,1x,2x,4x", "gpus": "2,4,8,16"},
}


def sweep_family(parallelism: str | None) -> str:
    """``SWEEPS``' key for a run's parallelism (DDP when unknown: a foreign trace)."""
    return "ddp" if (parallelism or "ddp") == "ddp" else "fsdp"


def default_sweep(parallelism: str | None) -> str:
    """The first sweep of a run's parallelism, as ``NAME=V1,V2,...``."""
    name, values = next(iter(SWEEPS[sweep_family(parallelism)].items()))
    return f"{name}={values}"


def sweep_spec(result: dict) -> str:
    """The ``NAME=V1,V2,...`` of a sweep's JSON (``whatif``'s ``sweep``)."""
    return f"{result['name']}={','.join(p['value'] for p in result['points'])}"


@dataclass(frozen=True)
class Scale:
    """A value given as itself (``1024``, ``50G``) or as a multiple of the measured one (``2x``)."""

    value: float
    ratio: bool

    def of(self, measured: float | None) -> float | None:
        """The value this scale gives for a run that measured ``measured`` (None: unknown)."""
        if not self.ratio:
            return self.value
        return None if measured is None else measured * self.value

    def __str__(self) -> str:
        return f"{self.value:g}x" if self.ratio else f"{self.value:g}"


@dataclass(frozen=True)
class Changes:
    """A configuration to predict, as changes to the measured one (None: as measured)."""

    bucket_mb: float | str | None = None
    """DDP bucket_cap_mb (MiB) set to this: buckets rebuilt from the parameters (the manifest's, else
    the trace's AccumulateGrad ranges), every bucket up to it; ``"default"``: the cap left unset
    (25 MiB, the first bucket 1 MiB: BUCKET_DEFAULT)."""
    sync: bool | None = None
    """Gradient accumulation: True all-reduces in every micro-batch, False only in the last (no_sync)."""
    accum: int | None = None
    """Micro-batches per optimizer step."""
    reshard_after_forward: bool | None = None
    """FSDP: free the gathered weights after forward (True) or keep them for backward (False)."""
    forward_prefetch: bool | None = None
    """FSDP: issue the next unit's forward all-gather while the current unit computes."""
    backward_prefetch: bool | None = None
    """FSDP: issue the next unit's backward all-gather before the current unit's reduce-scatter."""
    wrap: str | None = None
    """FSDP units: ``per-block`` (one per repeated block, the rest in the root) or ``root-only``."""
    hsdp: int | None = None
    """Shard within groups of this many ranks, replicate across the groups (HSDP)."""
    intra_bandwidth: float | None = None
    """Bus bandwidth (bytes/s) inside a shard group (HSDP)."""
    inter_bandwidth: float | None = None
    """Bus bandwidth (bytes/s) across shard groups (HSDP's all-reduce)."""
    tokens: Scale | None = None
    """Tokens per GPU per micro-batch: compute of the passes scales with it."""
    bandwidth: Scale | None = None
    """Bus bandwidth W of every collective (bytes/s, or a multiple of the measured one)."""
    gpus: int | None = None
    """Data-parallel world size: the ring's bytes and hops at this size."""
    reduce_dtype: str | None = None
    """Dtype gradients are reduced in (bf16 or fp32)."""
    on_time: int | None = None
    """A rank that keeps up (``LATE``: the one whose late arrivals cost the others the most
    wait, whatif.late_rank): it arrives at each collective when the latest other rank does,
    so the others wait only for each other; the run's figures are then the other ranks'."""

    def is_empty(self) -> bool:
        """No change: the replay of the run as measured."""
        return all(getattr(self, f.name) is None for f in dataclasses.fields(self))

    def as_json(self) -> dict:
        """The changes given, by flag name (the ``changes`` object of ``whatif --json``)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = str(value) if isinstance(value, Scale) else "late" if (
                    f.name == "on_time" and value == LATE) else value
        return out

    def label(self) -> str:
        """The changes as flags, e.g. ``--bucket-mb 5 --no-sync`` ("no change" when empty)."""
        words = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            flag = "--" + f.name.replace("_", "-")
            if f.name == "sync":
                words.append("--sync" if value else "--no-sync")
            elif f.name == "on_time":
                words.append(f"{flag} {'late' if value == LATE else value}")
            elif isinstance(value, bool):
                words.append(f"{flag} {'on' if value else 'off'}")
            elif f.name in ("intra_bandwidth", "inter_bandwidth"):
                words.append(f"{flag} {value / 1e9:g}G")
            else:
                words.append(f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
        return " ".join(words) or "no change"


# --- reading values -------------------------------------------------------------------


def parse_number(text: str, flag: str, ratio_ok: bool = False) -> Scale:
    """``text`` as a positive number with an optional K/M/G/T suffix, or ``Nx`` where allowed."""
    match = _NUMBER.match(str(text))
    if not match or (match.group(3) and match.group(2)):
        raise UsageError(f"{flag}: cannot read {text!r} as a number (e.g. 25, 0.5, 50G{', 2x' if ratio_ok else ''})")
    if match.group(3) and not ratio_ok:
        raise UsageError(f"{flag}: takes a value, not a multiple: got {text!r}")
    value = float(match.group(1)) * _SUFFIX[match.group(2).lower()]
    if value <= 0:
        raise UsageError(f"{flag}: must be > 0, got {text!r}")
    return Scale(value, bool(match.group(3)))


def parse_count(text: str, flag: str) -> int:
    """``text`` as a positive whole number."""
    value = parse_number(text, flag).value
    if value != int(value):
        raise UsageError(f"{flag}: must be a whole number, got {text!r}")
    return int(value)


def parse_switch(text: str, flag: str) -> bool:
    """on|off (also true|false, 1|0, yes|no)."""
    word = str(text).strip().lower()
    if word in ("on", "true", "1", "yes"):
        return True
    if word in ("off", "false", "0", "no"):
        return False
    raise UsageError(f"{flag}: must be on or off, got {text!r}")


def parse_rank(text: str, flag: str) -> int:
    """A rank number, or ``late``: the rank the others wait for (``LATE``)."""
    word = str(text).strip().lower()
    if word == "late":
        return LATE
    if not word.isdigit():
        raise UsageError(f"{flag}: must be a rank number or 'late', got {text!r}")
    return int(word)


def parse_wrap(text: str, flag: str = "--wrap") -> str:
    word = str(text).strip().lower()
    if word not in WRAPS:
        raise UsageError(f"{flag}: must be one of {', '.join(WRAPS)}, got {text!r}")
    return word


def parse_dtype(text: str, flag: str = "--reduce-dtype") -> str:
    word = str(text).strip().lower()
    if word not in REDUCE_DTYPES:
        raise UsageError(f"{flag}: must be bf16 or fp32, got {text!r}")
    return "bf16" if REDUCE_DTYPES[word] == 2 else "fp32"


# --bucket-mb default: DDP's bucket_cap_mb left unset (torch makes a 1 MiB first bucket only then)
BUCKET_DEFAULT = "default"


# name on the command line -> (field, reader)
READERS = {
    "bucket-mb": ("bucket_mb", lambda t, f: BUCKET_DEFAULT if str(t).strip().lower() in (BUCKET_DEFAULT, "unset")
                  else parse_number(t, f).value),
    "accum": ("accum", parse_count),
    "sync": ("sync", parse_switch),
    "reshard-after-forward": ("reshard_after_forward", parse_switch),
    "forward-prefetch": ("forward_prefetch", parse_switch),
    "backward-prefetch": ("backward_prefetch", parse_switch),
    "wrap": ("wrap", parse_wrap),
    "hsdp": ("hsdp", parse_count),
    "intra-bandwidth": ("intra_bandwidth", lambda t, f: parse_number(t, f).value),
    "inter-bandwidth": ("inter_bandwidth", lambda t, f: parse_number(t, f).value),
    "tokens": ("tokens", lambda t, f: parse_number(t, f, ratio_ok=True)),
    "bandwidth": ("bandwidth", lambda t, f: parse_number(t, f, ratio_ok=True)),
    "gpus": ("gpus", parse_count),
    "reduce-dtype": ("reduce_dtype", parse_dtype),
    "on-time": ("on_time", parse_rank),
}


def read(values: dict[str, str | bool | None]) -> Changes:
    """A ``Changes`` from raw flag values keyed by their command-line names (None: not given;
    ``sync`` is already a bool)."""
    kwargs = {}
    for name, raw in values.items():
        if raw is None:
            continue
        field, reader = READERS[name]
        kwargs[field] = raw if isinstance(raw, bool) else reader(raw, "--" + name)
    return check(Changes(**kwargs))


def check(c: Changes) -> Changes:
    """Reject combinations that mean nothing (one line each)."""
    if (c.intra_bandwidth or c.inter_bandwidth) and c.hsdp is None:
        raise UsageError("--intra-bandwidth/--inter-bandwidth: give --hsdp G with them (they are HSDP's links)")
    if c.hsdp is not None and c.gpus is not None and c.gpus % c.hsdp:
        raise UsageError(f"--hsdp {c.hsdp}: must divide --gpus {c.gpus}")
    return c


def sweep(spec: str, base: Changes) -> tuple[str, list[tuple[str, Changes]]]:
    """``NAME=V1,V2,...`` (e.g. ``bucket-mb=1,5,25,100``, ``tokens=0.5x,1x,2x``) on top of
    ``base``: the swept flag and one (value as given, changes) per value."""
    name, sep, values = spec.partition("=")
    name = name.strip().lstrip("-")
    if not sep or name not in READERS or not values.strip():
        raise UsageError(f"--sweep: expected NAME=V1,V2,... with NAME one of {', '.join(READERS)}; got {spec!r}")
    field, reader = READERS[name]
    points = []
    for raw in (v.strip() for v in values.split(",")):
        if not raw:
            raise UsageError(f"--sweep {spec!r}: an empty value")
        points.append((raw, check(dataclasses.replace(base, **{field: reader(raw, f"--sweep {name}")}))))
    return name, points
