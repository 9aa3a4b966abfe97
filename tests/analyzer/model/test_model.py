"""The analytic model against its source: the lesson on data parallelism, ZeRO and FSDP
the product is built on ("the seed"; its figures are restated in docs/model.md, worked
example and check answers).

The oracle is the seed's text: every expected number below is copied from it,
with the section it comes from. Tolerance: a computed value is rounded the way
the seed prints it (half up, to the number of decimals the seed writes) and must
then equal the seed's figure; ``seed_round`` does this. Where the seed writes
"about" or "≈" the test says which approximation the seed makes.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pytest

from overlapscope.analyzer.model.memory import (
    comm_per_gpu,
    model_state_breakdown,
    model_state_bytes,
    stage_collectives,
    to_gb,
)
from overlapscope.analyzer.model.ring import (
    collective_time_s,
    fit_latency,
    ring_latency_s,
    wire_bytes,
)
from overlapscope.analyzer.model.hide import (
    BACKWARD_SHARE,
    VERDICT_THRESHOLDS,
    overlap_verdict,
    stage_tokens_to_hide,
    tokens_to_hide,
)

B = 1e9  # "13B" parameters
PSI_13B = 13 * B
H100_F = 400e12  # FLOP/s, worked example
IB_W, NVLINK_W = 50e9, 450e9  # bytes/s per GPU, worked example


def seed_round(value: float, seed_figure: str) -> bool:
    """True when ``value`` rounded half-up like ``seed_figure`` ("56.9", "0.80") equals it."""
    target = Decimal(seed_figure)
    rounded = Decimal(repr(value)).quantize(target, rounding=ROUND_HALF_UP)
    return rounded == target


def test_seed_round_rounds_half_up_like_the_seed():
    assert seed_round(68.25, "68.3")  # Python's round() would give 68.2
    assert seed_round(0.7987, "0.80")
    assert not seed_round(56.8, "56.9")


# --- memory (section 3 theorem, section 4 step 1, section 8 Q1, quick check) ----------------


@pytest.mark.parametrize("stage, group, seed_gb", [
    ("ddp", None, "208"), ("zero1", None, "56.9"), ("zero2", None, "31.7"),
    ("zero3", None, "6.5"), ("hsdp", 8, "26"),
])
def test_worked_example_model_states_13b_on_32_gpus(stage, group, seed_gb):
    """Section 4, step 1: 208 / 56.9 / 31.7 / 6.5 / 26 GB."""
    assert seed_round(to_gb(model_state_bytes(stage, PSI_13B, 32, group=group)), seed_gb)


@pytest.mark.parametrize("stage, seed_gb", [("zero1", "286.6"), ("zero2", "147.7"), ("zero3", "8.75")])
def test_check_yourself_q1_70b_on_128_gpus(stage, seed_gb):
    """Section 8 Q1: ZeRO-1 286.6, ZeRO-2 147.7, ZeRO-3 8.75 GB; only ZeRO-3 fits in 80 GB."""
    gb = to_gb(model_state_bytes(stage, 70 * B, 128))
    assert seed_round(gb, seed_gb)
    assert (gb <= 80) == (stage == "zero3")


def test_check_yourself_q1_parts():
    """Section 8 Q1 answer: 280 + 6.6 (ZeRO-1) and 140 + 7.7 (ZeRO-2)."""
    z1 = model_state_breakdown("zero1", 70 * B, 128)
    z2 = model_state_breakdown("zero2", 70 * B, 128)
    assert to_gb(z1.weights_bytes + z1.grads_bytes) == 280
    assert seed_round(to_gb(z1.optimizer_bytes), "6.6")
    assert to_gb(z2.weights_bytes) == 140
    assert seed_round(to_gb(z2.grads_bytes + z2.optimizer_bytes), "7.7")


def test_quick_check_10b_zero3_on_16_gpus_needs_10_gb():
    """Section 2 quick check: 16 x 10B / 16 = 10 GB."""
    assert to_gb(model_state_bytes("zero3", 10 * B, 16)) == 10


def test_why_this_matters_7b():
    """Section "Why this matters": 16 x 7 = 112 GB; ZeRO-3 over 8 GPUs needs 14 GB."""
    assert to_gb(model_state_bytes("ddp", 7 * B, 8)) == 112
    assert to_gb(model_state_bytes("zero3", 7 * B, 8)) == 14


def test_large_n_limits_of_model_states():
    """Section 3 remark: for large N_d, 4 Psi (ZeRO-1), 2 Psi (ZeRO-2) and 0 (ZeRO-3)."""
    psi, n = 1 * B, 10**9
    assert model_state_bytes("zero1", psi, n) == pytest.approx(4 * psi, rel=1e-6)
    assert model_state_bytes("zero2", psi, n) == pytest.approx(2 * psi, rel=1e-6)
    assert model_state_bytes("zero3", psi, n) == pytest.approx(0, abs=1e-6 * psi)


def test_k_changes_optimizer_states_only():
    """(4+K) Psi: K is the optimizer's bytes per parameter."""
    states = model_state_breakdown("ddp", 1 * B, 4, k=4)
    assert (states.weights_bytes, states.grads_bytes, states.optimizer_bytes) == (2 * B, 2 * B, 4 * B)


@pytest.mark.parametrize("kwargs, match", [
    (dict(stage="hsdp", params=B, gpus=32), "group"),
    (dict(stage="hsdp", params=B, gpus=32, group=5), "divide"),
    (dict(stage="zero4", params=B, gpus=32), "stage"),
    (dict(stage="ddp", params=0, gpus=32), "params"),
    (dict(stage="ddp", params=B, gpus=0), "gpus"),
])
def test_memory_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        model_state_bytes(**kwargs)


# --- communication (section 3 theorem and accumulation table, section 4 step 4, Q5) ----------


def test_worked_example_zero3_over_32_gpus_sends_75_6_gb():
    """Section 4, step 4: 3 x 2Psi x 31/32 = 75.6 GB per GPU."""
    comm = comm_per_gpu("zero3", PSI_13B, 32)
    assert comm.elements == 3 * PSI_13B
    assert seed_round(to_gb(comm.bytes), "75.6")


def test_worked_example_zero2_reduce_scatter_per_micro_batch_is_25_2_gb():
    """Section 4, step 4: reduce-scatter 2Psi x 31/32 = 25.2 GB, plus one all-gather of 25.2 GB."""
    colls = {c.kind: c for c in stage_collectives("zero2", PSI_13B, 32)}
    assert seed_round(to_gb(colls["reduce_scatter"].wire_bytes), "25.2")
    assert seed_round(to_gb(colls["all_gather"].wire_bytes), "25.2")


def test_worked_example_hsdp_intra_68_3_gb_and_inter_4_9_gb():
    """Section 4, step 4: intra 3 x 2Psi x 7/8 = 68.3 GB; inter 2 x 3/4 x 3.25 = 4.9 GB."""
    comm = comm_per_gpu("hsdp", PSI_13B, 32, group=8)
    assert seed_round(to_gb(comm.intra_bytes), "68.3")
    assert seed_round(to_gb(comm.inter_bytes), "4.9")
    shard = [c for c in stage_collectives("hsdp", PSI_13B, 32, group=8) if c.link == "inter"][0]
    assert to_gb(shard.message_elements * shard.bytes_per_element) == 3.25  # 2Psi/8
    assert shard.group_size == 4  # "with its 3 peers in the other nodes"


def test_check_yourself_q5_hsdp_16_nodes_of_4():
    """Section 8 Q5: 1.875 GB across nodes, 75 ms at 25 GB/s; DDP over 64: 7.875 GB, 315 ms."""
    psi, w = 2 * B, 25e9
    hsdp = comm_per_gpu("hsdp", psi, 64, group=4)
    ddp = comm_per_gpu("ddp", psi, 64)
    assert to_gb(hsdp.inter_bytes) == pytest.approx(1.875, rel=1e-12)
    assert hsdp.inter_bytes / w == pytest.approx(0.075, rel=1e-12)
    assert to_gb(ddp.bytes) == pytest.approx(7.875, rel=1e-12)
    assert ddp.bytes / w == pytest.approx(0.315, rel=1e-12)


@pytest.mark.parametrize("stage, volume", [("ddp", 2), ("zero1", 2), ("zero2", 2), ("zero3", 3)])
def test_theorem_elements_per_step(stage, volume):
    """Section 3 theorem: DDP, ZeRO-1, ZeRO-2 send 2 Psi; ZeRO-3 3 Psi; bytes x 2 x (N-1)/N."""
    comm = comm_per_gpu(stage, 1000, 8)
    assert comm.elements == volume * 1000
    assert comm.bytes == pytest.approx(volume * 1000 * 2 * 7 / 8)


@pytest.mark.parametrize("stage, volume", [("ddp", 2), ("zero1", 2), ("zero2", 4 + 1), ("zero3", 3 * 4)])
def test_gradient_accumulation_table(stage, volume):
    """Section 3 accumulation table, m = 4: DDP 2Psi, ZeRO-1 2Psi, ZeRO-2 mPsi+Psi, ZeRO-3 3mPsi."""
    assert comm_per_gpu(stage, 1000, 8, accum=4).elements == volume * 1000


@pytest.mark.parametrize("gpus", [2, 8, 64, 1024])
def test_section_1_answers(gpus):
    """Section 3 answers: ZeRO-2 sends what DDP sends; ZeRO-3 1.5 times, for any N;
    bytes per GPU of a ring do not grow with N (bounded by 2 x 2Psi)."""
    ddp = comm_per_gpu("ddp", 1000, gpus).bytes
    assert comm_per_gpu("zero2", 1000, gpus).bytes == pytest.approx(ddp)
    assert comm_per_gpu("zero3", 1000, gpus).bytes == pytest.approx(1.5 * ddp)
    assert ddp < 2 * 2 * 1000


def test_zero1_numpy_example_sends_15_elements_per_step():
    """Section 5, first block: N=4, P=10 prints "15.0 = 2 * (3/4) * 10 per step"."""
    assert comm_per_gpu("zero1", 10, 4).wire_elements == 15.0


def test_zero1_numpy_simulation_of_the_seed_matches_the_model():
    """Section 5, first block, run as printed: ZeRO-1 equals one-GPU AdamW, and the
    elements it counts per step equal the model's wire elements."""
    rng = np.random.default_rng(0)
    n, p, b = 4, 10, 32
    x, y = rng.standard_normal((b, p)), rng.standard_normal(b)

    def grad(w, xs, ys):
        return xs.T @ (xs @ w - ys) / len(ys)

    def adamw(w, g, m, v, t, lr=1e-2, b1=0.9, b2=0.999, eps=1e-8, wd=0.1):
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        mh, vh = m / (1 - b1**t), v / (1 - b2**t)
        return w - lr * (mh / (np.sqrt(vh) + eps) + wd * w), m, v

    w0 = rng.standard_normal(p)
    w, m, v = w0.copy(), np.zeros(p), np.zeros(p)
    for t in range(1, 6):
        w, m, v = adamw(w, grad(w, x, y), m, v, t)
    sl = np.array_split(np.arange(p), n)
    xs, ys = np.split(x, n), np.split(y, n)
    ws = [w0.copy() for _ in range(n)]
    ms = [np.zeros(len(s)) for s in sl]
    vs = [np.zeros(len(s)) for s in sl]
    sent = 0
    for t in range(1, 6):
        g_local = [grad(ws[k], xs[k], ys[k]) for k in range(n)]
        for k in range(n):
            gk = np.mean([g[sl[k]] for g in g_local], axis=0)
            ws[k][sl[k]], ms[k], vs[k] = adamw(ws[k][sl[k]], gk, ms[k], vs[k], t)
        for k in range(n):
            for j in range(n):
                ws[k][sl[j]] = ws[j][sl[j]]
        sent += 2 * (n - 1) / n * p
    assert max(np.abs(wk - w).max() for wk in ws) < 1e-12
    assert sent / 5 == comm_per_gpu("zero1", p, n).wire_elements == 15.0


def test_check_yourself_q4_no_reshard_drops_to_2_psi():
    """Section 8 Q4: reshard_after_forward=False: volume 3Psi -> 2Psi, the same as DDP."""
    assert comm_per_gpu("zero3", 1000, 8, reshard_after_forward=False).elements == 2000
    assert comm_per_gpu("zero3", 1000, 8, reshard_after_forward=True).elements == 3000


def test_quick_check_zero3_with_8_micro_batches_gathers_each_layer_16_times():
    """Section 3: ZeRO-3 "all-gathers the weights twice ... in every micro-batch": 2 x 8."""
    def gathers(stage, **kw):
        return sum(c.count for c in stage_collectives(stage, 1000, 8, accum=8, **kw) if c.kind == "all_gather")

    assert gathers("zero3") == 16
    assert gathers("zero3", reshard_after_forward=False) == 8
    assert gathers("ddp") == 0


def test_fp32_gradient_reduction_doubles_gradient_bytes_only():
    """Section 3: fp32 reduction doubles the gradient bytes; weight all-gathers stay bf16."""
    bf16 = comm_per_gpu("ddp", 1000, 8).bytes
    assert comm_per_gpu("ddp", 1000, 8, grad_bytes=4).bytes == pytest.approx(2 * bf16)
    z3 = comm_per_gpu("zero3", 1000, 8, grad_bytes=4).bytes
    assert z3 == pytest.approx((2 * 2 + 4) * 1000 * 7 / 8)


# --- compute and tokens to hide (section 3 proposition, section 4 step 3, Q3) -----------------


def test_backward_share_is_four_of_six_flops():
    """Section 3 proposition: forward 2 Psi T, backward 4 Psi T FLOPs."""
    assert BACKWARD_SHARE == pytest.approx(4 / 6)


def test_worked_example_comm_times():
    """Section 4, step 4: ZeRO-3 1.51 s at 50 GB/s; ZeRO-2 reduce-scatter 0.50 s;
    HSDP 0.15 s on NVLink and 0.10 s across nodes; with 2 sequences 1.60 s of compute."""
    assert seed_round(comm_per_gpu("zero3", PSI_13B, 32).bytes / IB_W, "1.51")
    rs = [c for c in stage_collectives("zero2", PSI_13B, 32) if c.kind == "reduce_scatter"][0]
    assert seed_round(rs.wire_bytes / IB_W, "0.50")
    hsdp = comm_per_gpu("hsdp", PSI_13B, 32, group=8)
    assert seed_round(hsdp.intra_bytes / NVLINK_W, "0.15")
    assert seed_round(hsdp.inter_bytes / IB_W, "0.10")


@pytest.mark.parametrize("bandwidth, seed_tokens, decimals", [
    (50e9, 8000, -3), (450e9, 900, -2), (25e9, 16000, -3),
])
def test_tokens_thresholds_of_the_proposition(bandwidth, seed_tokens, decimals):
    """Section 3, "Numbers": 8,000 (50 GB/s), about 900 (450 GB/s), 16,000 (25 GB/s).

    The seed drops (N-1)/N (T >= F/W (N-1)/N ≈ F/W): ``gpus=None`` is that limit and
    must round to the seed's figure; with N = 32 the exact value is 31/32 of it.
    """
    limit = tokens_to_hide(H100_F, bandwidth)
    assert round(limit, decimals) == seed_tokens
    assert tokens_to_hide(H100_F, bandwidth, gpus=32) == pytest.approx(limit * 31 / 32)


def test_check_yourself_q3_a100_200_gbit():
    """Section 8 Q3: W = 200/8 = 25 GB/s, F = 150 TFLOP/s: 6,000 tokens; fp32 12,000."""
    assert tokens_to_hide(150e12, 200e9 / 8) == pytest.approx(6000)
    assert tokens_to_hide(150e12, 200e9 / 8, grad_bytes=4) == pytest.approx(12000)


@pytest.mark.parametrize("params", [1 * B, 100 * B])
def test_model_size_cancels_at_the_threshold(params):
    """Proposition proof: at T = F/W (N-1)/N the all-reduce time equals the backward time,
    for a 1B and a 100B model alike (section 3 quick check: "Neither")."""
    threshold = tokens_to_hide(H100_F, IB_W, gpus=32)
    comm_s = comm_per_gpu("ddp", params, 32).bytes / IB_W
    assert comm_s == pytest.approx(4 * params * threshold / H100_F)  # the backward: 4 Psi T / F


def test_zero3_per_micro_batch_threshold_is_the_same():
    """Section 3 ZeRO-3 bullet: the same threshold in both phases (bf16)."""
    assert stage_tokens_to_hide("zero3", H100_F, IB_W, 32) == pytest.approx(
        tokens_to_hide(H100_F, IB_W, 32))


# --- verdict ------------------------------------------------------------------------------


def test_verdict_worked_example_zero3_4096_tokens_is_communication_limited():
    """Section 4: ZeRO-3 over 32 GPUs, 4,096 tokens: 1.51 s comm > 0.80 s compute."""
    v = overlap_verdict(4096, H100_F, IB_W, 32, stage="zero3")
    assert v.verdict == "exposed"
    assert seed_round(v.ratio, "1.89")  # 1.51 / 0.80
    assert v.ratio == pytest.approx(v.tokens_to_hide / 4096)


def test_verdict_worked_example_just_hidden_cases_are_marginal():
    """Section 4: ZeRO-2 reduce-scatter "0.50 s, just under the 0.53 s backward pass";
    ZeRO-3 with 2 sequences "1.51 s against 1.60 s ... only just hidden"."""
    z2 = overlap_verdict(4096, H100_F, IB_W, 32, stage="zero2")
    z3 = overlap_verdict(8192, H100_F, IB_W, 32, stage="zero3")
    for v in (z2, z3):
        assert v.verdict == "marginal"
        assert 0.9 < v.ratio < 1.0


def test_verdict_ml_for_science_65000_tokens_hide_well():
    """Section 6: 65,000 tokens against 16,000 at 25 GB/s: "about 4 times F/W", hides well."""
    v = overlap_verdict(65000, H100_F, 25e9, stage="ddp")
    assert v.verdict == "hidden"
    assert round(1 / v.ratio) == 4


def test_verdict_thresholds_are_ordered_and_each_has_a_reason():
    bounds = [b for b, _, _ in VERDICT_THRESHOLDS]
    assert bounds == sorted(bounds) and bounds[-1] == float("inf")
    assert [v for _, v, _ in VERDICT_THRESHOLDS] == ["hidden", "marginal", "exposed"]
    assert all(reason for _, _, reason in VERDICT_THRESHOLDS)


def test_verdict_boundaries():
    threshold = tokens_to_hide(H100_F, IB_W)
    assert overlap_verdict(threshold / 0.8, H100_F, IB_W).verdict == "hidden"
    assert overlap_verdict(threshold, H100_F, IB_W).verdict == "marginal"
    assert overlap_verdict(threshold * 0.99, H100_F, IB_W).verdict == "exposed"


def test_verdict_of_hsdp_needs_its_groups():
    with pytest.raises(ValueError, match="hsdp verdict needs the shard group size G"):
        overlap_verdict(4096, H100_F, IB_W, 32, stage="hsdp")
    with pytest.raises(ValueError, match="replicas must be a positive integer"):
        stage_tokens_to_hide("hsdp", H100_F, NVLINK_W, 8, replicas=0)


def test_verdict_worked_example_hsdp_g8_counts_the_replica_all_reduce():
    """Section 4, HSDP (G = 8, R = 4), 4,096 tokens, bf16. Backward phase per micro-batch: the all-gather and
    the reduce-scatter inside the node, 2 x 2 Psi x 7/8 = 45.5 GB over NVLink (0.101111 s), and the all-reduce
    of the 2 Psi / 8 = 3.25 GB gradient shard across the 4 replicas, 2 x 3/4 x 3.25 = 4.875 GB over IB
    (0.0975 s): 0.198611 s against the 0.53248 s backward, ratio 0.372993: hidden. (The forward gather,
    0.050556 s against 0.26624 s, is the easier phase.) Without the replica term: 0.101111 / 0.53248 = 0.19."""
    v = overlap_verdict(4096, H100_F, NVLINK_W, 8, stage="hsdp", replicas=4, replicate_bandwidth_bytes_per_s=IB_W)
    backward_comm_s = 2 * 2 * PSI_13B * 7 / 8 / NVLINK_W + 2 * 3 / 4 * 2 * PSI_13B / 8 / IB_W
    assert v.ratio == pytest.approx(backward_comm_s / (4 * PSI_13B * 4096 / H100_F), rel=1e-12)
    assert seed_round(v.ratio, "0.373") and v.verdict == "hidden"
    assert seed_round(v.tokens_to_hide, "1527.8")
    # one replica: nothing crosses the network, the shard group's zero3 alone
    assert stage_tokens_to_hide("hsdp", H100_F, NVLINK_W, 8, replicas=1, replicate_bandwidth_bytes_per_s=IB_W) == \
        pytest.approx(stage_tokens_to_hide("zero3", H100_F, NVLINK_W, 8))


# --- ring collectives and nccl-tests bus bandwidth (lesson 7 via section 3) ----------------------


def test_ring_bytes_sent():
    """Section 3: reduce-scatter/all-gather of n bytes send (N-1)/N n; all-reduce twice that."""
    assert wire_bytes("reduce_scatter", 800, 8) == 700
    assert wire_bytes("all_gather", 800, 8) == 700
    assert wire_bytes("all_reduce", 800, 8) == 1400


def test_collective_time_reproduces_worked_example_zero3():
    """Section 4: two all-gathers and one reduce-scatter of 2Psi bytes on 32 GPUs at 50 GB/s: 1.51 s."""
    msg = 2 * PSI_13B
    total = 2 * collective_time_s("all_gather", msg, 32, IB_W) + collective_time_s("reduce_scatter", msg, 32, IB_W)
    assert seed_round(total, "1.51")


def test_collective_time_adds_latency():
    assert collective_time_s("all_reduce", 100e6, 8, 50e9, latency_s=1e-4) == pytest.approx(1e-4 + 3.5e-3)


def test_ring_latency_term():
    """Section 7: "the latency term 2(N_d-1) alpha" of an all-reduce."""
    assert ring_latency_s("all_reduce", 8, 1e-6) == pytest.approx(14e-6)
    assert ring_latency_s("all_gather", 8, 1e-6) == pytest.approx(7e-6)


# --- latency fit ----------------------------------------------------------------------------


def _points(alpha_s, busbw, sizes):
    return [(b, alpha_s + b / busbw) for b in sizes]


def test_fit_recovers_latency_and_bandwidth():
    fit = fit_latency(_points(20e-6, 40e9, [1e3, 1e5, 1e6, 4e6]))
    assert fit.latency_s == pytest.approx(20e-6)
    assert fit.busbw_bytes_per_s == pytest.approx(40e9)
    assert fit.residual_rms_s == pytest.approx(0, abs=1e-12)
    assert fit.predict_s(1e6) == pytest.approx(20e-6 + 1e6 / 40e9)


def test_fit_with_known_bandwidth_fits_latency_only():
    fit = fit_latency([(1e6, 50e-6), (2e6, 80e-6)], busbw_bytes_per_s=50e9)
    assert fit.latency_s == pytest.approx(((50e-6 - 20e-6) + (80e-6 - 40e-6)) / 2)
    assert fit.busbw_bytes_per_s == 50e9


def test_fit_latency_is_never_negative():
    fit = fit_latency([(1e6, 10e-6), (2e6, 30e-6)])  # line through (0, -10 us)
    assert fit.latency_s == 0.0
    assert fit.busbw_bytes_per_s > 0
    assert fit_latency([(1e6, 1e-6)], busbw_bytes_per_s=1e9).latency_s == 0.0


def test_fit_with_one_point_or_one_size_is_all_latency():
    one = fit_latency([(4096, 30e-6)])
    assert (one.latency_s, one.busbw_bytes_per_s, one.points) == (30e-6, None, 1)
    same = fit_latency([(4096, 20e-6), (4096, 40e-6)])
    assert same.latency_s == pytest.approx(30e-6) and same.busbw_bytes_per_s is None
    assert same.residual_rms_s == pytest.approx(10e-6)


def test_fit_with_time_falling_with_size_is_all_latency():
    fit = fit_latency([(1e3, 40e-6), (1e4, 30e-6)])
    assert fit.busbw_bytes_per_s is None and fit.latency_s == pytest.approx(35e-6)


def test_fit_rejects_no_points():
    with pytest.raises(ValueError):
        fit_latency([])
