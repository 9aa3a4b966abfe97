"""Ring collectives: bytes on the wire, bus bandwidth, predicted time, latency fit.

Pure functions, no I/O. docs/model.md, "The ring factor" (a ring reduce-scatter or
all-gather of n bytes sends (N-1)/N n bytes per GPU; a ring all-reduce twice
that) and the bus-bandwidth definitions of nccl-tests (``PERFORMANCE.md``).

Conventions used by every function here:

- ``message_bytes`` is the size of the *full* buffer of the collective: the
  buffer that is all-reduced, the output of an all-gather, the input of a
  reduce-scatter (the ``size`` column of nccl-tests). A trace's per-rank
  ``In msg nelems`` of an all-gather is ``message / N``; convert before calling.
- ``gpus`` is the number of ranks in the collective's process group.
- Bandwidths are bytes per second, per GPU and direction (nccl-tests ``busbw``).
- The *bus factor* turns the full buffer size into the bytes one GPU sends on a
  ring, so ``bytes on the wire = message_bytes x bus_factor`` and the predicted
  time is ``latency_s + message_bytes x bus_factor / busbw``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Iterable, Sequence

# The kinds and bus factors are the contract's (shared with the tracer's calibration).
from overlapscope.contract.collectives import bus_factor, collective_kind


def _check_gpus(gpus: int) -> None:
    if not isinstance(gpus, numbers.Integral) or isinstance(gpus, bool) or gpus < 1:
        raise ValueError(f"the number of GPUs must be a positive integer, got {gpus!r}")


def wire_bytes(kind: str, message_bytes: float, gpus: int) -> float:
    """Bytes one GPU sends for one ring collective of ``message_bytes`` (full buffer).

    Reduce-scatter or all-gather of n bytes: (N-1)/N n; all-reduce: 2(N-1)/N n.
    """
    if message_bytes < 0:
        raise ValueError(f"message size must be >= 0 bytes, got {message_bytes}")
    return message_bytes * bus_factor(kind, gpus)


def ring_latency_s(kind: str, gpus: int, alpha_s: float) -> float:
    """Latency term of a ring collective: hops x alpha (seconds).

    All-reduce takes 2(N-1) hops (docs/model.md: "the latency term 2(N_d-1)alpha");
    reduce-scatter, all-gather, all-to-all, broadcast and reduce take N-1;
    send_recv one.
    """
    _check_gpus(gpus)
    kind = collective_kind(kind)
    if kind is None:
        raise ValueError("not a collective")
    if kind == "all_reduce":
        hops = 2 * (gpus - 1)
    elif kind == "send_recv":
        hops = 1
    else:
        hops = gpus - 1
    return hops * alpha_s


def collective_time_s(
    kind: str, message_bytes: float, gpus: int, busbw_bytes_per_s: float, latency_s: float = 0.0
) -> float:
    """Predicted time of one collective (seconds): latency_s + message x bus factor / busbw.

    The bandwidth term is the bytes one GPU puts on the wire divided by the bus
    bandwidth W; ``latency_s`` is the whole latency term of this collective (see
    ``ring_latency_s`` and ``fit_latency``).
    """
    if busbw_bytes_per_s <= 0:
        raise ValueError(f"bus bandwidth must be > 0 bytes/s, got {busbw_bytes_per_s}")
    if latency_s < 0:
        raise ValueError(f"latency must be >= 0 s, got {latency_s}")
    return latency_s + wire_bytes(kind, message_bytes, gpus) / busbw_bytes_per_s


@dataclass(frozen=True)
class LatencyFit:
    """Result of fitting ``seconds = latency_s + wire_bytes / busbw`` to measurements."""

    latency_s: float
    """Fitted latency term of one collective (seconds), never negative."""
    busbw_bytes_per_s: float | None
    """Bus bandwidth (bytes/s): the one given, the fitted one, or None when the
    points cannot determine it (one message size, or time not growing with size)."""
    points: int
    """Number of (bytes, seconds) pairs used."""
    residual_rms_s: float
    """Root-mean-square of measured minus predicted time (seconds)."""

    def predict_s(self, wire_bytes_: float) -> float:
        """Predicted time (s) of a collective that puts ``wire_bytes_`` on the wire."""
        if self.busbw_bytes_per_s is None:
            return self.latency_s
        return self.latency_s + wire_bytes_ / self.busbw_bytes_per_s


def _rms(values: Iterable[float]) -> float:
    values = list(values)
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else 0.0


def _fit_free(xs: Sequence[float], ts: Sequence[float]) -> tuple[float, float | None]:
    """Least squares of t = a + b x with a >= 0 and b > 0; returns (a, 1/b or None)."""
    n = len(xs)
    x_mean, t_mean = sum(xs) / n, sum(ts) / n
    sxx = sum((x - x_mean) ** 2 for x in xs)
    sxt = sum((x - x_mean) * (t - t_mean) for x, t in zip(xs, ts))
    if sxx == 0 or sxt <= 0:  # one size, or no growth with size: latency only
        return max(t_mean, 0.0), None
    slope = sxt / sxx
    intercept = t_mean - slope * x_mean
    if intercept >= 0:
        return intercept, 1.0 / slope
    slope = sum(x * t for x, t in zip(xs, ts)) / sum(x * x for x in xs)  # through the origin
    return 0.0, (1.0 / slope if slope > 0 else None)


def fit_latency(
    points: Sequence[tuple[float, float]], busbw_bytes_per_s: float | None = None
) -> LatencyFit:
    """Fit the latency term (and optionally the bus bandwidth) to measured collectives.

    ``points`` are ``(wire_bytes, seconds)`` pairs of collectives of one kind and
    group size, ``wire_bytes = message_bytes x bus_factor`` (see ``wire_bytes``).
    Small collectives carry the information about latency.

    - With ``busbw_bytes_per_s`` given, only the latency is fitted: the mean of
      ``seconds - wire_bytes / busbw``, clipped at 0.
    - Without it, ordinary least squares of ``seconds = a + wire_bytes / busbw``.
      When the intercept comes out negative the fit is redone through the origin
      (a = 0). With one distinct size, or when time does not grow with size, the
      bandwidth is undetermined: all of the mean time is latency and
      ``busbw_bytes_per_s`` is None.

    Works with one point. Raises ``ValueError`` for no points or negative values.
    """
    if not points:
        raise ValueError("fit_latency needs at least one (bytes, seconds) pair")
    xs = [float(b) for b, _ in points]
    ts = [float(t) for _, t in points]
    if min(xs) < 0 or min(ts) < 0:
        raise ValueError("bytes and seconds must be >= 0")
    if busbw_bytes_per_s is not None:
        if busbw_bytes_per_s <= 0:
            raise ValueError(f"bus bandwidth must be > 0 bytes/s, got {busbw_bytes_per_s}")
        latency = max(0.0, sum(t - x / busbw_bytes_per_s for x, t in zip(xs, ts)) / len(xs))
        busbw = busbw_bytes_per_s
    else:
        latency, busbw = _fit_free(xs, ts)
    fit = LatencyFit(latency, busbw, len(xs), 0.0)
    residual = _rms(t - fit.predict_s(x) for x, t in zip(xs, ts))
    return LatencyFit(latency, busbw, len(xs), residual)
