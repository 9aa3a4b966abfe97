"""A small transformer LM trained with DDP, FSDP2, FSDP1 or HSDP under the tracer.

Run ``python -m overlapscope.tracer.examples.train --help``.
"""
