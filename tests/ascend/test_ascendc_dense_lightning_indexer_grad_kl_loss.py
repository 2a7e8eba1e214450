"""dense_lightning_indexer_grad_kl_loss Ascend C kernel on the CPU twin (mixed AIC + AIV launch:
row pass over each token's visible keys in chunks for the teacher p, y, loss, d_weights and
d_query_index; key-block ownership pass recomputing dI for d_key_index; the loss summed in token
order) against the float64 reference, itself equal to the sparse path's at top-k = S (every
visible key selected, teacher statistics over all of them): fp16/bf16 inputs, weights of the same dtype or float32,
TND/BSND, rope present or absent, lengths with empty sequences, rows without a visible key, rows
longer than a chunk, odd head counts, the Ascend shapes; poisoned outputs written exactly once;
the same output bits for any core count and core execution order. The main attention with N2 = 1
(MLA-absorbed) and N2 = N1 (CANN's MHA, against the float64 reference with per-head statistics).
Plus the pure tiling's invariants (UB and workspace independent of S) and its refusals (sparse_mode
0 is not taken on Ascend; grouped heads 1 < N2 < N1, refused by the shape rule, by the tiling too)."""
from __future__ import annotations

import numpy as np
import pytest
from _dense_cases import dense_case, dense_ref_args
from _dense_indexer_cases import DenseCase, make_dense_case
from _indexer_cases import Case
from _util import TOLERANCES, rel_l2
from ascendc_harness import twin_dense_indexer as dense
from ascendc_harness import twin_lib as twin

from ms_grad_ops import reference as ref

NAMES = ("d_query_index", "d_key_index", "d_weights")
LOSS_TOL = 1e-4
CORE_COUNTS = (1, 8, 20, 24, 40, 48)


def problem(case: Case, dtype: str, wdtype: str) -> dense.DligProblem:
    arrays = {n: v for n, v in case.arrays.items() if n != "sparse_indices"}
    return dense.DligProblem(dtype, wdtype, arrays, case.lens_q, case.lens_k,
                             dict(scale_value=case.scale, layout=case.layout, sparse_mode=case.sparse_mode))


def small(seed: int, dtype: str, wdtype: str, layout: str, rope: bool = True, **kw: object) -> Case:
    """Small generic shapes (multiples of 16 where the kernel's 32-byte rows need them)."""
    args = {"n1": 4, "d": 32, "dr": 16 if rope else 0, "nidx": 4, "didx": 16} | kw
    return dense_case(np.random.default_rng(seed), dtype, wdtype, layout, **args)


def check(run: twin.KernelRun, case: Case, dtype: str) -> None:
    want = ref.dense_lightning_indexer_grad_kl_loss(*dense_ref_args(case), **case.ref_kwargs())
    # The sparse path at top-k = S: the same loss and gradients, up to the float32 rounding of the
    # index statistics the dense op takes (the sparse op normalises y itself).
    sparse = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), **case.ref_kwargs())
    for name, a, b in zip(NAMES, want, sparse):
        assert rel_l2(a, b) <= 1e-5, f"{name}: dense vs sparse reference"
    assert abs(want[3] - sparse[3]) <= 1e-5 * abs(sparse[3]) + 1e-9, "loss: dense vs sparse reference"
    check_against(run, want, dtype)


def check_against(run: twin.KernelRun, want: tuple, dtype: str) -> None:
    """The twin's outputs against the float64 reference ``want`` (d_query_index, d_key_index,
    d_weights, loss); every output byte written once, UB as planned."""
    info = run.info
    assert info.min_writes == 1 and info.max_writes == 1, "every output byte written exactly once"
    assert info.ub_peak_bytes == info.tiling_ub_bytes <= twin.ub_bytes_of(mixed=True), "UB = the tiling's plan"
    tol = TOLERANCES["attention"][dtype]
    for name, got, ref_val in zip(NAMES, run.outputs[:3], want[:3]):
        assert np.isfinite(got).all(), name
        err = rel_l2(got, ref_val)
        assert err <= tol, f"{name}: relative L2 error {err:.3g} > {tol:g} ({dtype})"
        zero = np.all(ref_val == 0, axis=-1)  # rows nothing reaches: exactly zero
        assert (got[zero] == 0).all(), f"{name}: rows without a contribution must be 0"
    assert abs(run.outputs[3] - want[3]) <= LOSS_TOL * abs(want[3]) + 1e-6, f"loss {run.outputs[3]} vs {want[3]}"


@pytest.mark.parametrize("layout", ["TND", "BSND"])
@pytest.mark.parametrize(("dtype", "wdtype"), [("float16", "float16"), ("float16", "float32"),
                                               ("bfloat16", "bfloat16"), ("bfloat16", "float32")])
def test_small_cases(layout: str, dtype: str, wdtype: str) -> None:
    for cores, rope in ((1, True), (8, False), (24, True)):
        case = small(cores + len(layout), dtype, wdtype, layout, rope=rope)
        check(dense.dense_lightning_indexer_grad_kl_loss(problem(case, dtype, wdtype), cores), case, dtype)


def test_odd_lengths_and_empty_rows() -> None:
    """Lengths with an empty query and an empty key sequence, more queries than keys (causal rows
    without a visible key), odd head counts, a key block spanning sequences."""
    case = small(3, "bfloat16", "float32", "TND", n1=3, nidx=5, lens_q=[4, 0, 9, 3, 6], lens_k=[2, 5, 21, 0, 17])
    check(dense.dense_lightning_indexer_grad_kl_loss(problem(case, "bfloat16", "float32"), 4), case, "bfloat16")


def test_rows_longer_than_a_chunk() -> None:
    """S2 = 600 keys: three row-pass chunks of 256, 38 key blocks, d_query_index accumulated over
    chunks, key blocks seen by many query chunks."""
    case = small(4, "float16", "float16", "BSND", b=1, s1=40, s2=600)
    check(dense.dense_lightning_indexer_grad_kl_loss(problem(case, "float16", "float16"), 3), case, "float16")


def test_ascend_shapes() -> None:
    """DeepSeek-V3.2's dims: N1 = 16 heads of D = 512 + Dr = 64, Nidx = 64, Didx = 128."""
    case = small(5, "bfloat16", "bfloat16", "TND", n1=16, d=512, dr=64, nidx=64, didx=128, lens_q=[5, 3],
                 lens_k=[40, 3])
    check(dense.dense_lightning_indexer_grad_kl_loss(problem(case, "bfloat16", "bfloat16"), 4), case, "bfloat16")


def test_same_bits_for_any_core_count_and_order() -> None:
    case = small(6, "bfloat16", "float32", "TND", lens_q=[12, 0, 20], lens_k=[30, 4, 20])
    p = problem(case, "bfloat16", "float32")
    first = dense.dense_lightning_indexer_grad_kl_loss(p, 1).outputs[4:]
    for cores, seed in ((8, 0), (24, 5), (48, 11)):
        again = dense.dense_lightning_indexer_grad_kl_loss(p, cores, seed).outputs[4:]
        for name, a, b in zip((*NAMES, "loss"), first, again):
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8), err_msg=name)


# ---------------------------------------------------------------- N2 = N1 (CANN's MHA main attention)
def mha_problem(case: DenseCase, dtype: str, wdtype: str) -> dense.DligProblem:
    return dense.DligProblem(dtype, wdtype, dict(case.arrays), case.lens_q, case.lens_k, case.grad_attrs())


def mha_case(seed: int, dtype: str, wdtype: str, layout: str, rope: bool = True, **kw: object) -> DenseCase:
    """key [.., N1, D]: head h of a query against head h of the keys, statistics [N1, T1, 1] / [B, N1, S1, 1]."""
    args = {"n1": 4, "n2": 4, "d": 32, "dr": 16 if rope else 0, "nidx": 4, "didx": 16} | kw
    return make_dense_case(np.random.default_rng(seed), dtype, wdtype, layout, **args)


def mha_want(case: DenseCase) -> tuple:
    return ref.dense_lightning_indexer_grad_kl_loss(*case.ref_grad_args(), **case.grad_attrs())


@pytest.mark.parametrize(("layout", "dtype", "wdtype", "rope", "kw"), [
    # Three sequences (one empty, one with more queries than keys), a group spanning a chunk edge.
    ("TND", "float16", "float32", True, {"lens_q": [21, 0, 9], "lens_k": [300, 4, 5]}),
    ("TND", "bfloat16", "bfloat16", False, {"lens_q": [5, 18, 3], "lens_k": [7, 40, 3]}),
    ("BSND", "bfloat16", "float32", True, {"b": 2, "s1": 19, "s2": 23}),
    ("BSND", "float16", "float16", False, {"b": 3, "s1": 6, "s2": 5, "n1": 3, "n2": 3, "nidx": 5}),
])
def test_mha(layout: str, dtype: str, wdtype: str, rope: bool, kw: dict) -> None:
    case = mha_case(len(kw) + len(layout), dtype, wdtype, layout, rope, **kw)
    p = mha_problem(case, dtype, wdtype)
    check_against(dense.dense_lightning_indexer_grad_kl_loss(p, 3), mha_want(case), dtype)


def test_mha_ascend_shape_and_same_bits() -> None:
    """CANN's MHA: N1 = N2 = 32 heads of D = 128 + Dr = 64, Nidx 8, Didx 128; the same output bits
    for 1, 8 and 24 cores in any execution order."""
    case = mha_case(7, "bfloat16", "float32", "TND", n1=32, n2=32, d=128, dr=64, nidx=8, didx=128,
                    lens_q=[20, 13], lens_k=[20, 37])
    p = mha_problem(case, "bfloat16", "float32")
    first = dense.dense_lightning_indexer_grad_kl_loss(p, 1)
    check_against(first, mha_want(case), "bfloat16")
    for cores, seed in ((8, 3), (24, 9)):
        again = dense.dense_lightning_indexer_grad_kl_loss(p, cores, seed).outputs[4:]
        for name, a, b in zip((*NAMES, "loss"), first.outputs[4:], again):
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8), err_msg=name)


# ---------------------------------------------------------------- pure tiling
def shape_only(layout: str, *, lens_q: list[int] | None = None, lens_k: list[int] | None = None, b: int = 1,
               s1: int = 1, s2: int = 1, n1: int = 128, n2: int = 1, d: int = 512, dr: int = 64, nidx: int = 64,
               didx: int = 128, mode: int = 3, wdtype: str = "bfloat16") -> dense.DligProblem:
    def arr(*shape: int) -> np.ndarray:
        return np.broadcast_to(np.zeros(1), shape)
    tq, tk = ((sum(lens_q),), (sum(lens_k),)) if layout == "TND" else ((b, s1), (b, s2))
    arrays = {"query": arr(*tq, n1, d), "key": arr(*tk, n2, d), "query_index": arr(*tq, nidx, didx),
              "key_index": arr(*tk, 1, didx), "weights": arr(*tq, nidx)}
    if dr:
        arrays |= {"query_rope": arr(*tq, n1, dr), "key_rope": arr(*tk, n2, dr)}
    cq = list(np.cumsum(lens_q)) if layout == "TND" else None
    ck = list(np.cumsum(lens_k)) if layout == "TND" else None
    return dense.DligProblem("bfloat16", wdtype, arrays, cq, ck,
                             dict(scale_value=0.1, layout=layout, sparse_mode=mode))


TILING_SHAPES = [
    ("TND", {"lens_q": [4096, 3, 0, 1500], "lens_k": [4096, 3, 7, 2000]}),
    ("TND", {"lens_q": [1], "lens_k": [1], "n1": 1, "nidx": 8, "dr": 0, "wdtype": "float32"}),
    ("BSND", {"b": 2, "s1": 777, "s2": 1000, "n1": 32, "d": 128}),
    ("BSND", {"b": 1, "s1": 131072, "s2": 131072, "n1": 256, "nidx": 128}),
    ("TND", {"lens_q": [4096, 5], "lens_k": [4096, 9], "n1": 128, "n2": 128, "d": 128}),
    ("BSND", {"b": 3, "s1": 131072, "s2": 131072, "n1": 32, "n2": 32, "d": 128, "nidx": 8}),
]


@pytest.mark.parametrize("cores", CORE_COUNTS)
@pytest.mark.parametrize(("layout", "kw"), TILING_SHAPES)
def test_tiling_invariants(cores: int, layout: str, kw: dict) -> None:
    p = shape_only(layout, **kw)
    s = dense.dlig_schedule(p, cores)
    args = p.args(cores)
    assert s.used_aic == min(cores, max(1, (args.t1 + 1) // 2)) and s.aiv == 2 * s.used_aic
    rows, keys = s.row_start, s.key_block_start
    assert rows[0] == 0 and rows[-1] == args.t1 and np.all(np.diff(rows) >= 0), "each token exactly once"
    assert s.key_blocks == -(-args.t2 // s.key_block) and s.key_block == 16
    assert keys[0] == 0 and keys[-1] == s.key_blocks and np.diff(keys).max() - np.diff(keys).min() <= 1
    assert s.ub_bytes <= twin.ub_bytes_of(mixed=True)
    assert s.m_main == s.tok_chunk * args.n1 <= 256 or s.tok_chunk == 1
    assert s.m_key == s.tok_chunk * args.n_idx
    assert s.key_chunk % 16 == 0 and s.key_chunk <= 256
    # O(block) per core: the per-AIV workspace does not grow with S; only the per-token losses do.
    assert s.q_group == (1 if kw.get("n2", 1) == 1 else 16)
    assert s.aiv_ws_bytes < 4 << 20 and s.ws_loss == s.aiv * s.aiv_ws_bytes
    assert s.workspace_bytes == s.ws_loss + -(-args.t1 * 4 // 512) * 512
    assert s.tiling_key == 1 + (10 if p.wdtype == "float32" else 0)


@pytest.mark.parametrize(("kw", "match"), [
    ({"didx": 40}, "Didx"), ({"d": 40}, "head dim D"),
    ({"mode": 0}, r"dense_lightning_indexer_grad_kl_loss: attribute 'sparse_mode' must be .*3.* on Ascend"),
    ({"nidx": 200}, r"Nidx \(indexer heads, query_index dim -2\) must be in \[1, 128\] on Ascend"),
    ({"n1": 300}, r"N1 \(attention heads, query dim -2\) must be in \[1, 256\] on Ascend"),
    ({"n1": 8, "n2": 2}, r"key heads N2 \(key dim -2\) must be 1 \(MLA-absorbed\) or N1 \(MHA\)")])
def test_tiling_rejects(kw: dict, match: str) -> None:
    with pytest.raises(twin.TilingError, match=match):
        dense.dlig_schedule(shape_only("BSND", **kw), 24)
