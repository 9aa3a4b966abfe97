"""The names that other stages read: file-name templates and trace annotations.

These strings are a contract with the analyzer (it parses traces and manifests
without importing this package), so change them only together with
``SCHEMA_VERSION`` and the analyzer.
"""

# Version of the manifest's keys and meanings; bump on any incompatible change.
SCHEMA_VERSION = 1

# One gzipped Chrome-trace JSON per rank, as ``prof.export_chrome_trace`` writes it.
TRACE_FILE_TEMPLATE = "rank-{rank}.pt.trace.json.gz"

# Facts gathered from all ranks, written by rank 0 next to the traces.
MANIFEST_FILE = "manifest.json"

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
