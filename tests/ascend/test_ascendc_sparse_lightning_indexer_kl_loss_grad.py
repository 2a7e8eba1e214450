"""sparse_lightning_indexer_kl_loss_grad Ascend C kernel (CANN's V4 SparseLightningIndexerKLLossGrad: the target
attn_softmax_l1_norm an input, dI = y sum(p) - p) on the CPU twin (mixed AIC + AIV launch: row pass for softmax_out,
the per-token loss, d_weights and d_query_index; SyncAll; key-block ownership pass for d_key_index; AIV 0 sums the
loss) against the float64 reference: fp16/bf16 with weights of that dtype or float32, TND (several sequences, one
without queries) and BSND, cmp_ratio 1 and 4 with residuals (slots the compressed rule hides carry NaN targets:
never read), -1 slots, duplicates, rows with one or no visible key, targets not summing to 1, poisoned outputs
(every byte written exactly once), both NPU arches (2201 = Atlas A2/A3, 3510 = Ascend 950), the same output bits
for 1, 8 and 24 cores and a shuffled core order, and one case at the real sizes (Nidx 64, Didx 128, K 512,
hundreds of tokens). Plus the pure tiling's invariants and refusals."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import test_ascendc_lightning_indexer_grad as lig_test
from _util import quantize, rel_l2
from ascendc_harness import twin_indexer as indexer
from ascendc_harness import twin_lib as twin
from test_ascendc_indexer_cmp import layout_of, residuals, tokens, visible

from ms_grad_ops import reference as ref

A2, A950 = twin.ARCH_A2, twin.ARCH_950
NAMES = ("d_query_index", "d_key_index", "d_weights")
# softmax_out and the loss are float32 sums of float32 terms (no 16-bit rounding): a few float32 roundoffs
# times the score magnitudes.
Y_TOL, LOSS_TOL = 2e-5, 2e-5


def make_problem(seed: int, layout: str, ratio: int, *, dtype: str = "bfloat16", wdtype: str = "float32",
                 k: int = 7, nidx: int = 4, didx: int = 32, arch: int = A2, shape: dict | None = None,
                 target_sum: float = 0.8, sparse_mode: int = 3) -> indexer.SlkgProblem:
    """Random inputs rounded to their dtypes; slots: keys of the row's batch, some hidden by the compressed rule,
    -1 slots, a duplicate. The target p is positive at the visible slots and sums to ``target_sum`` per row (the
    window and the sink take the rest), NaN at every other slot (never read)."""
    rng = np.random.default_rng(seed)
    shape = shape or layout_of(layout, ratio)
    tq, tk, cq, ck = tokens(shape)
    qi = quantize(0.5 * rng.standard_normal((*tq, nidx, didx)), dtype)
    ki = quantize(rng.standard_normal((*tk, 1, didx)), dtype)
    w = quantize(rng.standard_normal((*tq, nidx)) / np.sqrt(nidx), wdtype)
    res = residuals(rng, layout, len(shape["seq"]), ratio)
    rows, vis = [], []
    for (s1, s2), r in zip(shape["seq"], res):
        for t in range(s1):
            row = rng.integers(-1, max(s2, 1), k).astype(np.int32)
            row[rng.random(k) < 0.15] = -1
            if k > 2 and row[0] >= 0:
                row[1] = row[0]  # a duplicate: two slots, two softmax entries
            rows.append(row)
            vis.append((row >= 0) & (row < (visible(t, s1, s2, ratio, r) if sparse_mode == 3 else s2)))
    si = np.stack(rows).reshape(*tq, 1, k)
    read = np.stack(vis).reshape(si.shape)
    p = rng.random(si.shape) + 0.05
    p = np.where(read, p, 0.0)
    p = p * (target_sum / np.maximum(p.sum(-1, keepdims=True), 1e-30))
    target = np.where(read, p.astype(np.float32), np.float32(np.nan))
    attrs = dict(layout=shape["ms_layout"], sparse_mode=sparse_mode, cmp_ratio=ratio)
    return indexer.SlkgProblem(dtype, wdtype, qi, ki, w, si, target, cq, ck, attrs, arch=arch, cmp_residual_k=res)


def reference(p: indexer.SlkgProblem) -> tuple:
    return ref.sparse_lightning_indexer_kl_loss_grad(p.query_index, p.key_index, p.weights, p.sparse_indices,
                                                     p.target, p.lens_q, p.lens_k, p.cmp_residual_k, **p.attrs)


def check(run: twin.KernelRun, p: indexer.SlkgProblem, want: tuple | None = None) -> None:
    info = run.info
    assert info.min_writes == 1 and info.max_writes == 1, "every output byte written exactly once"
    assert info.ub_peak_bytes == info.tiling_ub_bytes <= twin.ub_bytes_of(p.arch, mixed=True), "UB = the plan"
    want = reference(p) if want is None else want
    k, nidx, didx = p.sparse_indices.shape[-1], p.query_index.shape[-2], p.query_index.shape[-1]
    t1 = int(np.prod(p.query_index.shape[:-2]))
    reductions = (k + didx, t1 * nidx + didx, k + didx)
    # Rows nothing reaches (no visible slot, or relu closed for every head): the score backward with dI = 1 at
    # the visible slots is 0 there. (The KL gradient itself can cancel to 0 elsewhere, e.g. one visible key.)
    reach = ref.lightning_indexer_grad(p.query_index, p.key_index, p.weights, p.sparse_indices,
                                       np.where(np.isnan(p.target), np.nan, 1.0), p.lens_q, p.lens_k,
                                       p.cmp_residual_k, **p.attrs)
    for name, got, ref_val, n, dt, r in zip(NAMES, run.outputs[:3], want, reductions, (p.dtype, p.dtype, p.wdtype),
                                            reach):
        assert got.shape == ref_val.shape, name
        assert np.isfinite(got).all(), f"{name}: non-finite output (a poisoned slot read, or unwritten)"
        err, tol = rel_l2(got, ref_val), lig_test.tolerance(dt, n)
        assert err <= tol, f"{name}: relative L2 error {err:.3g} > {tol:.3g} ({dt})"
        zero = np.all(r == 0, axis=-1)
        assert (got[zero] == 0).all(), f"{name}: rows without a contribution must be 0"
    y, loss = run.outputs[3], run.outputs[4]
    assert y.shape == want[3].shape and np.isfinite(y).all(), "softmax_out: every slot written"
    assert (y[want[3] == 0] == 0).all(), "softmax_out is 0 at -1 / hidden slots"
    assert rel_l2(y, want[3]) <= Y_TOL, f"softmax_out: {rel_l2(y, want[3]):.3g}"
    assert abs(loss - want[4]) <= LOSS_TOL * max(abs(want[4]), 1e-3), f"loss {loss} vs {want[4]}"


def same_bits(a: twin.KernelRun, b: twin.KernelRun, what: str) -> None:
    for i, (x, z) in enumerate(zip(a.outputs[5:], b.outputs[5:])):
        assert np.array_equal(x.view(np.uint8), z.view(np.uint8)), f"output {i}: bits differ ({what})"


XW = [("float16", "float16"), ("float16", "float32"), ("bfloat16", "bfloat16"), ("bfloat16", "float32")]
MATRIX = list(itertools.product((1, 4), ("TND", "BSND"), (A2, A950)))


@pytest.mark.parametrize(("ratio", "layout", "arch"), MATRIX)
def test_matches_reference_bitwise_across_cores(ratio: int, layout: str, arch: int) -> None:
    dtype, wdtype = XW[MATRIX.index((ratio, layout, arch)) % len(XW)]
    p = make_problem(ratio + 3 * len(layout) + arch, layout, ratio, dtype=dtype, wdtype=wdtype, arch=arch)
    want = reference(p)
    first = indexer.sparse_lightning_indexer_kl_loss_grad(p, 1)
    check(first, p, want)
    if ratio > 1:
        hidden = np.isnan(p.target) & (p.sparse_indices >= 0)
        assert hidden.any(), "slots hidden by the compressed rule (NaN targets) exist"
    for cores, seed in ((8, 0), (24, 5)):
        run = indexer.sparse_lightning_indexer_kl_loss_grad(p, cores, seed)
        check(run, p, want)
        same_bits(first, run, f"{cores} cores, seed {seed}")


def test_sparse_mode_0() -> None:
    """No mask: every in-range slot is visible whatever cmp_ratio says (the rule is sparse_mode 3's)."""
    p = make_problem(17, "TND", 4, dtype="float16", wdtype="float32", sparse_mode=0)
    first = indexer.sparse_lightning_indexer_kl_loss_grad(p, 8)
    check(first, p)
    same_bits(first, indexer.sparse_lightning_indexer_kl_loss_grad(p, 24, 2), "24 cores, seed 2")


def test_edge_rows() -> None:
    """BSND, one batch, causal: row 0 sees one key (dI = sum(p) - p = 0, y = 1), row 1 selects only -1, row 2 only
    hidden keys, row 3 one key three times among -1 and hidden slots, row 4 out-of-range indices (skipped unread on
    the device; the reference, which rejects them, gets -1 there); row 5's target sums to 2.5 (not 1)."""
    p = make_problem(3, "BSND", 1, dtype="float16", wdtype="float16", k=6,
                     shape={"seq": [(8, 8)], "ms_layout": "BSND", "lens": False})
    p.cmp_residual_k = None
    si = p.sparse_indices
    si[0, 0, 0] = [-1, 0, -1, -1, -1, -1]
    si[0, 1, 0] = -1
    si[0, 2, 0] = [7, 6, 5, -1, 4, 3]  # all beyond row 2's limit (keys 0..2)
    si[0, 3, 0] = [2, 6, 2, -1, 2, -1]
    si[0, 4, 0] = [8, 1, 1 << 30, -5, 3, -(1 << 30)]
    rng = np.random.default_rng(4)
    vis = (si >= 0) & (si <= np.arange(8).reshape(1, 8, 1, 1))
    p.target = np.where(vis, (rng.random(si.shape) + 0.1).astype(np.float32), np.float32(np.nan))
    p.target[0, 5] *= np.float32(2.5 / np.nansum(p.target[0, 5]))
    run = indexer.sparse_lightning_indexer_kl_loss_grad(p, 2)
    in_range = indexer.SlkgProblem(p.dtype, p.wdtype, p.query_index, p.key_index, p.weights,
                                   np.where((si < -1) | (si >= 8), -1, si), p.target, None, None, p.attrs)
    want = reference(in_range)
    check(run, in_range, want)
    d_qi, _, d_w, y, _ = run.outputs[:5]
    assert y[0, 0, 0, 1] == 1 and (y[0, 0, 0, [0, 2, 3, 4, 5]] == 0).all(), "one visible key: y = 1 there only"
    assert (y[0, 1:3] == 0).all() and (d_qi[0, 1:3] == 0).all() and (d_w[0, 1:3] == 0).all()
    assert np.allclose(y[0, 3, 0, [0, 2, 4]], 1 / 3, rtol=1e-6) and (y[0, 3, 0, [1, 3, 5]] == 0).all()
    assert abs(np.abs(want[2][0, 5]).sum()) > 0 and abs(np.abs(d_w[0, 5]).sum()) > 0


def test_real_sizes() -> None:
    """Nidx 64, Didx 128, K 512 (CANN's smallest A2/A3 K), 288 query tokens over two TND sequences at cmp_ratio 4
    (V4's CSA: 72 compressed keys), bf16 with float32 weights, 24 cores."""
    shape = {"seq": [(160, 40), (128, 32)], "ms_layout": "TND", "lens": True}
    p = make_problem(21, "TND", 4, nidx=64, didx=128, k=512, shape=shape)
    check(indexer.sparse_lightning_indexer_kl_loss_grad(p, 24), p)


def test_cann_largest_k() -> None:
    """K = 8192 (CANN's A2/A3 maximum; five float32 [K] vectors per token in UB) at Nidx 64, Didx 128: few tokens,
    most slots -1."""
    shape = {"seq": [(4, 37)], "ms_layout": "BSND", "lens": False}
    p = make_problem(8, "BSND", 1, dtype="float16", wdtype="float32", k=8192, nidx=64, didx=128, shape=shape)
    p.cmp_residual_k = None
    check(indexer.sparse_lightning_indexer_kl_loss_grad(p, 8), p)


# ---------------------------------------------------------------- pure tiling
def shape_only(layout: str, *, lens_q: list[int] | None = None, lens_k: list[int] | None = None, b: int = 1,
               s1: int = 1, s2: int = 1, nidx: int = 64, didx: int = 128, k: int = 2048,
               arch: int = A2) -> indexer.SlkgProblem:
    """Shapes only (zero-stride arrays): the tiling never reads tensor values."""
    def arr(*s: int) -> np.ndarray:
        return np.broadcast_to(np.zeros(1), s)
    tok_q, tok_k = ((sum(lens_q),), (sum(lens_k),)) if layout == "TND" else ((b, s1), (b, s2))
    cq = list(np.cumsum(lens_q)) if layout == "TND" else None
    ck = list(np.cumsum(lens_k)) if layout == "TND" else None
    return indexer.SlkgProblem("bfloat16", "float32", arr(*tok_q, nidx, didx), arr(*tok_k, 1, didx),
                               arr(*tok_q, nidx), arr(*tok_q, 1, k), arr(*tok_q, 1, k), cq, ck,
                               dict(layout=layout, sparse_mode=3), arch=arch)


TILING_SHAPES = [
    ("TND", {"lens_q": [4096, 3, 0, 1500], "lens_k": [1024, 3, 7, 375]}),
    ("BSND", {"b": 2, "s1": 777, "s2": 1000, "k": 512}),
    ("BSND", {"b": 1, "s1": 5, "s2": 5, "nidx": 128, "didx": 64, "k": 3}),
    ("BSND", {"b": 3, "s1": 64, "s2": 64, "k": 8192}),
]


@pytest.mark.parametrize("arch", [A2, A950])
@pytest.mark.parametrize("cores", [1, 24, 36])
@pytest.mark.parametrize(("layout", "kw"), TILING_SHAPES)
def test_tiling_invariants(layout: str, kw: dict, cores: int, arch: int) -> None:
    p = shape_only(layout, arch=arch, **kw)
    s = indexer.slkg_schedule(p, cores, twin.platform_ub(arch))
    args = p.args(cores)
    t1, t2, k = args.t1, args.t2, args.k
    assert s.key_blocks * s.key_block >= t2 > (s.key_blocks - 1) * s.key_block
    assert 1 <= s.used_aic <= cores and s.aiv == 2 * s.used_aic
    assert s.used_aic == min(cores, max(1, (max(t1, s.key_blocks) + 1) // 2)), "no idle AI core"
    for starts, total in ((s.row_start, t1), (s.key_block_start, s.key_blocks)):
        assert starts[0] == 0 and starts[-1] == total and np.all(np.diff(starts) >= 0), "each unit exactly once"
    assert s.ub_bytes <= twin.ub_bytes_of(arch, mixed=True) and 1 <= s.gather_rows <= 16
    assert s.k_pad == -(-k // 16) * 16
    # workspace: one region per AIV, then dI by slot [T1, K] and the per-token losses [T1], 512-aligned
    assert s.ws_di == s.aiv * s.aiv_ws_bytes
    assert s.ws_loss == s.ws_di + -(-t1 * k * 4 // 512) * 512
    assert s.workspace_bytes == s.ws_loss + -(-t1 * 4 // 512) * 512
    assert s.tiling_key == (1 if p.dtype == "bfloat16" else 0) + (10 if p.wdtype == "float32" else 0)


@pytest.mark.parametrize(("kw", "match"), [({"didx": 40}, "Didx"),
                                           ({"k": 20000}, r"K \(slots of sparse_indices.*\[1, 16384\] on Ascend"),
                                           ({"nidx": 200}, r"Nidx \(indexer heads.*\[1, 128\] on Ascend"),
                                           ({"k": 16384}, "unified buffer")])
def test_tiling_rejects(kw: dict, match: str) -> None:
    with pytest.raises(twin.TilingError, match=match):
        indexer.slkg_schedule(shape_only("BSND", **kw), 24)
