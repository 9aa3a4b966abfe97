"""How long a collective takes: the data-parallel model's ring model, fitted to this run.
The one comm model of the prediction engine: the ``buckets`` report's predicted comm
and the what-if's ``model_ms`` are its time of each collective.

Per collective kind, the ring model ``t = hops x alpha + bytes x bus_factor / W``
(model.ring) with alpha and W fitted by least squares: on the tracer's calibration
of the kind when it has two sizes or more (measured apart from the run, so without
contention), else on this trace's own transfers of the kind (each its comm less its
wait for the last peer: a late rank is no slow link), else W from the
buckets report's sources and no latency, else (a kind with no W of its own) the
run's W and no latency. The fit gives the shape (how time grows with bytes, hops and
W); under a change, the level comes from the measurement:

- a collective that the change keeps (same transfer, other bytes, group or W) takes
  its measured time x model(changed) / model(measured);
- a collective that the change creates (new buckets, new units, HSDP's all-reduce)
  takes model(changed) x the ratio measured / model of the collectives it replaces
  (their group in the step: a bucket from that pass's buckets), so the run's own
  contention and waits carry over.
"""

from __future__ import annotations

from dataclasses import dataclass

from overlapscope.analyzer.model.ring import bus_factor, fit_latency, ring_latency_s


@dataclass(frozen=True)
class Fit:
    """alpha and W of one collective kind."""

    alpha_s: float
    """Latency per ring hop (seconds)."""
    busbw_bytes_per_s: float
    """Bus bandwidth W (bytes/s)."""
    source: str
    """calibration, trace, sources (the buckets report's W of the kind, no latency) or run (the run's W, no latency)."""

    @property
    def fitted(self) -> bool:
        """alpha and W fitted on two sizes or more (calibration or trace): the latency, none
        included, is a measurement; otherwise no latency term is known."""
        return self.source in ("calibration", "trace")


@dataclass(frozen=True)
class Terms:
    """What one predicted collective time is made of (the ``collectives`` rows of whatif)."""

    latency_ms: float
    wire_bytes: float
    busbw_bytes_per_s: float
    model_ms: float  # latency + wire bytes / W, before the run's level

    def as_json(self) -> dict:
        return {"latency_ms": round(self.latency_ms, 6), "wire_bytes": round(self.wire_bytes),
                "busbw_bytes_per_s": round(self.busbw_bytes_per_s), "model_ms": round(self.model_ms, 6)}


_TERMS_KEPT = 4_096  # distinct collectives whose terms a model keeps


def _hops(kind: str, gpus: int) -> float:
    return ring_latency_s(kind, gpus, 1.0) if gpus > 1 else 0.0


def _fit(points: list[tuple[str, float, int, float]]) -> tuple[float, float] | None:
    """alpha per hop and W from (kind, bytes, gpus, seconds) of one kind: ``seconds / hops``
    against ``wire / hops`` keeps the fit linear in alpha and 1/W."""
    xs = [(bus_factor(k, g) * b, _hops(k, g), t) for k, b, g, t in points if g > 1 and b > 0]
    if len({round(x) for x, _, _ in xs}) < 2:
        return None
    fit = fit_latency([(x / h, t / h) for x, h, t in xs])
    if not fit.busbw_bytes_per_s:
        return None
    return fit.latency_s, fit.busbw_bytes_per_s


def _transfer_ms(r) -> float:
    """A measured collective's transfer: its comm less its wait for peers (all of it where
    no peer was loaded)."""
    return r.transfer_ms if r.transfer_ms is not None else r.comm_ms


class CommModel:
    """The fitted ring model of one run (see the module)."""

    def __init__(self, calibration, rows, w_by_kind: dict[str, float], w_bytes_per_s: float | None = None):
        """``w_by_kind``: W of each kind from the buckets report's sources; ``w_bytes_per_s``:
        the run's W, for a kind with no W of its own."""
        self.fits: dict[str, Fit] = {}
        kinds = {r.collective for r in rows if r.collective} | {c.kind for c in (calibration.collectives if
                                                                                calibration else [])} | set(w_by_kind)
        for kind in sorted(kinds):
            cal = [(c.kind, c.bytes, c.group_size, c.seconds) for c in (calibration.collectives if calibration else [])
                   if c.kind == kind]
            # each transfer apart from its wait for the last peer (a late peer is no slow link)
            traced = [(r.collective, r.bytes, r.group_size, t / 1e3) for r in rows
                      if r.collective == kind and r.bytes and r.group_size and (t := _transfer_ms(r)) > 0]
            for source, points in (("calibration", cal), ("trace", traced)):
                fitted = _fit(points)
                if fitted:
                    self.fits[kind] = Fit(fitted[0], fitted[1], source)
                    break
            else:
                if w_by_kind.get(kind) or w_bytes_per_s:
                    self.fits[kind] = Fit(0.0, w_by_kind.get(kind) or w_bytes_per_s,
                                          "sources" if w_by_kind.get(kind) else "run")

    @classmethod
    def of_fits(cls, fits: dict[str, Fit]) -> "CommModel":
        """The model of fits already made (a run's stored engine state, predict.state)."""
        model = cls.__new__(cls)
        model.fits = dict(fits)
        return model

    def terms(self, kind: str, nbytes: float, gpus: int, w_scale: float = 1.0,
              w_bytes_per_s: float | None = None) -> Terms | None:
        """The model's time of one collective: at W x ``w_scale``, or at ``w_bytes_per_s``
        (given, it needs no fit of the kind: then no latency term is known, only the wire)."""
        # a function of its arguments and the fits: computed once per distinct collective (a
        # what-if of a run retimes each of its buckets' few sizes on every rank and step)
        key = (kind, nbytes, gpus, w_scale, w_bytes_per_s)
        memo = self.__dict__.setdefault("_terms", {})
        if key in memo:
            return memo[key]
        fit = self.fits.get(kind)
        if (fit is None and not w_bytes_per_s) or gpus < 1:
            terms = None
        else:
            w = w_bytes_per_s or fit.busbw_bytes_per_s * w_scale
            latency_s = fit.alpha_s * _hops(kind, gpus) if fit else 0.0
            wire = bus_factor(kind, gpus) * nbytes if gpus > 1 else 0.0
            terms = Terms(latency_s * 1e3, wire, w, (latency_s + wire / w) * 1e3)
        if len(memo) >= _TERMS_KEPT:  # sizes made by a change can all differ: never one entry per collective
            memo.clear()
        memo[key] = terms
        return terms

    def model_ms(self, kind: str, nbytes: float, gpus: int, w_scale: float = 1.0,
                 w_bytes_per_s: float | None = None) -> float | None:
        t = self.terms(kind, nbytes, gpus, w_scale, w_bytes_per_s)
        return t.model_ms if t else None
