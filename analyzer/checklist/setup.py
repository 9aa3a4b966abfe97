"""The run's setup as fixes need it, and fix texts picked by it.

A fix names what to change in *this* run: NCCL environment variables only on
NCCL, FSDP2's API on FSDP2 and FSDP1's on FSDP1, nothing about FSDP on a DDP
run. ``Setup`` holds the facts (backend, parallelism and FSDP flavour, device);
``pick`` chooses among a rule's variants the one written for the most of them,
and among those the most specific: ``hsdp`` before ``fsdp`` on an HSDP run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Setup:
    backend: str | None  # nccl, gloo, ... (None: the traces do not say)
    parallelism: str | None  # ddp, fsdp, hsdp (manifest or collectives; None: unknown)
    flavour: str | None  # fsdp1 or fsdp2 (from the ranges FSDP writes), None for DDP
    device: str  # gpu or cpu

    @property
    def inherited(self) -> frozenset[str]:
        """Tokens that hold only by family (``fsdp`` for an HSDP run): a variant written for
        the run's own parallelism beats one written for its family."""
        return frozenset({"fsdp"} if self.parallelism == "hsdp" else ())

    @property
    def tokens(self) -> frozenset[str]:
        """What variant keys may name: the parallelism, fsdp for HSDP too, the flavour,
        the backend (nccl also for GPU runs that name none), the device."""
        out = {self.device}
        if self.parallelism:
            out.add(self.parallelism)
            if self.parallelism == "hsdp":
                out.add("fsdp")
        if self.flavour:
            out.add(self.flavour)
        backend = self.backend or ("nccl" if self.device == "gpu" else None)
        if backend:
            out.add(backend)
        return frozenset(out)

    def describe(self) -> str:
        parts = [self.flavour.upper() if self.flavour and self.parallelism == "fsdp" else
                 (self.parallelism or "unknown parallelism").upper(), self.backend or "?", self.device.upper()]
        return " / ".join(parts)


def pick(setup: Setup, **variants: str) -> str:
    """The variant whose key's words (``fsdp2_nccl``, ``ddp``, ``gloo``; ``default``: none)
    all hold for ``setup``, preferring the key with the most words, then the one with the
    fewest inherited words (``hsdp`` over ``fsdp`` on an HSDP run, whatever the order given);
    remaining ties: the first given."""
    tokens, inherited = setup.tokens, setup.inherited
    best, best_score = None, None
    for key, text in variants.items():
        words = [] if key == "default" else key.split("_")
        score = (len(words), -sum(w in inherited for w in words))
        if all(w in tokens for w in words) and (best_score is None or score > best_score):
            best, best_score = text, score
    if best is None:
        raise KeyError(f"no fix variant for {sorted(tokens)} among {sorted(variants)}")
    return best


def join(*parts: str | None) -> str:
    """Sentences of a fix, the empty ones left out."""
    return " ".join(p.strip() for p in parts if p and p.strip())


def only_for(setup: Setup, family: str, fix: str) -> str:
    """``fix`` where the run is of ``family`` (ddp, fsdp: FSDP and HSDP) or unknown; a plain
    'nothing to change' where it is known to be another, naming the run's own parallelism
    only: no FSDP advice, nor the word, on a DDP run."""
    known = setup.parallelism
    if known is None or family in setup.tokens:
        return fix
    return f"Nothing to change here on a{'n' if known in ('fsdp', 'hsdp') else ''} {known.upper()} run."
