"""BSND with per-batch ``actual_seq_lengths`` (CANN's meaning, docs/contract.md section 0.3) in every op
that takes lengths: a CANN-style call (padded batch rows; a length 4 of S1 = 5, zeros) equals the
same data packed as TND, float32 and bfloat16, PyNative and GRAPH.

Every input of a padding position is NaN and the sparse indices of padding query rows are out of
range, so one read of a padding row would show (a NaN output, a RuntimeError). Each kernel result is
compared with the float64 reference of the packed TND data (not BSND with TND: the key-gradient
partitions, hence summation orders, differ); the reference itself gives the packed result exactly
in BSND; outputs at padding positions are exact values (0, -1, -inf)."""
from __future__ import annotations

from collections.abc import Callable

import mindspore as ms
import numpy as np
import pytest
from _selection import assert_same_selection, indexer_scores
from _util import OpCell, assert_close, quantize, to_ms, to_np
from mindspore import Tensor

from ms_grad_ops import ops
from ms_grad_ops import reference as ref

B, S1, S2 = 4, 5, 7
LENS_Q, LENS_K = [4, 0, 5, 2], [6, 3, 7, 0]  # padding rows, a batch without queries, a full row, no keys
N1, D, DR, NIDX, DIDX, K, BS = 4, 16, 8, 2, 8, 6, 2
SCALE = 0.3
GARBAGE = np.array([99999, -7], np.int32)  # a padding row's indices: out of range, were they read
DTYPES = ("float32", "bfloat16")


def cum(lens: list[int]) -> list[int]:
    return [int(x) for x in np.cumsum(lens)]


def _valid(lens: list[int], s: int) -> np.ndarray:
    """Flat BSND rows (b * s + i) holding the packed TND rows, in TND order."""
    return np.concatenate([b * s + np.arange(n) for b, n in enumerate(lens)])


def to_bsnd(x: np.ndarray, lens: list[int], s: int, fill: float = np.nan) -> np.ndarray:
    """Packed ``[T, ...]`` -> padded ``[B, s, ...]``, padding rows ``fill``."""
    out = np.full((B * s, *x.shape[1:]), fill, x.dtype)
    out[_valid(lens, s)] = x
    return out.reshape(B, s, *x.shape[1:])


def to_tnd(x: np.ndarray, lens: list[int]) -> np.ndarray:
    """Padded ``[B, s, ...]`` -> its packed rows ``[T, ...]``."""
    return x.reshape(-1, *x.shape[2:])[_valid(lens, x.shape[1])]


def padding(x: np.ndarray, lens: list[int]) -> np.ndarray:
    """The padding rows of a padded ``[B, s, ...]``."""
    return np.delete(x.reshape(-1, *x.shape[2:]), _valid(lens, x.shape[1]), axis=0)


def stats_to_bsnd(st: np.ndarray) -> np.ndarray:
    """Statistics ``[N2, T1, G]`` -> ``[B, N2, S1, G]``, padding NaN."""
    return to_bsnd(st.transpose(1, 0, 2), LENS_Q, S1).transpose(0, 2, 1, 3)


def stats_to_tnd(st: np.ndarray) -> np.ndarray:
    return to_tnd(st.transpose(0, 2, 1, 3), LENS_Q).transpose(1, 0, 2)


def stats_padding(st: np.ndarray) -> np.ndarray:
    return padding(st.transpose(0, 2, 1, 3), LENS_Q)


def bsnd_indices(idx: np.ndarray) -> np.ndarray:
    """Packed ``[T1, 1, K]`` indices -> ``[B, S1, 1, K]``, padding rows out of range."""
    flat = np.resize(GARBAGE, (B * S1, 1, K))
    flat[_valid(LENS_Q, S1)] = idx
    return flat.reshape(B, S1, 1, K)


class Data:
    """Packed TND inputs of every op (float64 holding values exact in ``dtype``) and their padded
    BSND forms."""

    def __init__(self, dtype: str, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        t1, t2 = sum(LENS_Q), sum(LENS_K)

        def x(*shape: int, scale: float = 1.0) -> np.ndarray:
            return quantize(scale * rng.standard_normal(shape), dtype)

        def indices(block: int) -> np.ndarray:
            # Distinct in-range blocks (visible or masked) and -1 anywhere; rows without keys all -1.
            rows = []
            for s1, s2 in zip(LENS_Q, LENS_K):
                n = -(-s2 // block)
                for _ in range(s1):
                    r = rng.permutation(max(n, K))[:K]
                    rows.append(np.where((r >= n) | (rng.random(K) < 0.2), -1, r))
            return np.asarray(rows, np.int32).reshape(t1, 1, K)

        self.dtype = dtype
        self.q, self.qr, self.d_out = x(t1, N1, D), x(t1, N1, DR), x(t1, N1, D)
        self.k, self.kr = x(t2, 1, D), x(t2, 1, DR)
        self.qi, self.ki, self.w = x(t1, NIDX, DIDX, scale=0.5), x(t2, 1, DIDX), x(t1, NIDX)
        self.tok_idx, self.blk_idx = indices(1), indices(BS)
        self.d_values = rng.standard_normal((t1, 1, K)).astype(np.float32).astype(np.float64)

    def q_side(self, x: np.ndarray, layout: str) -> np.ndarray:
        return x if layout == "TND" else to_bsnd(x, LENS_Q, S1)

    def k_side(self, x: np.ndarray, layout: str) -> np.ndarray:
        return x if layout == "TND" else to_bsnd(x, LENS_K, S2)

    def idx(self, x: np.ndarray, layout: str) -> np.ndarray:
        return x if layout == "TND" else bsnd_indices(x)


def lengths(layout: str) -> tuple[Tensor, Tensor]:
    q, k = (LENS_Q, LENS_K) if layout == "BSND" else (cum(LENS_Q), cum(LENS_K))
    return Tensor(np.array(q, np.int32)), Tensor(np.array(k, np.int32))


def run(op: Callable, mode: str, tensors: list, **kw: object) -> list[np.ndarray]:
    """``op(*tensors, **kw)`` eagerly or inside a compiled graph (the tensors, lengths included, are
    graph inputs); outputs as float64 or int arrays, None dropped."""
    out = op(*tensors, **kw) if mode == "pynative" else OpCell(op, kw)(*tensors)
    return [o.asnumpy() if o.dtype == ms.int32 else to_np(o) for o in out if o is not None]


def sfa_reference(d: Data, sparse_mode: int = 3) -> tuple[np.ndarray, ...]:
    return ref.sparse_flash_attention(d.q, d.k, d.k, d.blk_idx, d.qr, d.kr, cum(LENS_Q), cum(LENS_K),
                                      scale_value=SCALE, sparse_block_size=BS, layout="TND", sparse_mode=sparse_mode)


def kl_stats(d: Data, sparse_mode: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """The KL loss's main-attention statistics ``[1, T1, N1]`` over the token indices."""
    return ref.attention_softmax_stats(d.q, d.k, d.tok_idx, d.qr, d.kr, cum(LENS_Q), cum(LENS_K), scale_value=SCALE,
                                       layout="TND", sparse_mode=sparse_mode)


# --------------------------------------------------------------------------------- the float64 reference

@pytest.mark.parametrize("sparse_mode", [3, 0])
def test_reference_bsnd_with_lengths_is_the_packed_result(sparse_mode: int) -> None:
    d = Data("float32")
    lq, lk, cq, ck = LENS_Q, LENS_K, cum(LENS_Q), cum(LENS_K)
    b = "BSND"
    attn = {"scale_value": SCALE, "sparse_mode": sparse_mode}
    tnd = sfa_reference(d, sparse_mode)
    bsnd = ref.sparse_flash_attention(d.q_side(d.q, b), d.k_side(d.k, b), d.k_side(d.k, b), d.idx(d.blk_idx, b),
                                      d.q_side(d.qr, b), d.k_side(d.kr, b), lq, lk, sparse_block_size=BS, layout=b,
                                      **attn)
    np.testing.assert_array_equal(to_tnd(bsnd[0], lq), tnd[0])
    for got, want in zip(bsnd[1:], tnd[1:]):
        np.testing.assert_array_equal(stats_to_tnd(got), want)
        assert (stats_padding(got) == 0).all()
    assert (padding(bsnd[0], lq) == 0).all()
    d_out = d.q_side(d.d_out, b)
    grads_t = ref.sparse_flash_attention_grad(d.q, d.k, d.k, d.blk_idx, d.d_out, tnd[0], tnd[1], tnd[2], cq, ck,
                                              d.qr, d.kr, sparse_block_size=BS, layout="TND", **attn)
    grads_b = ref.sparse_flash_attention_grad(d.q_side(d.q, b), d.k_side(d.k, b), d.k_side(d.k, b),
                                              d.idx(d.blk_idx, b), d_out, bsnd[0], bsnd[1], bsnd[2], lq, lk,
                                              d.q_side(d.qr, b), d.k_side(d.kr, b), sparse_block_size=BS, layout=b,
                                              **attn)
    for i, (got, want) in enumerate(zip(grads_b, grads_t)):
        lens = lq if i in (0, 3) else lk
        np.testing.assert_array_equal(to_tnd(got, lens), want)
        assert (padding(got, lens) == 0).all()
    li_t = ref.lightning_indexer(d.qi, d.ki, d.w, cq, ck, sparse_count=K, layout="TND", sparse_mode=sparse_mode)
    li_b = ref.lightning_indexer(d.q_side(d.qi, b), d.k_side(d.ki, b), d.q_side(d.w, b), lq, lk, sparse_count=K,
                                 layout=b, sparse_mode=sparse_mode)
    for got, want in zip(li_b, li_t):
        np.testing.assert_array_equal(to_tnd(got, lq), want)
    assert (padding(li_b[0], lq) == -1).all() and np.isneginf(padding(li_b[1], lq)).all()
    dv = d.q_side(d.d_values, b)
    lig_t = ref.lightning_indexer_grad(d.qi, d.ki, d.w, d.tok_idx, d.d_values, cq, ck, layout="TND",
                                       sparse_mode=sparse_mode)
    lig_b = ref.lightning_indexer_grad(d.q_side(d.qi, b), d.k_side(d.ki, b), d.q_side(d.w, b), d.idx(d.tok_idx, b),
                                       dv, lq, lk, layout=b, sparse_mode=sparse_mode)
    for got, want, lens in zip(lig_b, lig_t, (lq, lk, lq)):
        np.testing.assert_array_equal(to_tnd(got, lens), want)
        assert (padding(got, lens) == 0).all()
    mx, sm = kl_stats(d, sparse_mode)
    kl_t = ref.sparse_lightning_indexer_grad_kl_loss(d.q, d.k, d.qi, d.ki, d.w, d.tok_idx, mx, sm, d.qr, d.kr, cq,
                                                     ck, layout="TND", **attn)
    kl_b = ref.sparse_lightning_indexer_grad_kl_loss(
        d.q_side(d.q, b), d.k_side(d.k, b), d.q_side(d.qi, b), d.k_side(d.ki, b), d.q_side(d.w, b),
        d.idx(d.tok_idx, b), stats_to_bsnd(mx), stats_to_bsnd(sm), d.q_side(d.qr, b), d.k_side(d.kr, b), lq, lk,
        layout=b, **attn)
    for got, want, lens in zip(kl_b[:3], kl_t[:3], (lq, lk, lq)):
        np.testing.assert_array_equal(to_tnd(got, lens), want)
        assert (padding(got, lens) == 0).all()
    assert kl_b[3] == kl_t[3]


# --------------------------------------------------------------------------------- the kernels, both layouts

LAYOUTS = ("TND", "BSND")
INDEXER_GRADS = (("d_query_index", LENS_Q), ("d_key_index", LENS_K), ("d_weights", LENS_Q))


def check_grads(got: list, want: list, names: tuple, layout: str, dtype: str) -> None:
    """Gradients against the packed reference; in BSND zero at every padding position."""
    for g, w, (name, lens) in zip(got, want, names):
        if layout == "BSND":
            assert (padding(g, lens) == 0).all(), f"{name}: padding positions get zero gradients"
            g = to_tnd(g, lens)
        assert_close(g, w, dtype, "attention", f"{name} {layout} {dtype}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_sparse_flash_attention(exec_mode: str, dtype: str) -> None:
    d = Data(dtype, seed=1)
    want = sfa_reference(d)
    for layout in LAYOUTS:
        tensors = [to_ms(d.q_side(d.q, layout), dtype), to_ms(d.k_side(d.k, layout), dtype),
                   Tensor(d.idx(d.blk_idx, layout)), to_ms(d.q_side(d.qr, layout), dtype),
                   to_ms(d.k_side(d.kr, layout), dtype), *lengths(layout)]
        out, smax, ssum = run(_sfa, exec_mode, tensors, layout=layout)
        if layout == "BSND":
            assert (padding(out, LENS_Q) == 0).all() and (stats_padding(smax) == 0).all()
            assert (stats_padding(ssum) == 0).all()
            out, smax, ssum = to_tnd(out, LENS_Q), stats_to_tnd(smax), stats_to_tnd(ssum)
        what = f"{layout} {dtype}"
        assert_close(out, want[0], dtype, "attention", f"out {what}")
        assert_close(smax, want[1], dtype, "attention", f"softmax_max {what}")
        assert_close(ssum, want[2], dtype, "attention", f"softmax_sum {what}")


def _sfa(query: Tensor, key: Tensor, sparse_indices: Tensor, query_rope: Tensor, key_rope: Tensor,
         lens_q: Tensor, lens_k: Tensor, *, layout: str) -> tuple:
    return ops.sparse_flash_attention(query, key, None, sparse_indices, query_rope, key_rope, lens_q, lens_k,
                                      scale_value=SCALE, sparse_block_size=BS, layout=layout)


def _sfa_grad(query: Tensor, key: Tensor, sparse_indices: Tensor, d_out: Tensor, out: Tensor, smax: Tensor,
              ssum: Tensor, lens_q: Tensor, lens_k: Tensor, query_rope: Tensor, key_rope: Tensor, *,
              layout: str) -> tuple:
    return ops.sparse_flash_attention_grad(query, key, None, sparse_indices, d_out, out, smax, ssum, lens_q, lens_k,
                                           query_rope, key_rope, scale_value=SCALE, sparse_block_size=BS,
                                           layout=layout)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sparse_flash_attention_grad(exec_mode: str, dtype: str) -> None:
    d = Data(dtype, seed=2)
    out, smax, ssum = sfa_reference(d)
    out = quantize(out, dtype)
    smax, ssum = (x.astype(np.float32).astype(np.float64) for x in (smax, ssum))
    cq, ck = cum(LENS_Q), cum(LENS_K)
    want = ref.sparse_flash_attention_grad(d.q, d.k, d.k, d.blk_idx, d.d_out, out, smax, ssum, cq, ck, d.qr, d.kr,
                                           scale_value=SCALE, sparse_block_size=BS, layout="TND")
    want = [want[0], want[1] + want[2], want[3], want[4]]  # key is value: one d_key = dK + dV
    for layout in LAYOUTS:
        st = (smax, ssum) if layout == "TND" else (stats_to_bsnd(smax), stats_to_bsnd(ssum))
        tensors = [to_ms(d.q_side(d.q, layout), dtype), to_ms(d.k_side(d.k, layout), dtype),
                   Tensor(d.idx(d.blk_idx, layout)), to_ms(d.q_side(d.d_out, layout), dtype),
                   to_ms(d.q_side(out, layout), dtype), *(Tensor(s.astype(np.float32)) for s in st),
                   *lengths(layout), to_ms(d.q_side(d.qr, layout), dtype), to_ms(d.k_side(d.kr, layout), dtype)]
        check_grads(run(_sfa_grad, exec_mode, tensors, layout=layout), want,
                    (("d_query", LENS_Q), ("d_key", LENS_K), ("d_query_rope", LENS_Q), ("d_key_rope", LENS_K)),
                    layout, dtype)


def _li(query_index: Tensor, key_index: Tensor, weights: Tensor, lens_q: Tensor, lens_k: Tensor, *,
        layout: str) -> tuple:
    return ops.lightning_indexer(query_index, key_index, weights, lens_q, lens_k, sparse_count=K, layout=layout)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lightning_indexer(exec_mode: str, dtype: str) -> None:
    d = Data(dtype, seed=3)
    scores = indexer_scores(d.qi, d.ki, d.w, cum(LENS_Q), cum(LENS_K), layout="TND", sparse_mode=3)
    for layout in LAYOUTS:
        tensors = [to_ms(d.q_side(d.qi, layout), dtype), to_ms(d.k_side(d.ki, layout), dtype),
                   to_ms(d.q_side(d.w, layout), dtype), *lengths(layout)]
        idx, val = run(_li, exec_mode, tensors, layout=layout)
        if layout == "BSND":
            assert (padding(idx, LENS_Q) == -1).all() and np.isneginf(padding(val, LENS_Q)).all()
            idx, val = to_tnd(idx, LENS_Q), to_tnd(val, LENS_Q)
        assert_same_selection(idx, val, scores, f"{layout} {dtype}")


def _lig(query_index: Tensor, key_index: Tensor, weights: Tensor, sparse_indices: Tensor, d_values: Tensor,
         lens_q: Tensor, lens_k: Tensor, *, layout: str) -> tuple:
    return ops.lightning_indexer_grad(query_index, key_index, weights, sparse_indices, d_values, lens_q, lens_k,
                                      layout=layout)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lightning_indexer_grad(exec_mode: str, dtype: str) -> None:
    d = Data(dtype, seed=4)
    want = ref.lightning_indexer_grad(d.qi, d.ki, d.w, d.tok_idx, d.d_values, cum(LENS_Q), cum(LENS_K),
                                      layout="TND")
    for layout in LAYOUTS:
        tensors = [to_ms(d.q_side(d.qi, layout), dtype), to_ms(d.k_side(d.ki, layout), dtype),
                   to_ms(d.q_side(d.w, layout), dtype), Tensor(d.idx(d.tok_idx, layout)),
                   Tensor(d.q_side(d.d_values, layout).astype(np.float32)), *lengths(layout)]
        check_grads(run(_lig, exec_mode, tensors, layout=layout), want, INDEXER_GRADS, layout, dtype)


def _kl(query: Tensor, key: Tensor, query_index: Tensor, key_index: Tensor, weights: Tensor, sparse_indices: Tensor,
        smax: Tensor, ssum: Tensor, query_rope: Tensor, key_rope: Tensor, lens_q: Tensor, lens_k: Tensor, *,
        layout: str) -> tuple:
    return ops.sparse_lightning_indexer_grad_kl_loss(query, key, query_index, key_index, weights, sparse_indices,
                                                     smax, ssum, query_rope, key_rope, lens_q, lens_k,
                                                     scale_value=SCALE, layout=layout)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sparse_lightning_indexer_grad_kl_loss(exec_mode: str, dtype: str) -> None:
    d = Data(dtype, seed=5)
    mx, sm = (x.astype(np.float32).astype(np.float64) for x in kl_stats(d))
    want = ref.sparse_lightning_indexer_grad_kl_loss(d.q, d.k, d.qi, d.ki, d.w, d.tok_idx, mx, sm, d.qr, d.kr,
                                                     cum(LENS_Q), cum(LENS_K), scale_value=SCALE, layout="TND")
    for layout in LAYOUTS:
        st = (mx, sm) if layout == "TND" else (stats_to_bsnd(mx), stats_to_bsnd(sm))
        tensors = [to_ms(d.q_side(d.q, layout), dtype), to_ms(d.k_side(d.k, layout), dtype),
                   to_ms(d.q_side(d.qi, layout), dtype), to_ms(d.k_side(d.ki, layout), dtype),
                   to_ms(d.q_side(d.w, layout), dtype), Tensor(d.idx(d.tok_idx, layout)),
                   *(Tensor(s.astype(np.float32)) for s in st), to_ms(d.q_side(d.qr, layout), dtype),
                   to_ms(d.k_side(d.kr, layout), dtype), *lengths(layout)]
        got = run(_kl, exec_mode, tensors, layout=layout)
        check_grads(got[:3], want[:3], INDEXER_GRADS, layout, dtype)
        assert_close(got[3], np.array([want[3]]), dtype, "attention", f"loss {layout} {dtype}")
