"""What the tracer writes and the analyzer reads: one definition, no torch, no duckdb.

- ``names``: the bundle's file names and the annotation ranges the tracer writes,
  with the patterns the analyzer matches them by (derived from the same strings);
- ``manifest``: ``manifest.json`` as a typed struct, with ``schema_version``
  checked on read;
- ``collectives``: the canonical collective kinds and nccl-tests' bus-bandwidth
  factors, used by the tracer's calibration and by the analyzer's model.
"""
