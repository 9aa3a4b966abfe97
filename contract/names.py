"""The names other stages read: file-name templates and trace annotations.

These strings are the contract between the tracer (which writes them) and the
analyzer (which matches them with the patterns below, derived from the same
templates). Change one only together with ``manifest.SCHEMA_VERSION``.
"""

from __future__ import annotations

import re

# One gzipped Chrome-trace JSON per rank, as ``prof.export_chrome_trace`` writes it.
TRACE_FILE_TEMPLATE = "rank-{rank}.pt.trace.json.gz"

# Facts gathered from all ranks, written by rank 0 next to the traces.
MANIFEST_FILE = "manifest.json"

# ``overlapscope capture --trigger DIR`` writes it into an armed job's folder: every rank
# profiles its next steps (its JSON may say how many: ``{"steps": N}``).
TRIGGER_FILE = "TRIGGER"

# A ``record_function`` range around the launch of one DDP bucket's collective.
# ``index`` is ``GradBucket.index()``: after DDP's bucket rebuild, the order in
# which the buckets' gradients become ready in backward.
BUCKET_ANNOTATION = "overlapscope:ddp_bucket#{index}"

# A ``record_function`` range around forward and backward of micro-batch ``index``
# (0-based) inside one optimizer step.
MICROBATCH_ANNOTATION = "overlapscope:microbatch#{index}"


def trace_file_name(rank: int) -> str:
    """The trace file name of ``rank`` inside a bundle folder."""
    return TRACE_FILE_TEMPLATE.format(rank=rank)


def bucket_annotation(index: int) -> str:
    """The range name that marks the collective of DDP bucket ``index``."""
    return BUCKET_ANNOTATION.format(index=index)


def microbatch_annotation(index: int) -> str:
    """The range name that marks micro-batch ``index`` of a step."""
    return MICROBATCH_ANNOTATION.format(index=index)


def _pattern(template: str) -> re.Pattern:
    """A template's full-match pattern; its one ``{field}`` becomes a captured integer."""
    head, _, rest = template.partition("{")
    _, _, tail = rest.partition("}")
    return re.compile("^" + re.escape(head) + r"(\d+)" + re.escape(tail) + "$")


# What the analyzer matches (group 1: the index).
BUCKET_PATTERN = _pattern(BUCKET_ANNOTATION)
MICROBATCH_PATTERN = _pattern(MICROBATCH_ANNOTATION)
TRACE_FILE_PATTERN = _pattern(TRACE_FILE_TEMPLATE)
