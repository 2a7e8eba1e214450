"""BSND with per-batch ``actual_seq_lengths`` (CANN's meaning, docs/contract.md section 0.3) in every Ascend C
kernel that takes lengths, on the twin: the same data packed as TND with the same lengths gives the same
results (padded batch rows B = 4 of S1 = 5 queries, S2 = 7 keys: shorter batches, a batch without queries,
one without keys, one of full length).

Every input at a padding position is NaN and the sparse indices of padding query rows select keys 0 and 1
among out-of-range slots, so a padding value reaching an output, or a padding row seeing a key, would
show. The TND run is checked against the float64 reference by each kernel's own test helpers; the BSND
run's valid rows equal it bit for bit where both runs do the same float operations in the same order
(every row pass, and the SFA grad's key blocks, which never span batches); the indexer grads'
d_key_index sums key blocks spanning other batches' keys, so there each layout is compared with the
reference at tolerance. Padding outputs are the contract's fixed values
(0, -1, -inf; statistics 0 / 0 even with sinks). Every output starts poisoned and is written exactly
once; the BSND bits are the same on 1, 8 and 24 cores (shuffled core order) and with the lengths
hidden from the tiling (the op_host's case: the row split by count). The kernels Ascend 950 runs are
tested on arch 3510 too.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
import test_ascendc_dense_lightning_indexer_grad_kl_loss as dlig_test
import test_ascendc_dense_lightning_indexer_softmax_lse as dli_test
import test_ascendc_lightning_indexer as li_test
import test_ascendc_lightning_indexer_grad as lig_test
import test_ascendc_sparse_flash_attention as sfa_test
import test_ascendc_sparse_flash_attention_grad as sfag_test
import test_ascendc_sparse_lightning_indexer_grad_kl_loss as sli_test
from _util import TOLERANCES, rel_l2
from ascendc_harness import twin_dense_indexer as dense
from ascendc_harness import twin_indexer as indexer
from ascendc_harness import twin_lib as twin
from ascendc_harness import twin_sfa as sfa

from ms_grad_ops import reference as ref

B, S1, S2 = 4, 5, 7
LENS_Q, LENS_K = [4, 0, 5, 2], [6, 3, 7, 0]  # padding rows, no queries, full length, no keys
# A padding row's indices: in range of a key block (0, 1) or not; a padding row selects nothing either way.
GARBAGE = np.array([0, 99999, 1, -7], np.int32)
# (arch, dtype, weights dtype): Atlas A2/A3 and, for the ops registered there, Ascend 950.
A2 = (twin.ARCH_A2, "bfloat16", "float32")
A950 = (twin.ARCH_950, "float16", "float16")


def _valid(lens: list[int], s: int) -> np.ndarray:
    """Flat BSND rows (b * s + i) holding the packed TND rows, in TND order."""
    return np.concatenate([b * s + np.arange(n, dtype=np.int64) for b, n in enumerate(lens)])


def to_bsnd(x: np.ndarray, lens: list[int], s: int, fill: float = np.nan) -> np.ndarray:
    """Packed ``[T, ...]`` -> padded ``[B, s, ...]``, padding rows ``fill``."""
    out = np.full((B * s, *x.shape[1:]), fill, x.dtype)
    out[_valid(lens, s)] = x
    return out.reshape(B, s, *x.shape[1:])


def to_tnd(x: np.ndarray, lens: list[int]) -> np.ndarray:
    return x.reshape(-1, *x.shape[2:])[_valid(lens, x.shape[1])]


def padding(x: np.ndarray, lens: list[int]) -> np.ndarray:
    return np.delete(x.reshape(-1, *x.shape[2:]), _valid(lens, x.shape[1]), axis=0)


def q_side(x: np.ndarray | None, lens: list[int] = LENS_Q) -> np.ndarray | None:
    return None if x is None else to_bsnd(x, lens, S1)


def k_side(x: np.ndarray | None, lens: list[int] = LENS_K) -> np.ndarray | None:
    return None if x is None else to_bsnd(x, lens, S2)


def indices(idx: np.ndarray, lens: list[int] = LENS_Q) -> np.ndarray:
    """Packed ``[T1, N2, K]`` indices -> ``[B, S1, N2, K]``, padding rows out of range."""
    flat = np.resize(GARBAGE, (B * S1, *idx.shape[1:]))
    flat[_valid(lens, S1)] = idx
    return flat.reshape(B, S1, *idx.shape[1:])


def stats_to_bsnd(st: np.ndarray, lens: list[int] = LENS_Q) -> np.ndarray:
    """Statistics ``[N2, T1, G]`` -> ``[B, N2, S1, G]`` (``[1, T1]`` -> ``[B, 1, S1]``), padding NaN."""
    if st.ndim == 2:
        return to_bsnd(st[0], lens, S1)[:, None, :]
    return to_bsnd(st.transpose(1, 0, 2), lens, S1).transpose(0, 2, 1, 3)


def stats_parts(st: np.ndarray, lens: list[int] = LENS_Q) -> tuple[np.ndarray, np.ndarray]:
    """(valid rows as TND ``[N2, T1, G]`` / ``[1, T1]``, padding rows) of BSND statistics."""
    if st.ndim == 3:
        return to_tnd(st[:, 0], lens)[None], padding(st[:, 0], lens)
    rows = st.transpose(0, 2, 1, 3)
    return to_tnd(rows, lens).transpose(1, 0, 2), padding(rows, lens)


def cum(lens: list[int]) -> list[int]:
    return [int(x) for x in np.cumsum(lens)]


def bits(x: object) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(x))
    return a.view(np.uint8)


def assert_bits(got: object, want: object, what: str) -> None:
    assert np.array_equal(bits(got), bits(want)), f"{what}: bits differ"


def written_once(run: twin.KernelRun, what: str) -> None:
    assert run.info.min_writes == 1 and run.info.max_writes == 1, f"{what}: every output byte written exactly once"


def bsnd_runs(run: Callable[[int, int], twin.KernelRun]) -> twin.KernelRun:
    """``run(cores, seed)`` of a BSND problem on 1 core, then the same output bits on 8 and 24 cores
    (shuffled core order) and with the lengths hidden from the tiling (rows split by count)."""
    first = run(1, 0)
    written_once(first, "1 core")
    again = {"8 cores": run(8, 0), "24 cores, shuffled": run(24, 5)}
    with twin.lengths_hidden():
        again["lengths hidden from the tiling"] = run(8, 0)
    for what, r in again.items():
        written_once(r, what)
        for i, (a, b) in enumerate(zip(first.outputs, r.outputs)):
            assert (a is None and b is None) or np.array_equal(bits(a), bits(b)), f"output {i}: {what}"
    return first


# ---------------------------------------------------------------- sparse_flash_attention(_grad)
SFA_SPEC = dict(layout="TND", n1=4, d=16, dr=16, k=6, bs=2, pattern="mixed")
# Which lengths a BSND call passes: both, the query side only (the keys full), the key side only.
SIDES = {"both": (LENS_Q, LENS_K), "query": (LENS_Q, None), "key": (None, LENS_K)}


def sfa_pair(dtype: str, arch: int, seed: int, sides: str = "both", sinks: bool = True,
             lens_dtype: str = "int32") -> tuple[sfa.SfaProblem, sfa.SfaProblem, list[int], list[int]]:
    """(TND problem, BSND problem, S1_b, S2_b): the same tokens, ``sides`` the lengths BSND passes."""
    lq, lk = SIDES[sides]
    eff_q, eff_k = lq or [S1] * B, lk or [S2] * B
    _, p = sfa_test.make_spec({**SFA_SPEC, "lens_q": eff_q, "lens_kv": eff_k}, dtype, seed)
    p.arch, p.lens_dtype = arch, lens_dtype
    if sinks:
        p.sinks = sfa_test.make_sinks("mixed", SFA_SPEC["n1"], seed)
    b = replace(p, query=q_side(p.query, eff_q), key=k_side(p.key, eff_k), value=k_side(p.value, eff_k),
                sparse_indices=indices(p.sparse_indices, eff_q), query_rope=q_side(p.query_rope, eff_q),
                key_rope=k_side(p.key_rope, eff_k), lens_q=None if lq is None else np.asarray(lq),
                lens_kv=None if lk is None else np.asarray(lk), attrs={**p.attrs, "layout": "BSND"})
    return p, b, eff_q, eff_k


@pytest.mark.parametrize(("sides", "lens_dtype"), [("both", "int32"), ("both", "int64"), ("query", "int32"),
                                                   ("key", "int64")])
def test_sparse_flash_attention(sides: str, lens_dtype: str) -> None:
    for arch, dtype, _ in (A2, A950) if sides == "both" else (A2,):
        p, b, lq, _ = sfa_pair(dtype, arch, seed=1, sides=sides, lens_dtype=lens_dtype)
        tnd = sfa.sparse_flash_attention(p, core_num=8)
        sfa_test.check(tnd, p)
        got = bsnd_runs(lambda cores, seed, b=b: sfa.sparse_flash_attention(b, core_num=cores, seed=seed))
        out, smax, ssum = got.outputs
        stats_shape = (B, 1, S1, SFA_SPEC["n1"])
        assert_bits(to_tnd(out, lq), tnd.outputs[0], "out")
        assert (padding(out, lq) == 0).all(), "padding rows: out 0"
        for name, st, want in (("softmax_max", smax, tnd.outputs[1]), ("softmax_sum", ssum, tnd.outputs[2])):
            valid, pad = stats_parts(st.reshape(stats_shape), lq)
            assert_bits(valid.reshape(-1), want, name)
            assert (pad == 0).all(), f"{name}: padding rows 0 / 0, even with sinks"


@pytest.mark.parametrize(("arch", "dtype"), [A2[:2], A950[:2]])
def test_sparse_flash_attention_grad(arch: int, dtype: str) -> None:
    p, b, lq, lk = sfa_pair(dtype, arch, seed=2)
    d_out, out, smax, ssum = sfag_test.grad_inputs(p, seed=2)
    tnd = sfa.sparse_flash_attention_grad(p, d_out, out, smax, ssum, core_num=8)
    sfag_test.check(tnd, p, d_out, out, smax, ssum)
    b_in = (q_side(d_out), q_side(out), stats_to_bsnd(smax), stats_to_bsnd(ssum))
    got = bsnd_runs(lambda cores, seed: sfa.sparse_flash_attention_grad(b, *b_in, core_num=cores, seed=seed))
    for i, name in enumerate(sfag_test.NAMES[:5]):
        lens = lq if name.startswith("d_query") else lk
        assert_bits(to_tnd(got.outputs[i], lens), tnd.outputs[i], name)
        assert (padding(got.outputs[i], lens) == 0).all(), f"{name}: padding rows 0"
    assert_bits(got.outputs[5], tnd.outputs[5], "d_sinks")


# ---------------------------------------------------------------- lightning_indexer(_grad)
@pytest.mark.parametrize(("arch", "dtype", "wdtype"), [A2, A950])
def test_lightning_indexer(arch: int, dtype: str, wdtype: str) -> None:
    p = li_test.problem(3, dtype, wdtype, "TND", k=6, lens_q=LENS_Q, lens_k=LENS_K)
    p.arch = arch
    tnd = li_test.check(p, 8)
    b = replace(p, query_index=q_side(p.query_index), key_index=k_side(p.key_index), weights=q_side(p.weights),
                lens_q=LENS_Q, lens_k=LENS_K, attrs={**p.attrs, "layout": "BSND"})
    idx, val = bsnd_runs(lambda cores, seed: indexer.lightning_indexer(b, cores, seed)).outputs
    assert_bits(to_tnd(idx, LENS_Q), tnd.outputs[0], "sparse_indices")
    assert_bits(to_tnd(val, LENS_Q), tnd.outputs[1], "sparse_values")
    assert (padding(idx, LENS_Q) == -1).all() and np.isneginf(padding(val, LENS_Q)).all(), "padding: -1 / -inf"


def test_lightning_indexer_compressed_keys() -> None:
    """BSND lengths with compressed keys (ratio 4, a residual per batch): the padding rows still see nothing (the
    compressed rule is never asked about them) and the valid rows equal the TND run, itself the reference's."""
    import test_ascendc_indexer_cmp as cmp_test
    p = li_test.problem(5, "bfloat16", "float32", "TND", k=6, lens_q=LENS_Q, lens_k=LENS_K)
    p.attrs = {**p.attrs, "cmp_ratio": 4}
    p.cmp_residual_k = [1, 3, 0, 2]
    tnd = cmp_test.check_li(p, 8)
    b = replace(p, query_index=q_side(p.query_index), key_index=k_side(p.key_index), weights=q_side(p.weights),
                lens_q=LENS_Q, lens_k=LENS_K, attrs={**p.attrs, "layout": "BSND"})
    idx, val = bsnd_runs(lambda cores, seed: indexer.lightning_indexer(b, cores, seed)).outputs
    assert_bits(to_tnd(idx, LENS_Q), tnd.outputs[0], "sparse_indices")
    assert_bits(to_tnd(val, LENS_Q), tnd.outputs[1], "sparse_values")
    assert (padding(idx, LENS_Q) == -1).all() and np.isneginf(padding(val, LENS_Q)).all(), "padding: -1 / -inf"
    assert (to_tnd(idx, LENS_Q) >= 0).any(), "some valid row selects a compressed key"


@pytest.mark.parametrize("mha", [False, True])
def test_dense_lightning_indexer_grad_kl_loss_groups(mha: bool) -> None:
    """The dense grad's row groups (N2 = N1: 16 tokens of one batch) around BSND padding rows: equal to TND."""
    _, dtype, wdtype = A2
    if mha:
        case = dlig_test.mha_case(11, dtype, wdtype, "TND", n1=3, n2=3, lens_q=LENS_Q, lens_k=LENS_K)
        p, want = dlig_test.mha_problem(case, dtype, wdtype), dlig_test.mha_want(case)
    else:
        case = dlig_test.small(11, dtype, wdtype, "TND", lens_q=LENS_Q, lens_k=LENS_K)
        p = dlig_test.problem(case, dtype, wdtype)
        want = ref.dense_lightning_indexer_grad_kl_loss(*dlig_test.dense_ref_args(case), **case.ref_kwargs())
    tnd = dense.dense_lightning_indexer_grad_kl_loss(p, 8)
    b = replace(p, arrays=sli_bsnd(p.arrays), lens_q=LENS_Q, lens_k=LENS_K, attrs={**p.attrs, "layout": "BSND"})
    got = bsnd_runs(lambda cores, seed: dense.dense_lightning_indexer_grad_kl_loss(b, cores, seed)).outputs
    check_kl(got, tnd, want, dtype)


def check_key_grad(got: np.ndarray, want: np.ndarray, dtype: str, name: str) -> None:
    """A key-side gradient of a BSND run: its valid rows against the (packed) reference at the
    kernel tests' tolerance, its padding rows 0."""
    err = rel_l2(to_tnd(got, LENS_K), want)
    assert err <= TOLERANCES["attention"][dtype], f"{name}: relative L2 error {err:.3g}"
    assert (padding(got, LENS_K) == 0).all(), f"{name}: padding rows 0"


def test_lightning_indexer_grad() -> None:
    _, dtype, wdtype = A2
    p = lig_test.make_problem(4, dtype, wdtype, "TND", lens_q=LENS_Q, lens_k=LENS_K, k=6)
    want = lig_test.reference(p)
    tnd = indexer.lightning_indexer_grad(p, 8)
    lig_test.check(tnd, p, want)
    b = replace(p, query_index=q_side(p.query_index), key_index=k_side(p.key_index), weights=q_side(p.weights),
                sparse_indices=indices(p.sparse_indices), d_values=q_side(p.d_values), lens_q=LENS_Q,
                lens_k=LENS_K, attrs={**p.attrs, "layout": "BSND"})
    got = bsnd_runs(lambda cores, seed: indexer.lightning_indexer_grad(b, cores, seed)).outputs
    for i, name in ((0, "d_query_index"), (2, "d_weights")):  # the row pass: the same operations as TND
        assert_bits(to_tnd(got[i], LENS_Q), tnd.outputs[i], name)
        assert (padding(got[i], LENS_Q) == 0).all(), f"{name}: padding rows 0"
    check_key_grad(got[1], want[1], dtype, "d_key_index")


# ---------------------------------------------------------------- the KL losses
def sli_bsnd(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The KL ops' TND arrays in BSND (statistics included), padding NaN / out-of-range indices."""
    keys = {"key", "key_rope", "key_index"}
    out = {}
    for name, x in arrays.items():
        if name == "sparse_indices":
            out[name] = indices(x)
        elif name.startswith("softmax"):
            out[name] = stats_to_bsnd(x)
        else:
            out[name] = k_side(x) if name in keys else q_side(x)
    return out


def check_kl(got: tuple, tnd: twin.KernelRun, want: tuple, dtype: str) -> None:
    for i, name in ((0, "d_query_index"), (2, "d_weights")):
        assert_bits(to_tnd(got[i], LENS_Q), tnd.outputs[i], name)
        assert (padding(got[i], LENS_Q) == 0).all(), f"{name}: padding rows 0"
    check_key_grad(got[1], want[1], dtype, "d_key_index")
    assert_bits(got[-1], tnd.outputs[-1], "loss")  # the per-token losses summed in token order, padding adds 0


@pytest.mark.parametrize(("arch", "dtype", "wdtype"), [A2, A950])
def test_sparse_lightning_indexer_grad_kl_loss(arch: int, dtype: str, wdtype: str) -> None:
    case = sli_test.small(5, dtype, wdtype, "TND", lens_q=LENS_Q, lens_k=LENS_K, k=6)
    sinks = sfa_test.make_sinks("random", case.arrays["query"].shape[-2], 5)
    sli_test.rebuild_stats(case, sinks)
    p = sli_test.problem(case, dtype, wdtype, sinks)
    p.arch = arch
    run = lambda q, cores, seed=0: indexer.sparse_lightning_indexer_grad_kl_loss(q, cores, seed=seed,  # noqa: E731
                                                                                  deterministic=True)
    tnd = run(p, 8)
    sli_test.check(tnd, case, dtype, sinks, arch=arch)
    want = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), sinks, **case.ref_kwargs())
    b = replace(p, arrays=sli_bsnd(p.arrays), lens_q=LENS_Q, lens_k=LENS_K, attrs={**p.attrs, "layout": "BSND"})
    check_kl(bsnd_runs(lambda cores, seed: run(b, cores, seed)).outputs, tnd, want, dtype)


@pytest.mark.parametrize(("arch", "dtype", "wdtype"), [A2, A950])
def test_dense_lightning_indexer_softmax_lse(arch: int, dtype: str, wdtype: str) -> None:
    p = dli_test.problem(6, dtype, wdtype, "TND", lens_q=LENS_Q, lens_k=LENS_K)
    p.arch = arch
    tnd = dli_test.check(p, 8)
    b = replace(p, query_index=q_side(p.query_index), key_index=k_side(p.key_index), weights=q_side(p.weights),
                lens_q=LENS_Q, lens_k=LENS_K, attrs={**p.attrs, "layout": "BSND"})
    got = bsnd_runs(lambda cores, seed: dense.dense_lightning_indexer_softmax_lse(b, cores, seed)).outputs
    for name, st, want in zip(("softmax_max_index", "softmax_sum_index"), got, tnd.outputs):
        valid, pad = stats_parts(st)
        assert_bits(valid, want, name)
        assert (pad == 0).all(), f"{name}: padding rows 0 / 0"


def test_dense_lightning_indexer_grad_kl_loss() -> None:
    _, dtype, wdtype = A2
    case = dlig_test.small(7, dtype, wdtype, "TND", lens_q=LENS_Q, lens_k=LENS_K)
    p = dlig_test.problem(case, dtype, wdtype)
    tnd = dense.dense_lightning_indexer_grad_kl_loss(p, 8)
    dlig_test.check(tnd, case, dtype)
    want = ref.dense_lightning_indexer_grad_kl_loss(*dlig_test.dense_ref_args(case), **case.ref_kwargs())
    b = replace(p, arrays=sli_bsnd(p.arrays), lens_q=LENS_Q, lens_k=LENS_K, attrs={**p.attrs, "layout": "BSND"})
    got = bsnd_runs(lambda cores, seed: dense.dense_lightning_indexer_grad_kl_loss(b, cores, seed)).outputs
    check_kl(got, tnd, want, dtype)
