"""``overlapscope model memory|comm|hide``: the data-parallel model's formulas on the command line.

A thin layer over the library (``analyzer.api``'s ``model_memory``, ``model_comm``
and ``model_hide``, the formulas of ``analyzer.model`` as reports): each flag is one
argument of a library call. Values are read here (not by argparse) so that a
bad value is one ``UsageError`` line and exit status 2.

Numbers (``--params``, ``--flops``, ``--bandwidth``, ``--tokens``, and the
counts) accept a decimal or scientific number with an optional decimal suffix:
K = 1e3, M = 1e6, B or G = 1e9, T = 1e12, P = 1e15, case-insensitive; ``_`` and
``,`` between digits are ignored. Examples: ``13e9``, ``13B``, ``70B``, ``1.5M``,
``400e12``, ``400T``, ``50e9``, ``50G``. Bandwidths are bytes/s: 400 Gb/s is
``50G``.

JSON keys are a contract (README, JSON): keys may be added,
never renamed. Sizes are in bytes (``*_bytes``) and GB = 1e9 bytes (``*_gb``);
times in milliseconds (``*_ms``).
"""

from __future__ import annotations

import argparse
import json
import re

from overlapscope.analyzer.api import model_comm as comm_report, model_hide as hide_report, \
    model_memory as memory_report
from overlapscope.analyzer.errors import UsageError
from overlapscope.analyzer.model.memory import STAGES, to_gb

NUMBER_HELP = "e.g. 13e9, 13B, 1.5M, 400T (K=1e3 M=1e6 B=G=1e9 T=1e12 P=1e15)"
_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}
_NUMBER = re.compile(r"^([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?|[0-9]+\.)([kmbgtp]?)$")


# --- reading values -----------------------------------------------------------------


def parse_quantity(text: str, flag: str, minimum: float = 0.0, allow_zero: bool = False) -> float:
    """Read ``text`` as a number with an optional suffix (see module doc).

    Raises ``UsageError`` naming ``flag`` when it is not a number, below
    ``minimum``, or zero without ``allow_zero``.
    """
    cleaned = re.sub(r"(?<=\d)[_,](?=\d)", "", text.strip().lower())
    match = _NUMBER.match(cleaned)
    if not match:
        raise UsageError(f"{flag}: cannot read {text!r} as a number; {NUMBER_HELP}")
    value = float(match.group(1)) * _SUFFIX[match.group(2)]
    if value < minimum or (value == 0 and not allow_zero):
        bound = f">= {minimum:g}" if allow_zero else "> 0"
        raise UsageError(f"{flag}: must be {bound}, got {text!r}")
    return value


def parse_count(text: str, flag: str) -> int:
    """Read ``text`` as a positive integer (suffixes allowed: ``1K`` = 1000)."""
    value = parse_quantity(text, flag)
    if value != int(value):
        raise UsageError(f"{flag}: must be a whole number, got {text!r}")
    return int(value)


def _optional(text: str | None, read, flag: str):
    return None if text is None else read(text, flag)


# --- output ---------------------------------------------------------------------------


def _print_json(payload: dict) -> None:
    print(json.dumps(payload, indent=2))


def _print_table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(title)
    for row in [header, *rows]:
        cells = [str(c).ljust(w) if i == 0 else str(c).rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip())


def _fmt(value: float, digits: int = 3) -> str:
    return f"{value:,.{digits}f}"


# --- model memory -----------------------------------------------------------------------


def _run_memory(args: argparse.Namespace) -> int:
    payload = memory_report(
        params=parse_quantity(args.params, "--params"),
        gpus=parse_count(args.gpus, "--gpus"),
        k=parse_quantity(args.k, "--k", allow_zero=True),
        group=_optional(args.group, parse_count, "--group"),
    )
    if args.json:
        _print_json(payload)
        return 0
    stages = [s for s in STAGES if f"{s}_gb" in payload]
    rows = [(s, _fmt(payload[f"{s}_gb"]), _fmt(payload[f"{s}_bytes"], 0)) for s in stages]
    group = f", G={payload['group']}" if payload["group"] else ""
    _print_table(f"model states per GPU (params={payload['params']:.4g}, N={payload['gpus']}, "
                 f"K={payload['k']:g}{group})", ("stage", "GB", "bytes"), rows)
    return 0


STAGE_HELP = "sharding stage: ddp, zero1, zero2, zero3 or hsdp (0 to 3 for ddp and zero1 to zero3; fsdp is zero3)"


def parse_stage(text: str) -> str:
    """A stage as users write it: ``3``, ``zero3``, ``ZeRO-3``, ``fsdp`` -> ``zero3``; ``0`` -> ``ddp``."""
    t = text.strip().lower().replace("-", "").replace("_", "")
    t = {"0": "ddp", "fsdp": "zero3"}.get(t, t)
    return f"zero{t}" if t in ("1", "2", "3") else t


# --- model comm -------------------------------------------------------------------------

COMM_TIMES = {  # the JSON's keys in words (text output)
    "comm_ms": "time per step at the bus bandwidth",
    "intra_ms": "time per step inside the shard groups (--intra-bandwidth)",
    "inter_ms": "time per step across the groups (--bandwidth)",
}


def _run_comm(args: argparse.Namespace) -> int:
    payload = comm_report(
        params=parse_quantity(args.params, "--params"),
        gpus=parse_count(args.gpus, "--gpus"),
        stage=args.stage,
        accum=parse_count(args.accum, "--accum"),
        group=_optional(args.group, parse_count, "--group"),
        grad_bytes=parse_quantity(args.grad_bytes, "--grad-bytes"),
        reshard_after_forward=not args.no_reshard,
        bandwidth=_optional(args.bandwidth, parse_quantity, "--bandwidth"),
        intra_bandwidth=_optional(args.intra_bandwidth, parse_quantity, "--intra-bandwidth"),
    )
    if args.json:
        _print_json(payload)
        return 0
    rows = [(f"{c['count']} x {c['kind']} ({c['tensor']}, {c['link']}, n={c['group_size']})",
             _fmt(c["message_elements"], 0), _fmt(to_gb(c["wire_bytes"])))
            for c in payload["collectives"]]
    rows.append(("total per GPU per step", _fmt(payload["elements_per_gpu"], 0),
                 _fmt(payload["gb_per_gpu"])))
    for key in ("intra", "inter"):
        if f"{key}_gb_per_gpu" in payload:
            rows.append((f"  {key}", "", _fmt(payload[f"{key}_gb_per_gpu"])))
    _print_table(f"communication per GPU per step ({payload['stage']}, N={payload['gpus']}, "
                 f"m={payload['accum']})", ("collective", "elements", "GB sent"), rows)
    for key, words in COMM_TIMES.items():
        if key in payload:
            print(f"{words}: {_fmt(payload[key], 1)} ms")
    return 0


# --- model hide ---------------------------------------------------------------------------

HIDE_ROWS = {  # the JSON's keys in words (text output)
    "stage": "stage",
    "stage_tokens_to_hide": "tokens to hide ({stage})",
    "tokens": "tokens per GPU per micro-batch T",
    "ratio": "comm time / compute time",
    "verdict": "verdict",
}


def _run_hide(args: argparse.Namespace) -> int:
    payload = hide_report(
        flops=parse_quantity(args.flops, "--flops"),
        bandwidth=parse_quantity(args.bandwidth, "--bandwidth"),
        gpus=_optional(args.gpus, parse_count, "--gpus"),
        grad_bytes=parse_quantity(args.grad_bytes, "--grad-bytes"),
        tokens=_optional(args.tokens, parse_quantity, "--tokens"),
        stage=args.stage,
    )
    if args.json:
        _print_json(payload)
        return 0
    n = "N -> infinity" if payload["gpus"] is None else f"N={payload['gpus']}"
    rows = [("tokens to hide (DDP all-reduce)", _fmt(payload["tokens_to_hide"], 0))]
    for key, words in HIDE_ROWS.items():
        if key in payload:
            value = payload[key]
            words = words.format(stage=payload.get("stage"))
            rows.append((words, value if isinstance(value, str) else _fmt(value, 3 if key == "ratio" else 0)))
    _print_table(f"tokens per GPU per micro-batch to hide the communication ({n})",
                 ("quantity", "value"), rows)
    if "reason" in payload:
        print(f"reason: {payload['reason']}")
    return 0


# --- parser -----------------------------------------------------------------------------


def _add_memory(sub) -> None:
    p = sub.add_parser("memory", help="model-state memory per GPU for every stage",
                       description="Model states per GPU (docs/model.md): DDP (4+K)Psi, "
                                   "ZeRO-1 4Psi+K Psi/N, ZeRO-2 2Psi+(2+K)Psi/N, ZeRO-3 (4+K)Psi/N, "
                                   "HSDP (4+K)Psi/G. 1 GB = 1e9 bytes.")
    p.add_argument("--params", required=True, help=f"number of parameters Psi ({NUMBER_HELP})")
    p.add_argument("--gpus", required=True, help="data-parallel GPUs N_d")
    p.add_argument("--k", default="12", help="optimizer bytes per parameter K (default 12: mixed-precision Adam)")
    p.add_argument("--group", help="HSDP shard group size G (adds hsdp_*; must divide --gpus)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_run_memory)


def _add_comm(sub) -> None:
    p = sub.add_parser("comm", help="elements and bytes each GPU sends per step",
                       description="Communication per GPU per optimizer step (docs/model.md): "
                                   "elements DDP 2Psi, ZeRO-1 2Psi, ZeRO-2 (m+1)Psi, ZeRO-3 3mPsi; "
                                   "bytes = elements x bytes per element x (N-1)/N.")
    p.add_argument("--params", required=True, help=f"number of parameters Psi ({NUMBER_HELP})")
    p.add_argument("--gpus", required=True, help="data-parallel GPUs N_d")
    p.add_argument("--stage", required=True, type=parse_stage, choices=STAGES, metavar="STAGE", help=STAGE_HELP)
    p.add_argument("--accum", default="1", help="micro-batches per optimizer step m (default 1)")
    p.add_argument("--group", help="HSDP shard group size G (required for hsdp)")
    p.add_argument("--grad-bytes", default="2", help="bytes per gradient element in reductions (default 2: bf16; 4: fp32)")
    p.add_argument("--no-reshard", action="store_true",
                   help="reshard_after_forward=False: no backward all-gather (zero3, hsdp)")
    p.add_argument("--bandwidth", help="bus bandwidth W in bytes/s (adds comm_ms; for hsdp inter_ms)")
    p.add_argument("--intra-bandwidth", help="hsdp: bus bandwidth inside the group in bytes/s (adds intra_ms)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_run_comm)


def _add_hide(sub) -> None:
    p = sub.add_parser("hide", help="tokens per GPU per micro-batch that hide the communication",
                       description="T >= (grad_bytes/2) F/W (N-1)/N (docs/model.md). Without "
                                   "--gpus, the large-N limit F/W. With --tokens, the ratio of comm "
                                   "time to compute time and a verdict (hidden, marginal, exposed).")
    p.add_argument("--flops", required=True, help=f"achieved FLOP/s per GPU F ({NUMBER_HELP})")
    p.add_argument("--bandwidth", required=True, help="bus bandwidth per GPU W in bytes/s (400 Gb/s = 50G)")
    p.add_argument("--gpus", help="data-parallel GPUs N_d (default: the large-N limit)")
    p.add_argument("--grad-bytes", default="2", help="bytes per gradient element (default 2: bf16; 4: fp32)")
    p.add_argument("--tokens", help="tokens per GPU per micro-batch T: adds ratio and verdict")
    p.add_argument("--stage", type=parse_stage, choices=[s for s in STAGES if s != "hsdp"], metavar="STAGE",
                   help="the stage of the tokens to hide and the verdict (default ddp): " + STAGE_HELP.split(": ", 1)[1]
                        .replace(" or hsdp", ""))
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_run_hide)


def add_parser(subparsers) -> None:
    """Register ``model`` and its subcommands ``memory``, ``comm`` and ``hide``."""
    parser = subparsers.add_parser("model", help="the data-parallel model: memory, comm, hide",
                                   description="The analytic model of DDP, ZeRO and FSDP "
                                               "(derived in docs/model.md).")
    sub = parser.add_subparsers(dest="model_command", metavar="SUBCOMMAND")
    sub.required = True
    _add_memory(sub)
    _add_comm(sub)
    _add_hide(sub)
