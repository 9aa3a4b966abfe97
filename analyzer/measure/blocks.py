"""Blocks and keys of a run's collectives' rows: what a reader of the columns takes at a
time, and how a row is found by its (rank, event_id).

The columns (``measure.collectives.Collectives``) hold every row of the run; a reader that
makes Python values, sorted copies or keys of them takes a block at a time, so that what it
holds beside the columns is a block's, not the run's. A leaf module: ``collectives`` and
``waits`` both read it.
"""

from __future__ import annotations

# Rows a reader of the columns takes at a time where it makes Python values or sorts copies
# (a Selection's iteration, the model's predictions): what it holds is a block's, not the run's.
ROWS_PER_BLOCK = 65_536

# a collective's key: rank << EVENT_ID_BITS | event_id (a rank has far fewer events), one int64
# where a tuple of two took 120 bytes (waits.sql's queries take it as $event_id_bits)
EVENT_ID_BITS = 40


def rank_blocks(rank, rows_per_block: int = ROWS_PER_BLOCK) -> list[tuple[int, int]]:
    """The rows (``start``, ``stop``) of consecutive whole ranks, at most ``rows_per_block``
    rows together (one rank with more alone), from a NumPy column of ranks in rank order (a
    ``Collectives``'): what a reader takes at a time where its figures are per rank or per
    (rank, step), none of which a block then splits. Ranks out of order (rows listed some
    other way): one block of every row."""
    import numpy as np

    if not len(rank):
        return []
    if (rank[1:] < rank[:-1]).any():
        return [(0, len(rank))]
    starts = np.flatnonzero(rank[1:] != rank[:-1]) + 1  # where each rank's rows but the first begin
    edges = [0, *starts.tolist(), len(rank)]
    blocks, start = [], 0
    for k in range(1, len(edges)):
        if edges[k] - start > rows_per_block and edges[k - 1] > start:  # the ranks before k fill a block
            blocks.append((start, edges[k - 1]))
            start = edges[k - 1]
    blocks.append((start, len(rank)))
    return blocks


def key_index(keys, rank, event_id, rows_per_block: int = ROWS_PER_BLOCK):
    """Per row of (``rank``, ``event_id``) columns: the index of its key (``EVENT_ID_BITS``) in
    ``keys`` (sorted, unique), -1 where it has none; int32. The rows' keys are made a block of
    whole ranks at a time (a run's at once: 16 MiB a million rows)."""
    import numpy as np

    found = np.full(len(rank), -1, np.int32)
    if not len(keys):
        return found
    for start, stop in rank_blocks(rank, rows_per_block):
        want = (rank[start:stop] << EVENT_ID_BITS) | event_id[start:stop]
        at = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
        found[start:stop] = np.where(keys[at] == want, at, -1)
    return found
