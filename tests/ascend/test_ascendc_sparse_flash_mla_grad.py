"""sparse_flash_mla_grad Ascend C kernel on the CPU twin (mixed AIC + AIV launch: row pass for delta, dQ, the
L1 norms and the d_sinks terms; key-ownership pass for d_ori_kv and d_cmp_kv) against the float64 reference on
fresh random data (forward statistics from the reference), at the Ascend limits (D 512, N2 1, window 127/0, K 512
when cmp_sparse_indices is given): SWA, HCA (ratio 128), CSA (ratio 4, -1 slots, duplicate and hidden slots),
empty compressed sets, several TND sequences, padding (seqused), BSND, sinks present / absent / -inf, float16 and
bfloat16, arch 2201 and 3510. Outputs start as NaN and the twin counts writes per byte; 1, 8 and 24 cores and
shuffled core orders give the same bits (every sum formed by one core in a fixed order)."""
from __future__ import annotations

import numpy as np
import pytest
from _smla_cases import make_case
from _util import TOLERANCES, quantize, rel_l2
from ascendc_harness import twin_lib as twin
from ascendc_harness import twin_smla_grad as smla

from ms_grad_ops import reference as ref

NAMES = ("d_query", "d_ori_kv", "d_cmp_kv", "d_sinks", "ori_softmax_l1_norm", "cmp_softmax_l1_norm")
ARCHES = (twin.ARCH_A2, twin.ARCH_950)
# d_sinks and the L1 norms come from float32 P of exact 16-bit products and the given float32 lse: only float32
# rounding separates them from the reference's.
F32_TOL = 1e-5
# name -> make_case kwargs (the Ascend limits: D 512, N2 1, the window 127/0; K 512 for CSA).
_V4 = dict(d=512, win_left=127, win_right=0)
CASES = {
    # SWA, several TND sequences, one with S1 < S2 whose band starts past its first tokens
    "swa_tnd": dict(layout="TND", lens=[(40, 150), (6, 6)], kind="swa", n1=2),
    # HCA ratio 128, BSND with padding rows (seqused), two batches
    "hca_bsnd": dict(layout="BSND", lens=[(12, 280), (8, 140)], kind="hca", n1=4, ratio=128),
    # CSA ratio 4: -1 slots, duplicate and hidden entries, three TND sequences (rows with no complete block)
    "csa_tnd": dict(layout="TND", lens=[(20, 160), (9, 9), (12, 40)], kind="csa", n1=2, k=512, ratio=4),
    # CSA with ori_sparse_indices (ori_softmax_l1_norm) and no sinks
    "csa_ori_idx": dict(layout="TND", lens=[(14, 150)], kind="csa", n1=2, k=512, ratio=4, ori_k=24, sinks=False),
    # HCA whose compressed sets are all empty (S2 < 128), BSND
    "hca_empty": dict(layout="BSND", lens=[(10, 100)], kind="hca", n1=2, ratio=128),
    # TND with 2 unused rows at the end of every sequence of every source (seqused_*)
    "csa_tnd_seqused": dict(layout="TND", lens=[(10, 60), (6, 20)], kind="csa", n1=2, k=512, ratio=4, pad=2),
    # CSA in BSND without cmp_residual_kv (L = S2)
    "csa_bsnd_no_residual": dict(layout="BSND", lens=[(8, 40)], kind="csa", n1=4, k=512, ratio=4, residual=False),
}


def problem(name: str, dtype: str, arch: int = twin.ARCH_A2, seed: int = 0, sinks: str = "given",
            **overrides: object) -> smla.SmlaGradProblem:
    """A fresh random problem: inputs rounded to ``dtype``, out and softmax_lse from the float64 forward, a
    random d_out. ``sinks``: "given" (the case's), "minus_inf" (some -inf, one large) or "none"."""
    rng = np.random.default_rng(seed + len(name))
    kw = {**_V4, **CASES[name], **overrides}
    case = make_case(rng, **kw)
    x = {n: None if case.arrays[n] is None else quantize(case.arrays[n], dtype) for n in ("query", "ori_kv", "cmp_kv")}
    s = case.arrays["sinks"]
    if sinks == "none":
        s = None
    elif sinks == "minus_inf" and s is not None:
        s = s.copy()
        s[::2] = -np.inf
        s[1] = 30.0
    kwargs = {**case.ints, "cmp_kv": x["cmp_kv"], "sinks": s}
    out, lse = ref.sparse_flash_mla(x["query"], x["ori_kv"], **kwargs, **case.attrs)
    d_out = quantize(rng.standard_normal(out.shape), dtype)
    return smla.SmlaGradProblem(dtype, x["query"], d_out, quantize(out, dtype), lse.astype(np.float32), x["ori_kv"],
                                x["cmp_kv"], dict(case.ints), s, dict(case.attrs), arch)


def reference(p: smla.SmlaGradProblem, out: np.ndarray | None = None) -> tuple:
    return ref.sparse_flash_mla_grad(p.query, p.d_out, p.out if out is None else out,
                                     p.softmax_lse.astype(np.float64), p.ori_kv,
                                     **{**p.ints, "cmp_kv": p.cmp_kv, "sinks": p.sinks}, **p.attrs)


def check(run: twin.KernelRun, p: smla.SmlaGradProblem) -> None:
    info = run.info
    assert info.min_writes == 1 and info.max_writes == 1, "every output byte written exactly once"
    assert info.ub_peak_bytes == info.tiling_ub_bytes <= twin.ub_bytes_of(p.arch, mixed=True), "UB = the plan"
    want = reference(p)
    # Which gradient rows nothing reaches (no key, nobody selects the key, padding): those of the gradient with
    # delta = 0 (out = 0), where no cancellation can make a reached row exactly 0 as it can for a row whose
    # only key is its output (dP = delta).
    reached = reference(p, np.zeros_like(p.out))
    tol = TOLERANCES["attention"][p.dtype]
    for name, got, ref_val, ref_reached in zip(NAMES, run.outputs, want, reached):
        if ref_val is None or (name == "d_sinks" and p.sinks is None):
            assert got is None, f"{name}: no output expected"
            continue
        assert got is not None and np.isfinite(got).all(), name
        if name in ("d_sinks", "ori_softmax_l1_norm", "cmp_softmax_l1_norm"):
            err = rel_l2(got, ref_val)
            assert err <= F32_TOL, f"{name}: relative L2 error {err:.3g} > {F32_TOL:g}"
            if name == "d_sinks":
                assert (got[np.isneginf(p.sinks)] == 0).all(), "d_sinks of a -inf sink: 0"
            else:
                assert (got[ref_val == 0] == 0).all(), f"{name}: -1, hidden and padding slots must be 0"
            continue
        err = rel_l2(got, ref_val)
        assert err <= tol, f"{name}: relative L2 error {err:.3g} > {tol:g} ({p.dtype})"
        zero = np.all(ref_reached == 0, axis=-1)  # rows nobody reaches, padding rows: exactly zero
        assert (got[zero] == 0).all(), f"{name}: rows without a contribution must be 0"


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_grad_matches_reference(name: str, dtype: str, arch: int) -> None:
    p = problem(name, dtype, arch)
    check(smla.sparse_flash_mla_grad(p, core_num=8), p)


@pytest.mark.parametrize("sinks", ["none", "minus_inf"])
@pytest.mark.parametrize("name", ["swa_tnd", "csa_tnd"])
def test_grad_sinks_absent_or_minus_inf(name: str, sinks: str) -> None:
    p = problem(name, "bfloat16", seed=3, sinks=sinks)
    check(smla.sparse_flash_mla_grad(p, core_num=8), p)


def test_minus_inf_sinks_are_no_sinks() -> None:
    # A -inf sink adds nothing: every other output has the bits of no sinks, d_sinks 0.
    p = problem("csa_tnd", "float16", seed=5, sinks="none")
    plain = smla.sparse_flash_mla_grad(p, core_num=8)
    p.sinks = np.full(p.query.shape[-2], -np.inf, np.float32)
    sunk = smla.sparse_flash_mla_grad(p, core_num=8)
    check(sunk, p)
    for name, a, b in zip(NAMES, plain.outputs, sunk.outputs):
        if name != "d_sinks":
            assert (a is None and b is None) or np.array_equal(a, b), name
    assert plain.outputs[3] is None and (sunk.outputs[3] == 0).all()


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("name", ["csa_tnd", "hca_bsnd", "csa_ori_idx"])
def test_same_bits_for_any_core_count_and_order(name: str, arch: int) -> None:
    # d_ori_kv and d_cmp_kv rows are summed by the AIV owning their key block in ascending query order, dQ and
    # the norms by the AIV owning the query row, d_sinks by AIV 0 in token order: no core count or order
    # changes a bit.
    p = problem(name, "bfloat16", arch, seed=11)
    first = smla.sparse_flash_mla_grad(p, core_num=1)
    check(first, p)
    for cores, seed in [(8, 0), (24, 0), (24, 1234)] + ([(36, 7)] if arch == twin.ARCH_950 else []):
        run = smla.sparse_flash_mla_grad(p, core_num=cores, seed=seed)
        for n, a, b in zip(NAMES, first.outputs, run.outputs):
            assert (a is None and b is None) or np.array_equal(a, b), f"{n}: {cores} cores, seed {seed}"


@pytest.mark.parametrize("arch", ARCHES)
def test_real_sizes(arch: int) -> None:
    # DeepSeek-V4's attention shape at a short length: D 512, window 128, K 512, N1 128 (the A2/A3 maximum; V4-Pro's
    # head count), CSA ratio 4.
    p = problem("csa_tnd", "bfloat16", arch, seed=13, lens=[(24, 300)], n1=128)
    check(smla.sparse_flash_mla_grad(p, core_num=24), p)


def test_tiling_invariants() -> None:
    # Every query row and key row owned by exactly one AIV, contiguous, for 1..48 cores; UB within the arch's.
    p = problem("csa_tnd", "float16")
    for cores in (1, 8, 20, 24, 40, 48):
        sch = smla.schedule(p, cores)
        assert sch.aiv == 2 * sch.used_aic and sch.used_aic <= cores
        t1, t2, t3 = p.query.shape[0], p.ori_kv.shape[0], p.cmp_kv.shape[0]
        for starts, total in ((sch.row_start, t1), (sch.ori_start, t2), (sch.cmp_start, t3)):
            assert starts[0] == 0 and starts[-1] == total and (np.diff(starts) >= 0).all()
        assert sch.ub_bytes <= twin.ub_bytes_of(twin.ARCH_A2, mixed=True)


def test_tiling_refuses_sizes_outside_the_ascend_limits() -> None:
    p = problem("swa_tnd", "float16", d=64)
    with pytest.raises(twin.TilingError, match="D"):
        smla.sparse_flash_mla_grad(p, core_num=2)
    p = problem("csa_tnd", "float16", k=64)
    with pytest.raises(twin.TilingError, match="K"):
        smla.sparse_flash_mla_grad(p, core_num=2)
