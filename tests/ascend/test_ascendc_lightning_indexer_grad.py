"""lightning_indexer_grad Ascend C kernel on the CPU twin (mixed AIC + AIV launch: row pass for
d_weights and d_query_index, key-block ownership pass for d_key_index) against the float64
reference: fp16/bf16 inputs, weights of the same dtype or float32, TND/BSND, sparse_mode 0/3, -1
slots anywhere, hidden and out-of-range indices (their d_values poisoned with NaN: never read),
duplicates, rows with no visible key, the Ascend shapes (Didx = 128, Nidx 8 / 64, K = 1024); 1/8/24
cores and the same output bits for any core count and any core execution order. The twin itself
checks UB capacity and alignment, cube-vs-vector placement, GM races, unwritten reads and the
atomics state on every launch. Plus the pure tiling's invariants for 1, 8, 20, 24, 40 and 48 AI cores."""
from __future__ import annotations

import math

import numpy as np
import pytest
from _indexer_cases import row_weights
from _util import quantize, rel_l2
from ascendc_harness import twin_indexer as indexer
from ascendc_harness import twin_lib as twin

from ms_grad_ops import reference as ref

NAMES = ("d_query_index", "d_key_index", "d_weights")
CORE_COUNTS = (1, 8, 20, 24, 40, 48)
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24}


def tolerance(dtype: str, reduction: int) -> float:
    """Relative L2 bound for an output of ``dtype`` summed over ``reduction`` products: 16-bit
    rounding of dS / the coefficients and of the output (one unit roundoff each, which random-sign
    sums do not grow), plus float32 accumulation of the sums (sqrt(n) growth, 2 sigma). The twin
    measures about 0.6 unit roundoffs at the Ascend shapes."""
    return 2 * UNIT_ROUNDOFF[dtype] + 2 * math.sqrt(reduction) * UNIT_ROUNDOFF["float32"]


def make_problem(seed: int, dtype: str, wdtype: str, layout: str, sparse_mode: int = 3, *,
                 lens_q: list[int] | None = None, lens_k: list[int] | None = None, b: int = 2, s1: int = 7,
                 s2: int = 9, nidx: int = 4, didx: int = 16, k: int = 8, drop: float = 0.2,
                 oversample: float = 0.0) -> indexer.LigProblem:
    """Random inputs rounded to their dtypes. Slots: distinct keys of the row's batch in random
    order, a ``drop`` share set to -1; with ``oversample`` > 0 also keys beyond the causal limit.
    d_values is NaN at every -1 / hidden slot (the kernel must never read them)."""
    rng = np.random.default_rng(seed)
    if layout == "TND":
        lens_q, lens_k = lens_q or [5, 0, 9], lens_k or [7, 3, 12]
        tok_q, tok_k, seq = [sum(lens_q)], [sum(lens_k)], list(zip(lens_q, lens_k))
    else:
        tok_q, tok_k, seq = [b, s1], [b, s2], [(s1, s2)] * b
    qi = quantize(0.5 * rng.standard_normal((*tok_q, nidx, didx)), dtype)
    ki = quantize(rng.standard_normal((*tok_k, 1, didx)), dtype)
    w = quantize(rng.standard_normal((*tok_q, nidx)) / np.sqrt(nidx), wdtype)
    rows, visible = [], []
    for s1_b, s2_b in seq:
        for i in range(s1_b):
            limit = s2_b if sparse_mode == 0 else max(0, min(s2_b, i + s2_b - s1_b + 1))
            pool = s2_b if oversample > 0 else limit
            row = np.full(k, -1, np.int32)
            pick = rng.permutation(pool)[:k]
            row[:pick.size] = pick
            row[rng.random(k) < drop] = -1
            row = rng.permutation(row)
            rows.append(row)
            visible.append((row >= 0) & (row < limit))
    si = np.stack(rows).reshape(*tok_q, 1, k) if rows else np.zeros((*tok_q, 1, k), np.int32)
    vis = np.stack(visible).reshape(si.shape) if rows else np.zeros(si.shape, bool)
    dv = np.where(vis, quantize(rng.standard_normal(si.shape), "float32"), np.nan)
    cq = list(np.cumsum(lens_q)) if layout == "TND" else None
    ck = list(np.cumsum(lens_k)) if layout == "TND" else None
    return indexer.LigProblem(dtype, wdtype, qi, ki, w, si, dv, cq, ck, dict(layout=layout, sparse_mode=sparse_mode))


def reference(p: indexer.LigProblem) -> tuple[np.ndarray, ...]:
    return ref.lightning_indexer_grad(p.query_index, p.key_index, p.weights, p.sparse_indices, p.d_values,
                                      p.lens_q, p.lens_k, **p.attrs)


def check(run: twin.KernelRun, p: indexer.LigProblem, want: tuple[np.ndarray, ...] | None = None) -> None:
    info = run.info
    assert info.min_writes == 1 and info.max_writes == 1, "every output byte written exactly once"
    assert info.ub_peak_bytes == info.tiling_ub_bytes <= twin.ub_bytes_of(mixed=True), "UB = the tiling's plan"
    want = reference(p) if want is None else want
    k, nidx, didx = p.sparse_indices.shape[-1], p.query_index.shape[-2], p.query_index.shape[-1]
    t1 = int(np.prod(p.query_index.shape[:-2]))
    # reduction lengths: Sx sums Didx products; then dq and dw sum K keys, dk every (token, head)
    reductions = (k + didx, t1 * nidx + didx, k + didx)
    for name, got, ref_val, n, dt in zip(NAMES, run.outputs[:3], want, reductions,
                                         (p.dtype, p.dtype, p.wdtype)):
        assert got.shape == ref_val.shape, name
        assert np.isfinite(got).all(), f"{name}: non-finite output (a poisoned slot read, or unwritten)"
        err, tol = rel_l2(got, ref_val), tolerance(dt, n)
        assert err <= tol, f"{name}: relative L2 error {err:.3g} > {tol:.3g} ({dt})"
        zero = np.all(ref_val == 0, axis=-1)  # rows nothing reaches: exactly zero
        assert (got[zero] == 0).all(), f"{name}: rows without a contribution must be 0"


XW = [("float16", "float16"), ("float16", "float32"), ("bfloat16", "bfloat16"), ("bfloat16", "float32")]


@pytest.mark.parametrize("layout", ["TND", "BSND"])
@pytest.mark.parametrize(("dtype", "wdtype"), XW)
def test_small_cases(layout: str, dtype: str, wdtype: str) -> None:
    for cores, mode in ((1, 3), (8, 0), (24, 3)):
        p = make_problem(cores + len(layout), dtype, wdtype, layout, mode, oversample=0.5)
        check(indexer.lightning_indexer_grad(p, cores), p)


@pytest.mark.parametrize("mode", [0, 3])
def test_sparse_mode_and_odd_lengths(mode: int) -> None:
    p = make_problem(11, "bfloat16", "float32", "TND", mode, lens_q=[1, 17, 0, 6], lens_k=[3, 21, 2, 33], k=12,
                     drop=0.4, nidx=3, didx=32, oversample=1.0)
    check(indexer.lightning_indexer_grad(p, 8), p)


def test_empty_rows_duplicates_and_out_of_range() -> None:
    """Row 0 sees one key (the causal limit), row 1 selects only -1, row 2 only hidden keys, row 3
    one key three times among -1 and hidden slots, row 4 out-of-range indices (skipped without a
    read; the reference, which rejects them, gets -1 there)."""
    p = make_problem(3, "float16", "float16", "BSND", b=1, s1=8, s2=8, k=6)
    si, dv = p.sparse_indices, p.d_values
    si[0, 0, 0] = [-1, 0, -1, -1, -1, -1]
    si[0, 1, 0] = -1
    si[0, 2, 0] = [7, 6, 5, -1, 4, 3]  # all beyond row 2's limit (keys 0..2)
    si[0, 3, 0] = [2, 6, 2, -1, 2, -1]
    si[0, 4, 0] = [8, 1, 1 << 30, -5, 3, -(1 << 30)]
    vis = np.zeros(si.shape, bool)
    vis[0, 0, 0, 1] = True
    vis[0, 3, 0, [0, 2, 4]] = True
    vis[0, 4, 0, [1, 4]] = True
    vis[0, 5:] = True
    dv[...] = np.where(vis, 1.0 + np.arange(si.size).reshape(si.shape) % 5, np.nan)
    run = indexer.lightning_indexer_grad(p, 2)
    ref_si = np.where((si < -1) | (si >= 8), -1, si)
    want = ref.lightning_indexer_grad(p.query_index, p.key_index, p.weights, ref_si, p.d_values, layout="BSND")
    check(run, p, want)
    d_qi, d_ki, d_w = run.outputs[:3]
    assert (d_qi[0, 1] == 0).all() and (d_w[0, 1] == 0).all() and (d_qi[0, 2] == 0).all()
    assert np.abs(d_qi[0, 3]).max() > 0, "a duplicated visible key contributes"


@pytest.mark.parametrize(("dtype", "wdtype", "nidx", "layout"), [("bfloat16", "float32", 8, "TND"),
                                                                 ("float16", "float16", 64, "BSND")])
def test_ascend_shapes(dtype: str, wdtype: str, nidx: int, layout: str) -> None:
    """Didx = 128, K = 1024 at small S (most slots -1), Nidx 8 and 64."""
    extra = {"lens_q": [3, 2], "lens_k": [5, 40]} if layout == "TND" else {"b": 1, "s1": 4, "s2": 37}
    p = make_problem(nidx, dtype, wdtype, layout, nidx=nidx, didx=128, k=1024, drop=0.0, oversample=1.0, **extra)
    check(indexer.lightning_indexer_grad(p, 8), p)


def test_deterministic_bits_across_cores_and_orders() -> None:
    """d_key_index sums are formed by one AIV per key block in a fixed order: identical bits for
    any core count and any (seeded, shuffled) core execution order."""
    p = make_problem(5, "bfloat16", "float32", "TND", lens_q=[9, 14, 5], lens_k=[40, 18, 23], k=16, drop=0.1,
                     oversample=0.3)
    first = indexer.lightning_indexer_grad(p, 1)
    check(first, p)
    for cores, seed in ((8, 0), (24, 0), (8, 3), (24, 11)):
        run = indexer.lightning_indexer_grad(p, cores, seed=seed)
        for a, b in zip(first.outputs[3:], run.outputs[3:]):
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"bits differ at {cores} cores, seed {seed}"


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_nan_d_value_reaches_what_the_reference_reaches() -> None:
    """A NaN d_values entry at a visible slot makes its token's d_weights and d_query_index rows and
    its key's d_key_index row NaN, as in the reference, and nothing else (the key pass must not
    spread it to the block's other keys)."""
    p = make_problem(9, "float16", "float32", "TND", lens_q=[4, 5], lens_k=[6, 7], k=5, drop=0.0)
    t, slot = 6, int(np.flatnonzero(~np.isnan(p.d_values[6, 0]))[0])
    p.d_values[t, 0, slot] = np.nan
    run = indexer.lightning_indexer_grad(p, 8)
    assert run.info.min_writes == 1 and run.info.max_writes == 1
    want = reference(p)
    for name, got, ref_val in zip(NAMES, run.outputs[:3], want):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref_val), err_msg=f"{name}: NaN pattern differs")
        ok = np.isfinite(ref_val)
        assert ok.any() and rel_l2(got[ok], ref_val[ok]) <= tolerance(p.dtype, 5 + 16), name
    assert np.isnan(run.outputs[1]).any() and not np.isnan(run.outputs[1]).all()


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize(("dtype", "wdtype"), [("float16", "float32"), ("bfloat16", "bfloat16")])
def test_nan_in_query_index_stays_with_its_keys(dtype: str, wdtype: str) -> None:
    """NaN in one index head of one token reaches the rows the float64 reference reaches and no
    others: d_weights exactly where it has NaN, d_key_index in the keys that token selected (the key
    pass must not spread it to the block's other keys through 0 * NaN). As in the CPU kernel,
    [Sx > 0] of a NaN score is NaN, so the head's d_query_index row and the selected keys'
    d_key_index rows are NaN in every element; the reference's mask drops to 0 there (NaN only
    where the query_index element is). The rest matches the reference."""
    p = make_problem(9, dtype, wdtype, "TND", lens_q=[4, 5], lens_k=[6, 7], k=5, drop=0.0)
    p.query_index[6, 1, 2] = np.nan  # token 6 (second batch), index head 1
    run = indexer.lightning_indexer_grad(p, 8)
    assert run.info.min_writes == 1 and run.info.max_writes == 1, "NaN never comes from an unwritten element"
    want = reference(p)
    for name, got, ref_val in zip(NAMES, run.outputs[:3], want):
        got_nan, ref_nan = np.isnan(got), np.isnan(ref_val)
        if name != "d_weights":  # whole rows here, single elements there
            assert got_nan.all(-1).sum() == got_nan.any(-1).sum()
            got_nan, ref_nan = got_nan.any(-1), ref_nan.any(-1)
            if name == "d_query_index":
                ref_nan = ref_nan | np.isnan(p.query_index).any(-1)
        np.testing.assert_array_equal(got_nan, ref_nan, err_msg=f"{name}: NaN rows differ")
        ok = ~np.isnan(got)
        assert ok.any() and rel_l2(got[ok], ref_val[ok]) <= tolerance(dtype, 5 * 4 + 16), name
    assert np.isnan(run.outputs[1]).any() and not np.isnan(run.outputs[1]).all()


# ---------------------------------------------------------------- pure tiling
def shape_only(layout: str, *, lens_q: list[int] | None = None, lens_k: list[int] | None = None, b: int = 1,
               s1: int = 1, s2: int = 1, nidx: int = 64, didx: int = 128, k: int = 2048, wdtype: str = "bfloat16",
               mode: int = 3) -> indexer.LigProblem:
    """Shapes only (zero-stride arrays): the tiling never reads tensor values."""
    def arr(*shape: int) -> np.ndarray:
        return np.broadcast_to(np.zeros(1), shape)
    tok_q, tok_k = ((sum(lens_q),), (sum(lens_k),)) if layout == "TND" else ((b, s1), (b, s2))
    cq = list(np.cumsum(lens_q)) if layout == "TND" else None
    ck = list(np.cumsum(lens_k)) if layout == "TND" else None
    return indexer.LigProblem("bfloat16", wdtype, arr(*tok_q, nidx, didx), arr(*tok_k, 1, didx), arr(*tok_q, nidx),
                              arr(*tok_q, 1, k), arr(*tok_q, 1, k), cq, ck, dict(layout=layout, sparse_mode=mode))


TILING_SHAPES = [
    ("TND", {"lens_q": [4096, 3, 0, 1500], "lens_k": [4096, 3, 7, 2000]}),
    ("TND", {"lens_q": [1], "lens_k": [1], "nidx": 8, "k": 1024, "wdtype": "float32"}),
    ("TND", {"lens_q": [2], "lens_k": [5000], "nidx": 8, "k": 1024, "mode": 0}),
    ("BSND", {"b": 2, "s1": 777, "s2": 1000, "k": 512}),
    ("BSND", {"b": 1, "s1": 5, "s2": 5, "nidx": 128, "didx": 64, "k": 3}),
    ("BSND", {"b": 3, "s1": 64, "s2": 64, "nidx": 64, "didx": 128, "k": 8192}),
]


@pytest.mark.parametrize("cores", CORE_COUNTS)
@pytest.mark.parametrize(("layout", "kw"), TILING_SHAPES)
def test_tiling_invariants(cores: int, layout: str, kw: dict) -> None:
    p = shape_only(layout, **kw)
    s = indexer.lig_schedule(p, cores)
    args = p.args(cores)
    t1, t2, k = args.t1, args.t2, args.k
    assert s.key_blocks * s.key_block >= t2 > (s.key_blocks - 1) * s.key_block
    assert 1 <= s.used_aic <= cores and s.aiv == 2 * s.used_aic
    assert s.used_aic == min(cores, max(1, (max(t1, s.key_blocks) + 1) // 2)), "no idle AI core"
    for starts, total in ((s.row_start, t1), (s.key_block_start, s.key_blocks)):
        assert starts[0] == 0 and starts[-1] == total and np.all(np.diff(starts) >= 0), "each unit exactly once"
    kb = np.diff(s.key_block_start)
    assert kb.max() - kb.min() <= 1, "key blocks split evenly"
    assert s.ub_bytes <= twin.ub_bytes_of(mixed=True) and 1 <= s.gather_rows <= 16
    assert s.k_pad == -(-k // 16) * 16
    assert s.m_key == s.row_chunk * args.n_idx <= max(128, args.n_idx)
    # workspace: one region per AIV (9 pieces, each 512-aligned), nothing global
    pieces = [s.k_pad * args.d_idx * 2, args.n_idx * s.k_pad * 4, args.n_idx * s.k_pad * 2, args.n_idx * args.d_idx * 4,
              s.m_key * args.d_idx * 2, s.key_block * args.d_idx * 2, s.m_key * s.key_block * 4,
              s.m_key * s.key_block * 2, s.key_block * args.d_idx * 4]
    assert s.aiv_ws_bytes == sum(-(-x // 512) * 512 for x in pieces)
    assert s.workspace_bytes == s.aiv * s.aiv_ws_bytes
    assert s.tiling_key == (1 if p.dtype == "bfloat16" else 0) + (10 if p.wdtype == "float32" else 0)
    weights = row_weights(p, args)
    loads = np.array([weights[a:b].sum() for a, b in zip(s.row_start[:-1], s.row_start[1:])])
    assert loads.max() <= weights.sum() / s.aiv + weights.max(), "rows balanced by the visible-key bound"


def test_tiling_shrinks_the_gather_tile_to_fit_a_smaller_ub() -> None:
    full = indexer.lig_schedule(shape_only("BSND", k=8192), 8)
    assert full.gather_rows == 16
    ub = full.ub_bytes - 1
    small = indexer.lig_schedule(shape_only("BSND", k=8192), 8, ub_bytes=ub)
    assert small.ub_bytes <= ub and small.gather_rows == 8


@pytest.mark.parametrize(("kw", "match"), [({"didx": 40}, "Didx"), ({"mode": 1}, "sparse_mode"),
                                           ({"k": 20000}, r"K \(slots of sparse_indices.*\[1, 16384\] on Ascend"),
                                           ({"nidx": 200}, r"Nidx \(indexer heads.*\[1, 128\] on Ascend"),
                                           ({"k": 16384}, "unified buffer")])
def test_tiling_rejects(kw: dict, match: str) -> None:
    with pytest.raises(twin.TilingError, match=match):
        indexer.lig_schedule(shape_only("BSND", **kw), 24)


def test_tiling_rejects_zero_cores() -> None:
    with pytest.raises(twin.TilingError, match="core count"):
        indexer.lig_schedule(shape_only("BSND"), 0)
