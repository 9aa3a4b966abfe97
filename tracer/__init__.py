"""overlapscope tracer: capture per-rank profiler traces of DDP and FSDP runs.

Add it around a training loop::

    from overlapscope.tracer import Tracer, TraceConfig, RunFacts

    with Tracer(model, TraceConfig(out_dir="run1"), RunFacts(tokens_per_microbatch=4096)) as tracer:
        for step in range(steps):
            for i, batch in enumerate(micro_batches):
                with tracer.microbatch(i):
                    loss_fn(model(batch)).backward()
            optimizer.step()
            optimizer.zero_grad()
            tracer.step()

It writes a run bundle: ``rank-<r>.pt.trace.json.gz`` per rank and one
``manifest.json``. The file names, trace annotations and manifest keys are the
contract with the analyzer: ``overlapscope.contract``.
This package imports torch; the analyzer never imports it.
"""

from overlapscope.tracer.calibration import CalibrationConfig
from overlapscope.tracer.ddp_buckets import allreduce_mean_hook, annotate_buckets
from overlapscope.tracer.manifest import RunFacts
from overlapscope.contract.manifest import SCHEMA_VERSION
from overlapscope.contract.names import BUCKET_ANNOTATION, MANIFEST_FILE, MICROBATCH_ANNOTATION, TRACE_FILE_TEMPLATE
from overlapscope.tracer.profiling import ProfileConfig
from overlapscope.tracer.session import TraceConfig, Tracer

__all__ = [
    "BUCKET_ANNOTATION",
    "MANIFEST_FILE",
    "MICROBATCH_ANNOTATION",
    "SCHEMA_VERSION",
    "TRACE_FILE_TEMPLATE",
    "CalibrationConfig",
    "ProfileConfig",
    "RunFacts",
    "TraceConfig",
    "Tracer",
    "allreduce_mean_hook",
    "annotate_buckets",
]
