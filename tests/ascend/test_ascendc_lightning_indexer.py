"""lightning_indexer Ascend C kernel on the CPU twin (mixed launch: Sx on the cube, scores and
the top-k on the vector cores) and the CPU kernel, each against the float64 reference: a valid
ordered selection of scores within the error bound of a float32 evaluation (``_selection``; the
two sum in different orders, and the CPU kernel's order depends on the CPU: AVX2 or AVX-512
sgemm, oneDNN's bf16 matmul on AVX512-BF16/AMX), -1 / -inf in unused slots; exact ties
(integer-valued data: every product and sum is exact on both) resolved to the lower index, and
there twin and CPU kernel equal bit for bit; TND/BSND, sparse_mode 0/3, weights of the input
dtype or float32, rows with one or no visible key, more visible keys than a chunk, 1/8/24 cores.
Also the twin's Sort32 against its documented semantics and the pure tiling's invariants for 1,
8, 20, 24, 40 and 48 AI cores."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _selection import assert_same_selection, indexer_scores
from _util import quantize, to_ms
from ascendc_harness import twin_indexer as indexer
from ascendc_harness import twin_lib as twin

from ms_grad_ops import ops

CORE_COUNTS = (1, 8, 20, 24, 40, 48)


def cpu_kernel(p: indexer.LiProblem) -> tuple[np.ndarray, np.ndarray]:
    lens = (None, None) if p.lens_q is None else (ms.Tensor(np.array(p.lens_q, np.int32)),
                                                  ms.Tensor(np.array(p.lens_k, np.int32)))
    idx, val = ops.lightning_indexer(to_ms(p.query_index, p.dtype), to_ms(p.key_index, p.dtype),
                                     to_ms(p.weights, p.wdtype), *lens, **p.attrs)
    return idx.asnumpy(), val.asnumpy()


def problem(seed: int, dtype: str, wdtype: str, layout: str, *, k: int, mode: int = 3, integer: bool = False,
            lens_q: list[int] | None = None, lens_k: list[int] | None = None, b: int = 2, s1: int = 9, s2: int = 13,
            nidx: int = 4, didx: int = 16) -> indexer.LiProblem:
    rng = np.random.default_rng(seed)
    if layout == "TND":
        tq, tk = (sum(lens_q),), (sum(lens_k),)
    else:
        tq, tk = (b, s1), (b, s2)

    def draw(*shape: int, dt: str) -> np.ndarray:
        if integer:  # small integers: every score is exact, so equal scores are exact ties
            return rng.integers(-2, 3, shape).astype(np.float64)
        return quantize(rng.standard_normal(shape), dt)
    cq = list(np.cumsum(lens_q)) if layout == "TND" else None
    ck = list(np.cumsum(lens_k)) if layout == "TND" else None
    return indexer.LiProblem(dtype, wdtype, draw(*tq, nidx, didx, dt=dtype), draw(*tk, 1, didx, dt=dtype),
                             draw(*tq, nidx, dt=wdtype), cq, ck, dict(sparse_count=k, layout=layout, sparse_mode=mode))


def check(p: indexer.LiProblem, cores: int, *, exact: bool = False) -> twin.KernelRun:
    """Twin and CPU kernel each a valid top-k of the float64 scores within their float32 bounds;
    ``exact`` (small-integer data, exact arithmetic on both): bound 0, and both equal bit for bit."""
    run = indexer.lightning_indexer(p, cores)
    assert run.info.min_writes == 1 and run.info.max_writes == 1, "every output byte written exactly once"
    assert run.info.ub_peak_bytes == run.info.tiling_ub_bytes <= twin.ub_bytes_of(p.arch, mixed=True)
    idx, val = run.outputs
    scores = indexer_scores(p.query_index, p.key_index, p.weights, p.lens_q, p.lens_k, layout=p.layout,
                            sparse_mode=p.attrs["sparse_mode"])
    if exact:
        scores = scores.exactly()
    assert_same_selection(idx, val, scores, "twin")
    cpu_idx, cpu_val = cpu_kernel(p)
    assert_same_selection(cpu_idx, cpu_val, scores, "CPU kernel")
    if exact:
        np.testing.assert_array_equal(idx, cpu_idx)
        np.testing.assert_array_equal(val, cpu_val)
    return run


@pytest.mark.parametrize("layout", ["TND", "BSND"])
@pytest.mark.parametrize(("dtype", "wdtype"), [("float16", "float16"), ("bfloat16", "float32")])
def test_selection_equals_the_cpu_kernel(layout: str, dtype: str, wdtype: str) -> None:
    lens = {"lens_q": [5, 0, 17, 1], "lens_k": [7, 3, 40, 0]} if layout == "TND" else {}
    for cores, mode, k in ((1, 3, 8), (8, 0, 5), (24, 3, 50)):
        check(problem(cores, dtype, wdtype, layout, k=k, mode=mode, **lens), cores)


@pytest.mark.parametrize("mode", [0, 3])
def test_exact_ties_go_to_the_lower_index(mode: int) -> None:
    p = problem(4, "float16", "float16", "TND", k=37, mode=mode, integer=True, lens_q=[30, 6], lens_k=[90, 40],
                nidx=3)
    run = check(p, 8, exact=True)
    idx, val = run.outputs
    ties = 0
    for row_i, row_v in zip(idx.reshape(-1, p.sparse_count), val.reshape(-1, p.sparse_count)):
        used = row_i >= 0
        same = (row_v[1:] == row_v[:-1]) & used[1:]
        ties += int(same.sum())
        assert np.all(row_i[1:][same] > row_i[:-1][same]), "equal scores in ascending index order"
    assert ties > 50, "the data must contain many exact ties to test them"


def test_many_chunks_one_and_no_visible_key() -> None:
    """S2 = 1200 keys (three 512-key chunks, a partial one), first query rows seeing 1 or 0 keys."""
    p = problem(9, "bfloat16", "bfloat16", "BSND", k=64, b=1, s1=6, s2=1200)
    check(p, 2)
    q = problem(10, "bfloat16", "bfloat16", "TND", k=4, lens_q=[3], lens_k=[1])  # causal: rows 0, 1 see no key
    idx, _ = check(q, 1).outputs
    assert (idx[:2] == -1).all() and idx[2, 0, 0] == 0 and (idx[2, 0, 1:] == -1).all()


def test_ascend_shapes() -> None:
    """Nidx = 64, Didx = 128, sparse_count 2048 > visible keys at small S."""
    p = problem(2, "bfloat16", "float32", "TND", k=2048, lens_q=[3, 4], lens_k=[300, 9], nidx=64, didx=128)
    check(p, 8)


# ---------------------------------------------------------------- twin Sort32
def test_twin_sort32_documented_semantics() -> None:
    """Each group of 32 sorted by descending score, equal scores in their original order (lower
    position first), groups never mixed, each index travelling with its score."""
    rng = np.random.default_rng(0)
    scores = rng.integers(-3, 4, 96).astype(np.float32)  # many exact ties
    indices = rng.permutation(1000)[:96].astype(np.uint32)
    got_s, got_i = indexer.sort32(scores, indices)
    for g in range(3):
        part = slice(32 * g, 32 * g + 32)
        order = np.argsort(-scores[part], kind="stable")
        np.testing.assert_array_equal(got_s[part], scores[part][order])
        np.testing.assert_array_equal(got_i[part], indices[part][order])


def test_twin_sort32_refuses_nan() -> None:
    """A NaN score's order is not documented: the twin refuses it."""
    with pytest.raises(twin.TwinRuleError, match="Sort32: NaN score"):
        indexer.sort32(np.r_[np.zeros(31), np.nan], np.arange(32))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_nan_scores_rank_last_and_keep_their_value() -> None:
    """NaN weights of one row (all its scores NaN) and NaN in one key (its score NaN in every row
    that sees it): the kernel never hands NaN to Sort32; twin and CPU kernel rank NaN below every
    number, NaN keys in key order, and hold NaN values exactly where the float64 reference has NaN
    (``check``)."""
    p = problem(6, "float16", "float32", "TND", k=6, lens_q=[3, 4], lens_k=[5, 9])
    p.key_index[7, 0, 0] = np.nan  # key 2 of batch 2
    p.weights[4, 0] = np.nan       # every score of row 4
    run = check(p, 8)
    idx, val = run.outputs
    assert np.isnan(val[4, 0, :5]).all() and np.isnan(val).sum() > 5, "row 4 and key 2's rows carry NaN"


# ---------------------------------------------------------------- pure tiling
def shape_only(layout: str, *, lens_q: list[int] | None = None, lens_k: list[int] | None = None, b: int = 1,
               s1: int = 1, s2: int = 1, nidx: int = 64, didx: int = 128, k: int = 2048, mode: int = 3,
               wdtype: str = "bfloat16") -> indexer.LiProblem:
    def arr(*shape: int) -> np.ndarray:
        return np.broadcast_to(np.zeros(1), shape)
    tq, tk = ((sum(lens_q),), (sum(lens_k),)) if layout == "TND" else ((b, s1), (b, s2))
    cq = list(np.cumsum(lens_q)) if layout == "TND" else None
    ck = list(np.cumsum(lens_k)) if layout == "TND" else None
    return indexer.LiProblem("bfloat16", wdtype, arr(*tq, nidx, didx), arr(*tk, 1, didx), arr(*tq, nidx), cq, ck,
                             dict(sparse_count=k, layout=layout, sparse_mode=mode))


TILING_SHAPES = [
    ("TND", {"lens_q": [4096, 3, 0, 1500], "lens_k": [4096, 3, 7, 2000]}),
    ("TND", {"lens_q": [1], "lens_k": [1], "nidx": 8, "k": 1024, "wdtype": "float32"}),
    ("BSND", {"b": 2, "s1": 777, "s2": 1000, "k": 512, "mode": 0}),
    ("BSND", {"b": 1, "s1": 5, "s2": 5, "nidx": 16, "didx": 64, "k": 3}),
    # planned 196608 bytes against the platform's 192 KiB: into the 256 bytes a mixed kernel leaves
    ("BSND", {"b": 1, "s1": 4, "s2": 12160, "k": 12160, "wdtype": "float32"}),
]


@pytest.mark.parametrize("cores", CORE_COUNTS)
@pytest.mark.parametrize(("layout", "kw"), TILING_SHAPES)
def test_tiling_invariants(cores: int, layout: str, kw: dict) -> None:
    p = shape_only(layout, **kw)
    s = indexer.li_schedule(p, cores)
    args = p.args(cores)
    assert s.used_aic == min(cores, max(1, (args.t1 + 1) // 2)) and s.aiv == 2 * s.used_aic
    starts = s.row_start
    assert starts[0] == 0 and starts[-1] == args.t1 and np.all(np.diff(starts) >= 0), "each token exactly once"
    assert s.ub_bytes <= twin.ub_bytes_of(mixed=True)
    assert s.key_chunk % 32 == 0 and 32 <= s.key_chunk <= 512 and s.k_pad == -(-args.k // 8) * 8
    assert s.workspace_bytes == s.aiv * s.aiv_ws_bytes and s.aiv_ws_bytes >= args.n_idx * s.key_chunk * 4
    assert s.tiling_key == 1 + (10 if p.wdtype == "float32" else 0)
    spans = list(zip(np.diff([0, *p.lens_q]), np.diff([0, *p.lens_k]))) if layout == "TND" else \
        [(args.s1, args.s2)] * args.batch
    weights = np.array([16 + (max(0, min(s2, i + s2 - s1 + 1)) if p.attrs["sparse_mode"] == 3 else s2)
                        for s1, s2 in spans for i in range(s1)], np.int64)
    loads = np.array([weights[a:b].sum() for a, b in zip(starts[:-1], starts[1:])])
    assert loads.max() <= weights.sum() / s.aiv + weights.max(), "tokens balanced by visible keys"


@pytest.mark.parametrize(("kw", "match"), [
    ({"didx": 40}, "Didx"), ({"mode": 1}, "sparse_mode"),
    # the table's Ascend limits, read as the op_host reads them
    ({"k": 20000}, r"lightning_indexer: attribute 'sparse_count' must be an integer in \[1, 16384\] on Ascend, "
                   r"got 20000"),
    ({"nidx": 200}, r"Nidx \(indexer heads, query_index dim -2\) must be in \[1, 128\] on Ascend")])
def test_tiling_rejects(kw: dict, match: str) -> None:
    with pytest.raises(twin.TilingError, match=match):
        indexer.li_schedule(shape_only("BSND", **kw), 24)
