"""The Ray engine: the map over ranks as Ray tasks, one per rank (``--engine ray``).

Each task runs ``rank.map_rank`` (or collects what the rank reduced in place,
``inplace.py``) where Ray places it: it reads its rank's trace
where it lies (a shared file system, or a URI of object storage: ingest/files.py),
writes the rank's Parquet files into the run store when the run is stored (the
store must be on a file system every node sees), and returns only the rank's
tables, through Ray's object store. The reduce runs here, on the driver.

With ``address`` the tasks go to that cluster (``ray.init(address=...)``); without
one a local Ray is started for the command and stopped after it. Ray is an
optional extra (``pip install 'overlapscope[ray]'``).
"""

from __future__ import annotations

import os

from overlapscope.analyzer.engine.inplace import map_or_collect
from overlapscope.analyzer.engine.rank import RankResult, RankTask
from overlapscope.analyzer.errors import UsageError


def _ray():
    try:
        import ray
    except ImportError:
        raise UsageError("--engine ray needs Ray: pip install 'overlapscope[ray]'") from None
    return ray


def _start(ray, address: str | None) -> bool:
    """Connect to (or start) Ray; whether this call started it (and so stops it)."""
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    try:
        if address:
            ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        else:
            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise UsageError(f"cannot reach Ray{f' at {address}' if address else ''}: {str(err).splitlines()[0]}") \
            from None
    return True


def _cause(ray, err: Exception) -> Exception:
    """The task's own error (an input error stays the input's one line), not Ray's wrapper."""
    if isinstance(err, ray.exceptions.RayTaskError):
        cause = err.as_instanceof_cause()
        inner = getattr(err, "cause", None)
        return inner if isinstance(inner, Exception) else cause
    return err


def run(tasks: list[RankTask], address: str | None = None, on_done=None) -> list[RankResult]:
    """``[map_rank(t) for t in tasks]`` as Ray tasks, in order; the first failure stops the map."""
    ray = _ray()
    started = _start(ray, address)
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(map_or_collect)
        refs = [remote.remote(t) for t in tasks]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[RankResult | None] = [None] * len(refs)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                results[index[done[0]]] = ray.get(done[0])
            except Exception as err:
                for ref in pending:
                    ray.cancel(ref, force=True)
                raise _cause(ray, err) from None
            if on_done:
                on_done(len(refs) - len(pending), len(refs))
        return results
    finally:
        if started:
            ray.shutdown()
