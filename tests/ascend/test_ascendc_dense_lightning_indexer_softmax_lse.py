"""dense_lightning_indexer_softmax_lse Ascend C kernel on the CPU twin (mixed launch: Sx on the
cube, the scores and their running max / sum of exponentials on the vector cores) against the
float64 reference (itself checked against the sparse path at top-k = S: the reference
lightning_indexer selecting every key); fp16/bf16, weights of the input dtype or
float32, TND/BSND (sparse_mode 3 only: the table's Ascend limit, as CANN's kernel), lengths with
empty sequences, rows with one or no visible key (0 / 0), rows longer than a key chunk, odd
shapes, the Ascend shapes; poisoned outputs, every output byte written once; the same bits for
any core count and core order. Plus the pure tiling's invariants and refusals."""
from __future__ import annotations

import numpy as np
import pytest
from _util import quantize
from ascendc_harness import twin_dense_indexer as dense
from ascendc_harness import twin_lib as twin

from ms_grad_ops import reference as ref

CORE_COUNTS = (1, 8, 20, 24, 40, 48)
# float32 scores and a float32 running sum against float64: relative error of the statistics.
TOL = {"max": 1e-5, "sum": 1e-4}


def problem(seed: int, dtype: str, wdtype: str, layout: str, *, mode: int = 3, lens_q: list[int] | None = None,
            lens_k: list[int] | None = None, b: int = 2, s1: int = 9, s2: int = 13, nidx: int = 4,
            didx: int = 16) -> dense.DliProblem:
    rng = np.random.default_rng(seed)
    tq, tk = ((sum(lens_q),), (sum(lens_k),)) if layout == "TND" else ((b, s1), (b, s2))
    cq = list(np.cumsum(lens_q)) if layout == "TND" else None
    ck = list(np.cumsum(lens_k)) if layout == "TND" else None
    qi = quantize(rng.standard_normal((*tq, nidx, didx)) / 2, dtype)
    ki = quantize(rng.standard_normal((*tk, 1, didx)), dtype)
    w = quantize(rng.standard_normal((*tq, nidx)) / np.sqrt(nidx), wdtype)
    return dense.DliProblem(dtype, wdtype, qi, ki, w, cq, ck, dict(layout=layout, sparse_mode=mode))


def reference(p: dense.DliProblem) -> tuple[np.ndarray, np.ndarray]:
    """The float64 reference; checked here against the sparse path at top-k = S (the reference
    lightning_indexer selecting every visible key), whose scores it must summarise."""
    want = ref.dense_lightning_indexer_softmax_lse(p.query_index, p.key_index, p.weights, p.lens_q, p.lens_k,
                                                   layout=p.layout, sparse_mode=p.attrs["sparse_mode"])
    keys = p.key_index.shape[0] if p.layout == "TND" else p.key_index.shape[1]
    _, val = ref.lightning_indexer(p.query_index, p.key_index, p.weights, p.lens_q, p.lens_k,
                                   sparse_count=max(keys, 1), layout=p.layout, sparse_mode=p.attrs["sparse_mode"])
    val = val.reshape(-1, val.shape[-1])
    seen = np.isfinite(val)
    mx = np.where(seen.any(axis=1), np.where(seen, val, -np.inf).max(axis=1, initial=-np.inf), 0.0)
    sm = np.where(seen, np.exp(np.where(seen, val, 0.0) - mx[:, None]), 0.0).sum(axis=1)
    np.testing.assert_allclose(want[0].reshape(-1), mx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(want[1].reshape(-1), sm, rtol=1e-12, atol=1e-12)
    return want


def check(p: dense.DliProblem, cores: int, seed: int = 0) -> twin.KernelRun:
    run = dense.dense_lightning_indexer_softmax_lse(p, cores, seed)
    assert run.info.min_writes == 1 and run.info.max_writes == 1, "every output byte written exactly once"
    assert run.info.ub_peak_bytes == run.info.tiling_ub_bytes <= twin.ub_bytes_of(p.arch, mixed=True)
    got_max, got_sum = run.outputs
    want_max, want_sum = reference(p)
    scale = np.maximum(np.abs(want_max), 1.0)
    np.testing.assert_array_less(np.abs(got_max - want_max) / scale, TOL["max"])
    np.testing.assert_array_less(np.abs(got_sum - want_sum), TOL["sum"] * np.maximum(want_sum, 1.0))
    empty = want_sum == 0
    assert (got_max[empty] == 0).all() and (got_sum[empty] == 0).all(), "rows without a visible key: 0 / 0"
    return run


@pytest.mark.parametrize("layout", ["TND", "BSND"])
@pytest.mark.parametrize(("dtype", "wdtype"), [("float16", "float16"), ("float16", "float32"),
                                               ("bfloat16", "bfloat16"), ("bfloat16", "float32")])
def test_statistics_equal_the_reference(layout: str, dtype: str, wdtype: str) -> None:
    lens = {"lens_q": [5, 0, 17, 1], "lens_k": [7, 3, 40, 0]} if layout == "TND" else {}
    for cores in (1, 8, 24):
        check(problem(cores + len(layout), dtype, wdtype, layout, **lens), cores)


def test_rows_longer_than_a_chunk_and_without_keys() -> None:
    """S2 = 1200 keys (three 512-key chunks, a partial one: the running max / sum across chunks),
    odd Nidx; causal rows 0, 1 of a 3-query, 1-key sequence see no key."""
    check(problem(9, "bfloat16", "bfloat16", "BSND", b=1, s1=6, s2=1200, nidx=3), 2)
    run = check(problem(10, "float16", "float32", "TND", lens_q=[3, 2], lens_k=[1, 5]), 1)
    got_max, got_sum = run.outputs
    assert (got_sum[0, :2] == 0).all() and got_sum[0, 2] == 1.0 and (got_sum[0, 3:] > 1).all()


def test_ascend_shapes() -> None:
    """Nidx = 64, Didx = 128 (DeepSeek-V3.2's indexer), a long and a short sequence."""
    check(problem(2, "bfloat16", "float32", "TND", lens_q=[3, 4], lens_k=[700, 9], nidx=64, didx=128), 8)


def test_same_bits_for_any_core_count_and_order() -> None:
    p = problem(5, "float16", "float16", "TND", lens_q=[30, 6, 11], lens_k=[90, 40, 11])
    first = [x.view(np.uint32) for x in check(p, 1).outputs]
    for cores, seed in ((8, 3), (24, 0), (48, 7)):
        again = dense.dense_lightning_indexer_softmax_lse(p, cores, seed).outputs
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a, b.view(np.uint32))


# ---------------------------------------------------------------- pure tiling
def shape_only(layout: str, *, lens_q: list[int] | None = None, lens_k: list[int] | None = None, b: int = 1,
               s1: int = 1, s2: int = 1, nidx: int = 64, didx: int = 128, mode: int = 3,
               wdtype: str = "bfloat16") -> dense.DliProblem:
    def arr(*shape: int) -> np.ndarray:
        return np.broadcast_to(np.zeros(1), shape)
    tq, tk = ((sum(lens_q),), (sum(lens_k),)) if layout == "TND" else ((b, s1), (b, s2))
    cq = list(np.cumsum(lens_q)) if layout == "TND" else None
    ck = list(np.cumsum(lens_k)) if layout == "TND" else None
    return dense.DliProblem("bfloat16", wdtype, arr(*tq, nidx, didx), arr(*tk, 1, didx), arr(*tq, nidx), cq, ck,
                            dict(layout=layout, sparse_mode=mode))


TILING_SHAPES = [
    ("TND", {"lens_q": [4096, 3, 0, 1500], "lens_k": [4096, 3, 7, 2000]}),
    ("TND", {"lens_q": [1], "lens_k": [1], "nidx": 8, "wdtype": "float32"}),
    ("BSND", {"b": 2, "s1": 777, "s2": 1000}),
    ("BSND", {"b": 1, "s1": 131072, "s2": 131072, "nidx": 128, "didx": 128}),
]


@pytest.mark.parametrize("cores", CORE_COUNTS)
@pytest.mark.parametrize(("layout", "kw"), TILING_SHAPES)
def test_tiling_invariants(cores: int, layout: str, kw: dict) -> None:
    p = shape_only(layout, **kw)
    s = dense.dli_schedule(p, cores)
    args = p.args(cores)
    assert s.used_aic == min(cores, max(1, (args.t1 + 1) // 2)) and s.aiv == 2 * s.used_aic
    starts = s.row_start
    assert starts[0] == 0 and starts[-1] == args.t1 and np.all(np.diff(starts) >= 0), "each token exactly once"
    assert s.ub_bytes <= twin.ub_bytes_of(mixed=True)
    assert s.key_chunk % 16 == 0 and 16 <= s.key_chunk <= 512, "UB and workspace O(chunk), not O(S)"
    assert s.workspace_bytes == s.aiv * s.aiv_ws_bytes and s.aiv_ws_bytes >= args.n_idx * s.key_chunk * 4
    assert s.workspace_bytes <= 2 * 48 * 128 * 512 * 4 + 2 * 48 * 512, "workspace independent of S"
    assert s.tiling_key == 1 + (10 if p.wdtype == "float32" else 0)


@pytest.mark.parametrize(("kw", "match"), [
    ({"didx": 40}, "Didx"),
    # the table's Ascend limits, read as the op_host reads them: CANN's kernel is causal only
    ({"mode": 0}, r"dense_lightning_indexer_softmax_lse: attribute 'sparse_mode' must be .*3.* on Ascend"),
    ({"nidx": 200}, r"Nidx \(indexer heads, query_index dim -2\) must be in \[1, 128\] on Ascend")])
def test_tiling_rejects(kw: dict, match: str) -> None:
    with pytest.raises(twin.TilingError, match=match):
        dense.dli_schedule(shape_only("BSND", **kw), 24)
