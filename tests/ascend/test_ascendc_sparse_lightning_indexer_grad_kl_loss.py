"""sparse_lightning_indexer_grad_kl_loss Ascend C kernel on the CPU twin (mixed AIC + AIV launch:
row pass for the teacher p, softmax(I), loss, d_weights, d_query_index; key-block ownership pass
for d_key_index) against the float64 reference, with teacher statistics from a real forward over
the same selected keys; fp16/bf16 inputs, weights of the same dtype or float32, TND/BSND, rope
present or absent, -1 slots anywhere, rows with one or no visible key, the Ascend shapes; 1/8/24
cores and the same output bits for any core count and any core execution order; with sinks (the
teacher renormalised over the keys, finite for sinks far above the logits; -inf = no sink, bit for
bit). Plus the pure
tiling's invariants for 1, 8, 20, 24, 40 and 48 AI cores."""
from __future__ import annotations

import numpy as np
import pytest
from _indexer_cases import Case, make_case, row_weights, unreached
from _util import TOLERANCES, rel_l2
from ascendc_harness import twin_indexer as indexer
from ascendc_harness import twin_lib as twin
from test_ascendc_sparse_flash_attention import make_sinks

from ms_grad_ops import reference as ref

NAMES = ("d_query_index", "d_key_index", "d_weights")
LOSS_TOL = 1e-4
CORE_COUNTS = (1, 8, 20, 24, 40, 48)


def problem(case: Case, dtype: str, wdtype: str, sinks: np.ndarray | None = None) -> indexer.SliProblem:
    return indexer.SliProblem(dtype, wdtype, case.arrays, case.lens_q, case.lens_k,
                              dict(scale_value=case.scale, layout=case.layout, sparse_mode=case.sparse_mode), sinks)


def small(seed: int, dtype: str, wdtype: str, layout: str, rope: bool = True, **kw: object) -> Case:
    """Small generic shapes (multiples of 16 where the kernel's 32-byte rows need them)."""
    args = {"n1": 4, "d": 32, "dr": 16 if rope else 0, "nidx": 4, "didx": 16, "k": 8} | kw
    return make_case(np.random.default_rng(seed), dtype, wdtype, layout, **args)


def check(run: twin.KernelRun, case: Case, dtype: str, sinks: np.ndarray | None = None,
          arch: int = twin.ARCH_A2) -> None:
    info = run.info
    assert info.min_writes == 1 and info.max_writes == 1, "every output byte written exactly once"
    assert info.ub_peak_bytes == info.tiling_ub_bytes <= twin.ub_bytes_of(arch, mixed=True), "UB = the tiling's plan"
    want = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), sinks, **case.ref_kwargs())
    tol = TOLERANCES["attention"][dtype]
    no_key, no_query = unreached(case)
    for name, got, ref_val in zip(NAMES, run.outputs[:3], want[:3]):
        assert np.isfinite(got).all(), name
        err = rel_l2(got, ref_val)
        assert err <= tol, f"{name}: relative L2 error {err:.3g} > {tol:g} ({dtype})"
        zero = no_query if name == "d_key_index" else no_key  # rows nothing reaches: exactly zero
        flat_got, flat_ref = got.reshape(zero.size, -1), ref_val.reshape(zero.size, -1)
        assert (flat_ref[zero] == 0).all() and (flat_got[zero] == 0).all(), f"{name}: unreached rows must be 0"
    assert abs(run.outputs[3] - want[3]) <= LOSS_TOL * abs(want[3]), f"loss {run.outputs[3]} vs {want[3]}"


@pytest.mark.parametrize("layout", ["TND", "BSND"])
@pytest.mark.parametrize(("dtype", "wdtype"), [("float16", "float16"), ("float16", "float32"),
                                               ("bfloat16", "bfloat16"), ("bfloat16", "float32")])
def test_small_cases(layout: str, dtype: str, wdtype: str) -> None:
    for cores, rope in ((1, True), (8, False), (24, True)):
        case = small(cores + len(layout), dtype, wdtype, layout, rope=rope)
        check(indexer.sparse_lightning_indexer_grad_kl_loss(problem(case, dtype, wdtype), cores), case, dtype)


@pytest.mark.parametrize("mode", [0, 3])
def test_sparse_mode_and_odd_lengths(mode: int) -> None:
    case = small(11, "bfloat16", "float32", "TND", lens_q=[1, 17, 0, 6], lens_k=[3, 21, 2, 33], k=12,
                 sparse_mode=mode, drop=0.4)
    check(indexer.sparse_lightning_indexer_grad_kl_loss(problem(case, "bfloat16", "float32"), 8), case, "bfloat16")


def test_rows_with_one_or_no_visible_key() -> None:
    """Row 0 sees one key (the causal limit), row 1 selects only -1, row 2 only hidden keys, row 3
    one visible key among -1 and hidden slots; the others are random."""
    case = small(3, "float16", "float16", "BSND", b=1, s1=8, s2=8, k=6)
    si = case.arrays["sparse_indices"]
    si[0, 0, 0] = [-1, 0, -1, -1, -1, -1]
    si[0, 1, 0] = -1
    si[0, 2, 0] = [7, 6, 5, -1, 4, 3]  # all beyond row 2's limit (keys 0..2)
    si[0, 3, 0] = [-1, 6, 2, -1, 5, -1]
    case = rebuild_stats(case)
    run = indexer.sparse_lightning_indexer_grad_kl_loss(problem(case, "float16", "float16"), 2)
    check(run, case, "float16")
    d_qi, _, d_w, _ = run.outputs[:4]
    assert (d_qi[0, 1] == 0).all() and (d_w[0, 1] == 0).all() and (d_qi[0, 2] == 0).all()
    # a single visible key: y = p = 1, so dI = 0 and every gradient of the row vanishes
    assert np.abs(d_w[0, 0]).max() < 1e-3 and np.abs(d_w[0, 3]).max() < 1e-3


def rebuild_stats(case: Case, sinks: np.ndarray | None = None) -> Case:
    """Teacher statistics of the main attention over the (edited) selected keys, with ``sinks``."""
    a = case.arrays
    mx, sm = ref.attention_softmax_stats(a["query"], a["key"], a["sparse_indices"], a.get("query_rope"),
                                         a.get("key_rope"), case.lens_q, case.lens_k, sinks, scale_value=case.scale,
                                         layout=case.layout, sparse_mode=case.sparse_mode)
    a["softmax_max"] = mx.astype(np.float32).astype(np.float64)
    a["softmax_sum"] = sm.astype(np.float32).astype(np.float64)
    return case


@pytest.mark.parametrize(("dtype", "nidx", "n1", "layout"), [("bfloat16", 8, 32, "TND"), ("float16", 64, 64, "BSND")])
def test_ascend_shapes(dtype: str, nidx: int, n1: int, layout: str) -> None:
    """D = 512, Dr = 64, Didx = 128, K = 1024 at small S (most slots -1)."""
    extra = {"lens_q": [3, 2], "lens_k": [5, 9]} if layout == "TND" else {"b": 1, "s1": 4, "s2": 6}
    case = make_case(np.random.default_rng(nidx), dtype, "float32" if nidx == 8 else dtype, layout, n1=n1, d=512,
                     dr=64, nidx=nidx, didx=128, k=1024, **extra)
    check(indexer.sparse_lightning_indexer_grad_kl_loss(problem(case, dtype, "float32" if nidx == 8 else dtype), 8),
          case, dtype)


def test_deterministic_bits_across_cores_and_orders() -> None:
    """d_key_index sums are formed by one AIV per key block in a fixed order: identical bits for
    any core count and any (seeded, shuffled) core execution order."""
    case = small(5, "bfloat16", "float32", "TND", lens_q=[9, 14, 5], lens_k=[40, 18, 23], k=16, drop=0.1)
    p = problem(case, "bfloat16", "float32")
    first = indexer.sparse_lightning_indexer_grad_kl_loss(p, 1, deterministic=True)
    check(first, case, "bfloat16")
    for cores, seed in ((8, 0), (24, 0), (8, 3), (24, 11)):
        run = indexer.sparse_lightning_indexer_grad_kl_loss(p, cores, seed=seed, deterministic=True)
        for a, b in zip(first.outputs[4:], run.outputs[4:]):
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"bits differ at {cores} cores, seed {seed}"


# ---------------------------------------------------------------- sinks
# "mixed" sinks: -inf, +40 and random ones; "large": +40 on every head (each head's keys share about
# e^-40 of its row). CANN's float32 1 / (N1 - sum_h P_sink) cancels to 0 there; the kernel's shifted
# form keeps the teacher the reference's.
def sink_run(case: Case, dtype: str, wdtype: str, kind: str, seed: int, cores: int, **attrs: object
             ) -> tuple[twin.KernelRun, np.ndarray]:
    sinks = make_sinks(kind, case.arrays["query"].shape[-2], seed)
    rebuild_stats(case, sinks)
    return indexer.sparse_lightning_indexer_grad_kl_loss(problem(case, dtype, wdtype, sinks), cores, **attrs), sinks


@pytest.mark.parametrize("kind", ["random", "mixed", "large"])
@pytest.mark.parametrize("layout", ["TND", "BSND"])
@pytest.mark.parametrize(("dtype", "wdtype"), [("float16", "float32"), ("bfloat16", "bfloat16")])
def test_sinks_renormalise_the_teacher(layout: str, dtype: str, wdtype: str, kind: str) -> None:
    for cores, rope in ((1, True), (8, False)):
        case = small(cores + len(kind), dtype, wdtype, layout, rope=rope, n1=6)
        run, sinks = sink_run(case, dtype, wdtype, kind, cores, cores)
        check(run, case, dtype, sinks)


@pytest.mark.parametrize(("dtype", "wdtype"), [("float16", "float16"), ("bfloat16", "float32")])
def test_sinks_far_above_every_logit(dtype: str, wdtype: str) -> None:
    """Sinks of 1e4 (every key's P about e^-1e4: zero in float32 and float64) and a head whose sink
    is 20 below the others: the teacher is the keys' softmax pooled over the heads, finite, as in
    the reference; CANN's form gives 1 / 0 here."""
    case = small(21, dtype, wdtype, "TND", n1=5, lens_q=[6, 9], lens_k=[11, 9], k=10)
    sinks = np.array([1e4, 1e4, 1e4 - 20.0, 1e4, 1e4], np.float32)
    rebuild_stats(case, sinks)
    run = indexer.sparse_lightning_indexer_grad_kl_loss(problem(case, dtype, wdtype, sinks), 8)
    check(run, case, dtype, sinks)
    assert np.abs(run.outputs[0]).max() > 0, "the gradients are not all zero"


def test_sinks_odd_lengths_and_empty_rows() -> None:
    case = small(12, "bfloat16", "float32", "TND", lens_q=[1, 17, 0, 6], lens_k=[3, 21, 2, 33], k=12, drop=0.4)
    case.arrays["sparse_indices"][5, 0] = -1  # a token without a visible key: zero gradients and loss
    run, sinks = sink_run(case, "bfloat16", "float32", "mixed", 12, 8)
    check(run, case, "bfloat16", sinks)
    assert (run.outputs[0][5] == 0).all() and (run.outputs[2][5] == 0).all()


def test_sinks_ascend_shape() -> None:
    case = make_case(np.random.default_rng(2), "bfloat16", "float32", "TND", n1=32, d=512, dr=64, nidx=8, didx=128,
                     k=1024, lens_q=[3, 2], lens_k=[5, 9])
    run, sinks = sink_run(case, "bfloat16", "float32", "random", 2, 8)
    check(run, case, "bfloat16", sinks)


@pytest.mark.parametrize("layout", ["TND", "BSND"])
def test_minus_inf_sinks_are_no_sinks(layout: str) -> None:
    case = small(17, "float16", "float16", layout)
    plain = indexer.sparse_lightning_indexer_grad_kl_loss(problem(case, "float16", "float16"), 8)
    run, sinks = sink_run(case, "float16", "float16", "minus_inf", 0, 8)
    check(run, case, "float16", sinks)
    for a, b in zip(plain.outputs[4:], run.outputs[4:]):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), "a -inf sink must give the bits of no sink"


def test_sinks_same_bits_across_cores_and_orders() -> None:
    case = small(6, "bfloat16", "float32", "TND", lens_q=[9, 14, 5], lens_k=[40, 18, 23], k=16, drop=0.1)
    first, sinks = sink_run(case, "bfloat16", "float32", "mixed", 6, 1, deterministic=True)
    check(first, case, "bfloat16", sinks)
    p = problem(case, "bfloat16", "float32", sinks)
    for cores, seed in ((8, 0), (24, 5)):
        run = indexer.sparse_lightning_indexer_grad_kl_loss(p, cores, seed=seed, deterministic=True)
        for a, b in zip(first.outputs[4:], run.outputs[4:]):
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"bits differ at {cores} cores, seed {seed}"


# ---------------------------------------------------------------- pure tiling
def shape_only(layout: str, *, lens_q: list[int] | None = None, lens_k: list[int] | None = None, b: int = 1,
               s1: int = 1, s2: int = 1, n1: int = 64, d: int = 512, dr: int = 64, nidx: int = 64, didx: int = 128,
               k: int = 2048, wdtype: str = "bfloat16", mode: int = 3) -> indexer.SliProblem:
    """Shapes only (zero-stride arrays): the tiling never reads tensor values."""
    def arr(*shape: int) -> np.ndarray:
        return np.broadcast_to(np.zeros(1), shape)
    tok_q, tok_k = ((sum(lens_q),), (sum(lens_k),)) if layout == "TND" else ((b, s1), (b, s2))
    arrays = {"query": arr(*tok_q, n1, d), "key": arr(*tok_k, 1, d), "query_index": arr(*tok_q, nidx, didx),
              "key_index": arr(*tok_k, 1, didx), "weights": arr(*tok_q, nidx), "sparse_indices": arr(*tok_q, 1, k)}
    if dr:
        arrays["query_rope"] = arr(*tok_q, n1, dr)
    cq = list(np.cumsum(lens_q)) if layout == "TND" else None
    ck = list(np.cumsum(lens_k)) if layout == "TND" else None
    return indexer.SliProblem("bfloat16", wdtype, arrays, cq, ck,
                              dict(scale_value=0.1, layout=layout, sparse_mode=mode))


TILING_SHAPES = [
    ("TND", {"lens_q": [4096, 3, 0, 1500], "lens_k": [4096, 3, 7, 2000]}),
    ("TND", {"lens_q": [1], "lens_k": [1], "n1": 32, "nidx": 8, "k": 1024, "wdtype": "float32"}),
    ("BSND", {"b": 2, "s1": 777, "s2": 1000, "dr": 0, "k": 512}),
    ("BSND", {"b": 1, "s1": 5, "s2": 5, "n1": 128, "nidx": 16, "didx": 64, "k": 3, "d": 128}),
    # planned 196608 bytes against the platform's 192 KiB: into the 256 bytes a mixed kernel leaves
    ("BSND", {"b": 1, "s1": 4, "s2": 6784, "nidx": 8, "k": 6784}),
]


@pytest.mark.parametrize("cores", CORE_COUNTS)
@pytest.mark.parametrize(("layout", "kw"), TILING_SHAPES)
def test_tiling_invariants(cores: int, layout: str, kw: dict) -> None:
    p = shape_only(layout, **kw)
    s = indexer.sli_schedule(p, cores)
    args = p.args(cores)
    t1, t2, k = args.t1, args.t2, args.k
    assert 1 <= s.used_aic <= cores and s.aiv == 2 * s.used_aic
    assert s.used_aic == min(cores, max(1, (t1 + 1) // 2)), "no idle AI core, never more than the cores"
    for starts, total in ((s.row_start, t1), (s.key_block_start, s.key_blocks)):
        assert starts[0] == 0 and starts[-1] == total and np.all(np.diff(starts) >= 0), "each unit exactly once"
    assert s.key_blocks * s.key_block >= t2 > (s.key_blocks - 1) * s.key_block
    kb = np.diff(s.key_block_start)
    assert kb.max() - kb.min() <= 1, "key blocks split evenly"
    assert s.ub_bytes <= twin.ub_bytes_of(mixed=True)
    assert s.k_pad == -(-k // 16) * 16 and s.key_chunk % 16 == 0 and s.key_chunk <= 512
    assert s.m_key == s.row_chunk * args.n_idx <= max(128, args.n_idx)
    # workspace = per-AIV regions + dI [t1, K] + per-token loss [t1], each region 512-aligned
    assert s.ws_di == s.aiv * s.aiv_ws_bytes
    assert s.ws_loss == s.ws_di + -(-t1 * k * 4 // 512) * 512
    assert s.workspace_bytes == s.ws_loss + -(-t1 * 4 // 512) * 512
    assert s.tiling_key == (1 if p.dtype == "bfloat16" else 0) + (10 if p.wdtype == "float32" else 0)
    # rows balanced by the visible-key bound (+16 per row): no AIV above the mean plus one row
    weights = row_weights(p, args)
    loads = np.array([weights[a:b].sum() for a, b in zip(s.row_start[:-1], s.row_start[1:])])
    assert loads.max() <= weights.sum() / s.aiv + weights.max()


@pytest.mark.parametrize(("kw", "match"), [({"d": 24}, "multiple of 16"), ({"didx": 40}, "Didx"),
                                           ({"mode": 1}, "sparse_mode"),
                                           ({"k": 20000}, r"K \(slots of sparse_indices.*\[1, 16384\] on Ascend")])
def test_tiling_rejects(kw: dict, match: str) -> None:
    with pytest.raises(twin.TilingError, match=match):
        indexer.sli_schedule(shape_only("BSND", **kw), 24)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize(("dtype", "wdtype"), [("float16", "float32"), ("bfloat16", "bfloat16")])
def test_nan_in_query_index_reaches_the_outputs_as_in_the_reference(dtype: str, wdtype: str) -> None:
    """NaN in one index head of one token: its scores are NaN, and every output the token reaches
    is NaN exactly where the float64 reference has NaN (relu and [Sx > 0] must not drop it, and the
    key pass must not spread it to keys the token did not select); the rest matches the reference.
    (+Inf in query_index is not matched: the key pass's 0 * Inf reaches unselected keys.)"""
    case = small(9, dtype, wdtype, "TND", lens_q=[4, 5], lens_k=[6, 7], k=5, drop=0.0)
    case.arrays["query_index"][6, 1, 2] = np.nan  # token 6 (second batch), index head 1
    run = indexer.sparse_lightning_indexer_grad_kl_loss(problem(case, dtype, wdtype), 8)
    assert run.info.min_writes == 1 and run.info.max_writes == 1, "NaN never comes from an unwritten element"
    want = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), **case.ref_kwargs())
    tol = TOLERANCES["attention"][dtype]
    for name, got, ref_val in zip((*NAMES, "loss"), run.outputs[:4], want):
        got, ref_val = np.asarray(got, np.float64), np.asarray(ref_val, np.float64)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref_val), err_msg=f"{name}: NaN pattern differs")
        np.testing.assert_array_equal(np.isinf(got), np.isinf(ref_val), err_msg=f"{name}: Inf pattern differs")
        ok = np.isfinite(ref_val)
        if name == "loss":
            assert not ok or abs(got - ref_val) <= LOSS_TOL * abs(ref_val), f"loss {got} vs {ref_val}"
        else:
            assert ok.any() and rel_l2(got[ok], ref_val[ok]) <= tol, f"{name}: finite values differ"
    assert np.isnan(run.outputs[0][6]).all() and np.isnan(run.outputs[3]), "token 6 and the loss are NaN"
    assert not np.isnan(run.outputs[1]).all(), "keys token 6 did not select stay finite"
    assert np.isfinite(run.outputs[0][:4]).all(), "tokens of the first batch stay finite"
