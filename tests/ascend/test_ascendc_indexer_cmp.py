"""Compressed keys (``cmp_ratio``, ``cmp_residual_k``; docs/contract.md section 9.1) in the Ascend C kernels of
lightning_indexer, lightning_indexer_grad and sparse_lightning_indexer_grad_kl_loss on the CPU twin, against the
float64 reference: ratios 1, 4 and 128 with residuals, several TND sequences (one whose first rows see no
complete block, one without queries), BSND, TND without lengths; both NPU arches (2201 = Atlas A2/A3,
3510 = Ascend 950); the same output bits for 1, 8 and 24 cores and a shuffled core order; ratio 1 with
residuals given is the kernel without them, bit for bit. The grad's slots that the compressed mask hides
(visible at ratio 1) carry NaN d_values: never read. sparse_lightning_indexer_grad_kl_loss's main-attention key
and indexer key are both compressed (one rule for both); its statistics come from the float64 forward under
the same rule.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import test_ascendc_lightning_indexer_grad as lig_test
from _selection import assert_same_selection, indexer_scores
from _util import TOLERANCES, quantize, rel_l2
from ascendc_harness import twin_indexer as indexer
from ascendc_harness import twin_lib as twin

from ms_grad_ops import reference as ref

A2, A950 = twin.ARCH_A2, twin.ARCH_950
# (cmp_ratio, layout, NPU arch): every ratio, layout and arch
MATRIX = list(itertools.product((1, 4, 128), ("TND", "BSND", "TND1"), (A2, A950)))


def visible(t: int, s1: int, s2: int, ratio: int, residual: int) -> int:
    """Compressed keys local query row t of a batch of (s1, s2) sees (section 9.1, stated independently)."""
    return int(np.clip((s2 * ratio + residual - s1 + t + 1) // ratio, 0, s2))


def layout_of(layout: str, ratio: int) -> dict:
    """Token counts per batch (n = 3 compressed keys per whole sequence at small ratios, 2 at 128: rows seeing
    one key only have dI = y - p = 0 up to rounding in the KL loss): TND four sequences (the first's early rows
    see no complete block, the second has no queries), BSND two batches, TND1 one sequence without lengths (a
    whole sequence: S2 = S1 // r)."""
    n = 3 if ratio <= 4 else 2
    if layout == "TND":
        seq = [(n * ratio + 2, n), (0, 2), (5, 4), (ratio // 2 + 3, 2)]
    else:
        seq = [(n * ratio + 1, n)] * (2 if layout == "BSND" else 1)
    return {"seq": seq, "ms_layout": "BSND" if layout == "BSND" else "TND", "lens": layout == "TND"}


def residuals(rng: np.random.Generator, layout: str, n: int, ratio: int) -> list[int]:
    """TND: random; BSND: 0 and r - 1 (the extremes); TND1: a whole sequence's S1 mod r."""
    if layout == "BSND":
        return [0, ratio - 1]
    if layout == "TND1":
        return [1 % ratio]
    return [int(x) for x in rng.integers(0, ratio, n)]


def tokens(shape: dict) -> tuple[tuple, tuple, list | None, list | None]:
    seq = shape["seq"]
    if shape["ms_layout"] == "BSND":
        return (len(seq), seq[0][0]), (len(seq), seq[0][1]), None, None
    tq, tk = (sum(s for s, _ in seq),), (sum(s for _, s in seq),)
    if not shape["lens"]:
        return tq, tk, None, None
    return tq, tk, [int(x) for x in np.cumsum([s for s, _ in seq])], [int(x) for x in np.cumsum([s for _, s in seq])]


# ---------------------------------------------------------------- lightning_indexer
def li_problem(seed: int, layout: str, ratio: int, *, dtype: str = "bfloat16", wdtype: str = "float32", k: int = 5,
               nidx: int = 4, didx: int = 32, arch: int = twin.ARCH_A2) -> indexer.LiProblem:
    rng = np.random.default_rng(seed)
    shape = layout_of(layout, ratio)
    tq, tk, cq, ck = tokens(shape)
    qi = quantize(rng.standard_normal((*tq, nidx, didx)), dtype)
    ki = quantize(rng.standard_normal((*tk, 1, didx)), dtype)
    w = quantize(rng.standard_normal((*tq, nidx)), wdtype)
    res = residuals(rng, layout, len(shape["seq"]), ratio)
    attrs = dict(sparse_count=k, layout=shape["ms_layout"], sparse_mode=3, cmp_ratio=ratio)
    return indexer.LiProblem(dtype, wdtype, qi, ki, w, cq, ck, attrs, arch=arch, cmp_residual_k=res)


def check_li(p: indexer.LiProblem, cores: int, seed: int = 0) -> twin.KernelRun:
    run = indexer.lightning_indexer(p, cores, seed)
    assert run.info.min_writes == 1 and run.info.max_writes == 1, "every output byte written exactly once"
    scores = indexer_scores(p.query_index, p.key_index, p.weights, p.lens_q, p.lens_k, layout=p.layout,
                            sparse_mode=3, cmp_ratio=p.attrs["cmp_ratio"], cmp_residual_k=p.cmp_residual_k)
    assert_same_selection(*run.outputs, scores, f"twin ratio {p.attrs['cmp_ratio']}")
    return run


@pytest.mark.parametrize(("ratio", "layout", "arch"), MATRIX)
def test_li_matches_reference_bitwise_across_cores(arch: int, layout: str, ratio: int) -> None:
    p = li_problem(ratio + len(layout), layout, ratio, arch=arch)
    runs = [check_li(p, cores, seed) for cores, seed in ((1, 0), (8, 0), (24, 3))]
    idx = runs[0].outputs[0]
    counts = (idx >= 0).sum(axis=-1).ravel()
    want = [min(p.sparse_count, visible(t, s1, s2, ratio, r))
            for (s1, s2), r in zip(layout_of(layout, ratio)["seq"], p.cmp_residual_k) for t in range(s1)]
    np.testing.assert_array_equal(counts, want)
    if ratio > 1:
        assert (counts == 0).any() and (counts > 0).any(), "rows with and without a complete block"
    for run in runs[1:]:
        for a, b in zip(runs[0].outputs, run.outputs):
            np.testing.assert_array_equal(a, b)


def test_li_ratio_1_is_the_kernel_without_it() -> None:
    """cmp_ratio 1 with (zero) residuals given: the bits of the call without compressed keys."""
    p = li_problem(5, "TND", 1, dtype="float16", wdtype="float16", k=9)
    plain = indexer.LiProblem(p.dtype, p.wdtype, p.query_index, p.key_index, p.weights, p.lens_q, p.lens_k,
                              {n: v for n, v in p.attrs.items() if n != "cmp_ratio"})
    for a, b in zip(indexer.lightning_indexer(p, 8).outputs, indexer.lightning_indexer(plain, 8).outputs):
        np.testing.assert_array_equal(a, b)


def test_li_absent_residual_is_zero() -> None:
    p = li_problem(6, "BSND", 4)
    p.cmp_residual_k = None
    zero = li_problem(6, "BSND", 4)
    zero.cmp_residual_k = [0, 0]
    for a, b in zip(check_li(p, 8).outputs, check_li(zero, 8).outputs):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- lightning_indexer_grad
def lig_problem(seed: int, layout: str, ratio: int, *, dtype: str = "bfloat16", wdtype: str = "float32", k: int = 6,
                nidx: int = 4, didx: int = 32, arch: int = twin.ARCH_A2) -> indexer.LigProblem:
    """Slots: keys of the row's batch, some beyond the compressed limit (hidden: NaN d_values), -1 slots
    and duplicates."""
    li = li_problem(seed, layout, ratio, dtype=dtype, wdtype=wdtype, nidx=nidx, didx=didx, arch=arch)
    rng = np.random.default_rng(seed + 100)
    rows, vis = [], []
    for (s1, s2), r in zip(layout_of(layout, ratio)["seq"], li.cmp_residual_k):
        for t in range(s1):
            row = rng.integers(-1, max(s2, 1), k).astype(np.int32)
            row[rng.random(k) < 0.15] = -1
            if k > 2 and row[0] >= 0:
                row[1] = row[0]  # a duplicate counts twice
            rows.append(row)
            vis.append((row >= 0) & (row < visible(t, s1, s2, ratio, r)))
    lead = li.query_index.shape[:-2]
    si = np.stack(rows).reshape(*lead, 1, k)
    read = np.stack(vis).reshape(si.shape)
    dv = np.where(read, quantize(rng.standard_normal(si.shape), "float32"), np.nan)
    attrs = {n: v for n, v in li.attrs.items() if n != "sparse_count"}
    return indexer.LigProblem(dtype, wdtype, li.query_index, li.key_index, li.weights, si, dv, li.lens_q, li.lens_k,
                              attrs, arch=arch, cmp_residual_k=li.cmp_residual_k)


def lig_reference(p: indexer.LigProblem) -> tuple[np.ndarray, ...]:
    return ref.lightning_indexer_grad(p.query_index, p.key_index, p.weights, p.sparse_indices, p.d_values,
                                      p.lens_q, p.lens_k, p.cmp_residual_k, **p.attrs)


@pytest.mark.parametrize(("ratio", "layout", "arch"), MATRIX)
def test_lig_matches_reference_bitwise_across_cores(arch: int, layout: str, ratio: int) -> None:
    p = lig_problem(ratio + 2 * len(layout), layout, ratio, arch=arch)
    want = lig_reference(p)
    runs = []
    for cores, seed in ((1, 0), (8, 0), (24, 5)):
        run = indexer.lightning_indexer_grad(p, cores, seed)
        lig_test.check(run, p, want)
        runs.append(run)
    for run in runs[1:]:
        for a, b in zip(runs[0].outputs[3:], run.outputs[3:]):
            np.testing.assert_array_equal(a, b)


def test_lig_hidden_slots_are_the_compressed_rules() -> None:
    """Ratio 4: slots visible at ratio 1 but hidden by the compressed rule exist and carry NaN (never read);
    the gradients are not those of ratio 1 (the kernel applies the rule, not the causal mask)."""
    p = lig_problem(7, "TND", 4, dtype="float16", wdtype="float16")
    run = indexer.lightning_indexer_grad(p, 8)
    lig_test.check(run, p, lig_reference(p))
    hidden = np.isnan(p.d_values) & (p.sparse_indices >= 0)
    assert hidden.sum() > 5


def test_lig_ratio_1_is_the_kernel_without_it() -> None:
    p = lig_problem(8, "BSND", 1, dtype="float16", wdtype="float16")
    plain = indexer.LigProblem(p.dtype, p.wdtype, p.query_index, p.key_index, p.weights, p.sparse_indices,
                               p.d_values, p.lens_q, p.lens_k, {"layout": p.layout, "sparse_mode": 3})
    for a, b in zip(indexer.lightning_indexer_grad(p, 8).outputs[3:],
                    indexer.lightning_indexer_grad(plain, 8).outputs[3:]):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- sparse_lightning_indexer_grad_kl_loss
def sli_problem(seed: int, layout: str, ratio: int, *, dtype: str = "bfloat16", wdtype: str = "float32",
                k: int = 6, arch: int = twin.ARCH_A2) -> indexer.SliProblem:
    """The main attention's key and the indexer key both compressed (contract 9.1: one rule for both);
    statistics from the float64 forward over the same selected keys under the same rule. Slots: distinct keys
    of the batch (some hidden by the compressed rule), -1 slots."""
    li = li_problem(seed, layout, ratio, dtype=dtype, wdtype=wdtype, nidx=4, didx=16, arch=arch)
    rng = np.random.default_rng(seed + 200)
    lead_q, lead_k = li.query_index.shape[:-2], li.key_index.shape[:-2]
    n1, d, dr = 4, 32, 16
    q = lambda *s: quantize(rng.standard_normal(s), dtype)  # noqa: E731
    a = {"query": q(*lead_q, n1, d), "key": q(*lead_k, 1, d), "query_rope": q(*lead_q, n1, dr),
         "key_rope": q(*lead_k, 1, dr), "query_index": li.query_index, "key_index": li.key_index,
         "weights": li.weights}
    rows = []
    for s1, s2 in layout_of(layout, ratio)["seq"]:
        for _ in range(s1):
            row = np.full(k, -1, np.int32)
            pick = rng.permutation(s2)[:k]
            row[:pick.size] = pick
            row[rng.random(k) < 0.2] = -1
            rows.append(rng.permutation(row))
    a["sparse_indices"] = np.stack(rows).reshape(*lead_q, 1, k)
    scale = 1.0 / np.sqrt(d + dr)
    cmp = {"cmp_residual_k": li.cmp_residual_k}
    mx, sm = ref.attention_softmax_stats(a["query"], a["key"], a["sparse_indices"], a["query_rope"], a["key_rope"],
                                         li.lens_q, li.lens_k, scale_value=scale, layout=li.layout, sparse_mode=3,
                                         cmp_ratio=ratio, **cmp)
    a["softmax_max"] = mx.astype(np.float32).astype(np.float64)
    a["softmax_sum"] = sm.astype(np.float32).astype(np.float64)
    attrs = dict(scale_value=scale, layout=li.layout, sparse_mode=3, cmp_ratio=ratio)
    return indexer.SliProblem(dtype, wdtype, a, li.lens_q, li.lens_k, attrs, arch=arch,
                              cmp_residual_k=li.cmp_residual_k)


def sli_reference(p: indexer.SliProblem) -> tuple:
    a = p.arrays
    args = [a[n] for n in ("query", "key", "query_index", "key_index", "weights", "sparse_indices", "softmax_max",
                           "softmax_sum", "query_rope", "key_rope")]
    return ref.sparse_lightning_indexer_grad_kl_loss(*args, p.lens_q, p.lens_k, None, p.cmp_residual_k, **p.attrs)


@pytest.mark.parametrize(("ratio", "layout", "arch"), MATRIX)
def test_sli_matches_reference_bitwise_across_cores(ratio: int, layout: str, arch: int) -> None:
    p = sli_problem(ratio + 3 * len(layout), layout, ratio, arch=arch)
    want = sli_reference(p)
    tol = TOLERANCES["attention"][p.dtype]
    runs = []
    for cores, seed in ((1, 0), (8, 0), (24, 7)):
        run = indexer.sparse_lightning_indexer_grad_kl_loss(p, cores, seed)
        assert run.info.min_writes == 1 and run.info.max_writes == 1, "every output byte written exactly once"
        for name, got, w in zip(("d_query_index", "d_key_index", "d_weights"), run.outputs[:3], want[:3]):
            assert np.isfinite(got).all(), name
            assert rel_l2(got, w) <= tol, f"{name}: {rel_l2(got, w):.3g} > {tol:g}"
            zero = (w == 0).all(axis=-1)  # rows nothing reaches (no visible slot): exactly zero
            assert (got[zero] == 0).all(), name
        assert abs(run.outputs[3] - want[3]) <= 1e-4 * abs(want[3]), f"loss {run.outputs[3]} vs {want[3]}"
        runs.append(run)
    for run in runs[1:]:
        for a, b in zip(runs[0].outputs[4:], run.outputs[4:]):
            np.testing.assert_array_equal(a, b)


def test_sli_ratio_changes_the_result() -> None:
    """Ratio 4 hides slots ratio 1 shows: the kernel's loss follows the compressed rule's reference, not the
    causal one's (the two references differ here)."""
    p = sli_problem(9, "TND", 4)
    causal = sli_reference(indexer.SliProblem(p.dtype, p.wdtype, p.arrays, p.lens_q, p.lens_k,
                                              {**p.attrs, "cmp_ratio": 1}, cmp_residual_k=[0] * 4))
    want = sli_reference(p)
    got = indexer.sparse_lightning_indexer_grad_kl_loss(p, 8).outputs[3]
    assert abs(got - want[3]) <= 1e-4 * abs(want[3]) < abs(causal[3] - want[3])
