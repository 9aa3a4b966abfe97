"""``measure.collectives.compute`` finishes the SQL's rows with NumPy, per distinct value (the
manifest's group sizes, an all-gather's gathered bytes, nccl-tests' bus bandwidth, FSDP1's
unit names). Against the same rules applied row by row in plain Python here, from
``contract.collectives.bus_factor`` and the manifest (docs/design: one row per transfer),
over random batches of SQL rows."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings, strategies as st

from overlapscope.analyzer.measure import blocks, collectives as cols
from overlapscope.contract.collectives import bus_factor
from overlapscope.contract.manifest import Manifest, Mesh, Unit

# collectives.sql's columns as stats_waited gives them (types as DuckDB's Arrow)
SCHEMA = pa.schema([
    ("rank", pa.int32()), ("step", pa.int64()), ("event_id", pa.int64()), ("kind", pa.string()), ("id", pa.string()),
    ("phase", pa.string()), ("inferred", pa.bool_()), ("microbatch", pa.int64()), ("collective", pa.string()),
    ("bytes", pa.int64()), ("shard_only", pa.bool_()), ("dtype", pa.string()), ("group_size", pa.int64()),
    ("ts_ns", pa.int64()), ("comm_ns", pa.int64()), ("cpu_launch_ts_ns", pa.int64()), ("offset_ns", pa.int64()),
    ("exposed_ns", pa.int64()), ("ready_ns", pa.int64()), ("compute_before_ns", pa.int64()),
    ("compute_after_ns", pa.int64()), ("wait_ns", pa.int64()), ("exposed_wait_ns", pa.int64())])

UNITS = ["", "layers.0", "layers.1"]
MANIFESTS = {
    "plain": Manifest(world_size=4),
    # HSDP: all-gathers and reduce-scatters in the shard group of 2, all-reduces across 3 replicas
    "hsdp": Manifest(world_size=6, parallelism="hsdp", mesh=Mesh(shape=[3, 2]),
                     units=[Unit(name=n, reshard_after_forward=n != "") for n in UNITS]),
    "fsdp1": Manifest(world_size=2, parallelism="fsdp", units=[Unit(name=n) for n in UNITS]),
    "unknown": Manifest(),
}
_NS = st.integers(0, 10**10)
ROWS = st.fixed_dictionaries({
    "rank": st.integers(0, 7), "step": st.one_of(st.none(), st.integers(0, 5)), "event_id": st.integers(0, 10**6),
    "kind": st.sampled_from(["ddp_bucket", "fsdp_unit", "other"]),
    "id": st.one_of(st.none(), st.sampled_from(["0", "3", "unit#0", "unit#1", "unit#2", "unit#7", "", "layers.1"])),
    "phase": st.sampled_from(["allreduce", "reduce_scatter", "forward_allgather", "backward_allgather", "broadcast"]),
    "inferred": st.booleans(), "microbatch": st.one_of(st.none(), st.integers(0, 3)),
    "collective": st.one_of(st.none(), st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                                         "barrier", ""])),
    "bytes": st.one_of(st.none(), st.just(0), st.integers(1, 2**40)), "shard_only": st.booleans(),
    "dtype": st.one_of(st.none(), st.sampled_from(["bf16", "fp32"])),
    "group_size": st.one_of(st.none(), st.integers(0, 8)),
    "ts_ns": _NS, "comm_ns": st.integers(0, 10**9), "cpu_launch_ts_ns": st.one_of(st.none(), _NS),
    "offset_ns": st.one_of(st.none(), _NS), "exposed_ns": st.integers(0, 10**9),
    "ready_ns": st.one_of(st.none(), _NS), "compute_before_ns": st.one_of(st.none(), _NS),
    "compute_after_ns": st.one_of(st.none(), _NS),
    "wait_ns": st.one_of(st.none(), st.integers(0, 10**9)), "exposed_wait_ns": st.one_of(st.none(), _NS),
})


def _ms(ns):
    return None if ns is None else round(ns / 1_000_000, 6)


def _expected(row: dict, manifest: Manifest) -> dict:
    """One row finished by the rules, one at a time."""
    collective = row["collective"]
    group = row["group_size"] or manifest.group_sizes().get(collective or "", manifest.world_size)
    nbytes = row["bytes"]
    if row["shard_only"] and nbytes and group:
        nbytes *= group
    transfer_ns = row["comm_ns"] - (row["wait_ns"] or 0)
    busbw = None
    if nbytes and transfer_ns > 0 and collective and group and group > 1:
        try:
            busbw = round(nbytes / (transfer_ns / 1e9) * bus_factor(collective, group) / 1e9, 4)
        except ValueError:  # no payload (a barrier)
            busbw = None
    id_ = row["id"]
    if row["kind"] == "fsdp_unit" and row["inferred"] and str(id_).startswith("unit#"):
        units = manifest.units
        order = {"forward_allgather": [u.name for u in units],
                 "backward_allgather": [u.name for u in reversed(units) if u.reshard_after_forward],
                 "reduce_scatter": [u.name for u in reversed(units)],
                 "allreduce": [u.name for u in reversed(units)]}.get(row["phase"], [])
        k = int(id_[5:])
        id_ = order[k] if k < len(order) else id_
    return {"rank": row["rank"], "step": row["step"], "kind": row["kind"], "id": id_, "phase": row["phase"],
            "collective": collective, "bytes": nbytes, "dtype": row["dtype"], "group_size": group,
            "microbatch": row["microbatch"], "offset_ms": _ms(row["offset_ns"]), "comm_ms": _ms(row["comm_ns"]),
            "exposed_ms": _ms(row["exposed_ns"]), "wait_ms": _ms(row["wait_ns"]),
            "transfer_ms": None if row["wait_ns"] is None else _ms(transfer_ns),
            "exposed_wait_ms": _ms(row["exposed_wait_ns"]), "busbw_gbps": busbw, "inferred": row["inferred"],
            "event_id": row["event_id"], "predicted_comm_ms": None, "predicted_exposed_ms": None,
            "start_ns": row["ts_ns"], "launch_ts_ns": row["cpu_launch_ts_ns"], "ready_ns": row["ready_ns"],
            "compute_before_ns": row["compute_before_ns"] or 0, "compute_after_ns": row["compute_after_ns"]}


def _built(batches: list[list[dict]], manifest: Manifest, counted: int):
    build = cols._Build(manifest, manifest.world_size, counted)
    for batch in batches:
        build.add(dict(zip(SCHEMA.names, pa.RecordBatch.from_pylist(batch, SCHEMA).columns)))
    return build.finished()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(ROWS, max_size=12), max_size=4), st.sampled_from(sorted(MANIFESTS)), st.integers(-3, 3))
def test_rows_are_finished_as_one_at_a_time(batches, which, miscount):
    manifest = MANIFESTS[which]
    rows = [r for b in batches for r in b]
    # the rows counted before (collectives.per_rank); more or fewer arriving still builds them all
    table = _built(batches, manifest, max(0, len(rows) + miscount))
    got = [{n: getattr(r, n) for n in cols.FIELDS} for r in table]
    want = [_expected(r, manifest) for r in rows]
    assert got == want
    assert [[type(v) for v in g.values()] for g in got] == [[type(v) for v in w.values()] for w in want]


def test_bus_bandwidth_rounds_as_python():
    # bus bandwidths of 5 decimals ending in 5 (an all-reduce of 2 ranks: busbw = algbw), where
    # NumPy's round (scale, rint, unscale) and Python's (correctly rounded) part: 112.45755
    # is 112.4575 to Python, 112.4576 to NumPy (found by search, checked by hand)
    row = dict.fromkeys(SCHEMA.names)
    row.update(rank=0, event_id=1, kind="ddp_bucket", id="0", phase="allreduce", inferred=False,
               collective="all_reduce", shard_only=False, group_size=2, ts_ns=0, exposed_ns=0)
    rows = [{**row, "bytes": b, "comm_ns": 10**8} for b in (11_245_755_000, 57_074_045_000, 27_836_375_000)]
    table = _built([rows], MANIFESTS["plain"], len(rows))
    assert [r.busbw_gbps for r in table] == [112.4575, 570.7405, 278.3637]


def test_texts_are_codes_shared_by_every_text_column():
    rows = [dict(dict.fromkeys(SCHEMA.names), rank=0, event_id=i, kind="other", id=text, phase="broadcast",
                 inferred=False, collective="broadcast", shard_only=False, ts_ns=i, comm_ns=1, exposed_ns=0)
            for i, text in enumerate(["broadcast", None, "x"])]
    table = _built([rows[:1], rows[1:]], MANIFESTS["plain"], 3)
    assert table.texts.count("broadcast") == 1  # one code for a text, whichever column holds it
    assert [r.id for r in table] == ["broadcast", None, "x"]
    assert table.columns["id"].itemsize == 2  # 2-byte codes for a run's few texts


def test_ranks_are_read_a_few_at_a_time():
    # consecutive ranks up to ROWS_PER_QUERY rows a query; a rank with more is a query alone
    limit = cols.ROWS_PER_QUERY
    per_rank = [(0, limit // 2), (1, limit // 2), (2, 1), (3, limit + 5), (5, 3), (9, 4)]
    assert cols._rank_ranges(per_rank) == [(0, 1), (2, 2), (3, 3), (5, 9)]
    assert cols._rank_ranges([]) == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2 ** 40), st.integers(-5, 2 ** 31)), max_size=60),
       st.booleans())
def test_rank_steps_are_the_sorted_distinct_pairs_and_each_rows_index(rows, small):
    """Against a set of tuples sorted by Python. ``small`` keeps the numbers where one int64 key
    per row holds rank x steps; otherwise ranks up to 2^40 and steps up to 2^31 take the pairs'
    sort (both ways are taken: the 2^62 bound)."""
    import numpy as np

    if small:
        rows = [(r % 1024, s % 64) for r, s in rows]
    rank = np.array([r for r, _ in rows], np.int64)
    step = np.array([s for _, s in rows], np.int64)
    pairs, slot = cols.rank_steps(rank, step)
    assert pairs == sorted(set(rows))
    assert [pairs[i] for i in slot.tolist()] == rows


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2 ** 21), st.integers(0, 3)), max_size=80),
       st.integers(1, 9), st.booleans())
def test_first_met_groups_number_groups_as_a_loop_over_the_rows_meets_them(rows, block, wide):
    """Against a dict filled row by row, with blocks of 1 to 9 rows (a run's 65,536), small codes
    (one int64 key per row) and, with ``wide``, values whose key would pass 2^62 (the pairs' sort)."""
    import numpy as np

    if wide:
        rows = [(a * 2 ** 40, b, c * 2 ** 30) for a, b, c in rows]
    number: dict = {}
    expected_firsts, expected = [], []
    for i, r in enumerate(rows):
        if r not in number:
            number[r] = len(number)
            expected_firsts.append(i)
        expected.append(number[r])
    columns = [np.array([r[k] for r in rows], np.int64) for k in range(3)]
    firsts, group = cols.first_met_groups(columns, rows_per_block=block)
    assert firsts == expected_firsts
    assert group.tolist() == expected and group.dtype == np.int32


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 12), max_size=30), st.integers(1, 20))
def test_rank_blocks_take_whole_ranks_up_to_a_block(counts, block):
    """Against a loop over the ranks: ranks of ``counts`` rows each (rank order, as the columns
    hold them) gathered while the next fits in ``block`` rows; a rank with more rows alone."""
    import numpy as np

    rank = np.repeat(np.arange(len(counts), dtype=np.int64) * 3, counts)  # ranks need not be consecutive
    expected, start, held = [], 0, 0
    for n in counts:
        if held and held + n > block:
            expected.append((start, start + held))
            start, held = start + held, 0
        held += n
    if held:
        expected.append((start, start + held))
    assert blocks.rank_blocks(rank, block) == expected
    if len(set(rank.tolist())) > 1:  # out of rank order: one block, never a rank split between two
        assert blocks.rank_blocks(rank[::-1].copy(), block) == [(0, len(rank))]


def test_text_test_reads_each_rows_text_across_blocks():
    """More rows than a block (the lookup goes a block at a time): against a test per row."""
    import numpy as np

    texts = ["allreduce", None, "reduce_scatter", "forward_allgather", ""]
    codes = np.random.default_rng(7).integers(0, len(texts), 3 * blocks.ROWS_PER_BLOCK + 11).astype(np.uint16)
    test = lambda t: t in ("allreduce", "reduce_scatter")  # noqa: E731
    got = cols.text_test(texts, test, codes)
    assert got.dtype == bool and got.tolist() == [test(texts[c]) for c in codes.tolist()]
