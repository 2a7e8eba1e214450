"""sparse_flash_mla (forward) Ascend C kernel on the CPU twin (mixed AIC + AIV launch), NPU arch 2201 (Atlas A2/A3)
and 3510 (Ascend 950), against the float64 reference (docs/contract.md section 8) on fresh random data: SWA (no
compressed keys), HCA (ratio 128, every visible entry), CSA (ratio 4, top-k indices with -1 slots, hidden entries
and duplicates), the first tokens with an empty compressed set and rows that see nothing, several TND sequences,
BSND and TND padding (seqused_*), sinks (random, -inf, none), float16/bfloat16, the Ascend sizes (D 512, window 127
/ 0, K 512; N1 64 once); outputs start as NaN and the twin counts writes per byte; the same bits for 1, 8 and 24
cores and a shuffled core order."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from _smla_cases import make_case
from _util import TOLERANCES, quantize, rel_l2
from ascendc_harness import twin_lib as twin
from ascendc_harness import twin_smla as smla

from ms_grad_ops import reference as ref

ARCHS = (twin.ARCH_A2, twin.ARCH_950)
# The Ascend attributes (the table's limits): band 127 / 0, D 512; CSA index rows of K = 512 slots.
V4 = dict(d=512, win_left=127, win_right=0)
CASES = {
    # SWA, two sequences, S1 > S2 in the first (its first rows see nothing), a full band of 128 in the second
    "swa_tnd": dict(layout="TND", lens=[(5, 3), (3, 140)], kind="swa", n1=2),
    # HCA ratio 128: the first three rows of the second sequence see no complete entry, later ones 1 or 2
    "hca_tnd": dict(layout="TND", lens=[(3, 300), (6, 130)], kind="hca", n1=2, ratio=128),
    # CSA ratio 4 with cmp_sparse_indices: -1 slots, entries the causal rule hides, duplicates; the first three
    # tokens of the second sequence have no complete compressed block
    "csa_tnd": dict(layout="TND", lens=[(4, 60), (6, 6)], kind="csa", n1=4, k=512, ratio=4),
    # BSND (padded rows, seqused_*), HCA
    "hca_bsnd": dict(layout="BSND", lens=[(3, 260), (2, 131)], kind="hca", n1=2, ratio=128),
    # TND with 2 unused rows at the end of every sequence of every source (seqused_*), CSA, no sinks
    "csa_tnd_seqused": dict(layout="TND", lens=[(3, 30), (2, 9)], kind="csa", n1=2, k=512, ratio=4, pad=2,
                            sinks=False),
    # CSA without cmp_residual_kv (L = S2), BSND, more keys than one chunk (band 128 + up to 510 entries)
    "csa_bsnd_chunks": dict(layout="BSND", lens=[(2, 2100)], kind="csa", n1=2, k=512, ratio=4, residual=False),
}
# DeepSeek-V4-Flash's attention sizes: N1 64, D 512, window 128, K 512 (a short query tail of a long sequence).
REAL = dict(layout="TND", lens=[(2, 2200)], kind="csa", n1=64, k=512, ratio=4)


def problem(spec: dict, dtype: str, seed: int, arch: int = twin.ARCH_A2) -> smla.SmlaProblem:
    case = make_case(np.random.default_rng(seed), **{**V4, **spec})
    x = {n: None if case.arrays[n] is None else quantize(case.arrays[n], dtype) for n in ("query", "ori_kv", "cmp_kv")}
    return smla.SmlaProblem(dtype, x["query"], x["ori_kv"], x["cmp_kv"], dict(case.ints), case.arrays["sinks"],
                            dict(case.attrs), arch)


def reference(p: smla.SmlaProblem) -> tuple[np.ndarray, np.ndarray]:
    return ref.sparse_flash_mla(p.query, p.ori_kv, p.cmp_kv, **p.ints, sinks=p.sinks, **p.attrs)


def check(run: twin.KernelRun, p: smla.SmlaProblem) -> None:
    info = run.info
    assert info.min_writes == 1 and info.max_writes == 1, "every output byte written exactly once"
    assert info.ub_peak_bytes == info.tiling_ub_bytes <= twin.ub_bytes_of(p.arch, mixed=True), "UB = the tiling's plan"
    out, lse = run.outputs
    want_out, want_lse = reference(p)
    lse = lse.reshape(want_lse.shape)
    assert np.isfinite(out).all()
    err = rel_l2(out, want_out)
    tol = TOLERANCES["attention"][p.dtype]
    assert err <= tol, f"attn_out: relative L2 error {err:.3g} > {tol:g}"
    # Rows without keys: out exactly 0; their lse the sink's logit or -inf, exactly; padding rows lse 0.
    exact = ~np.isfinite(want_lse) | (want_lse == 0)
    assert np.array_equal(lse[exact], want_lse[exact]), "lse of rows without keys / padding rows"
    assert (out[np.all(want_out == 0, axis=-1)] == 0).all(), "rows without keys give out = 0"
    ok = ~exact
    assert (np.abs(lse[ok] - want_lse[ok]) <= 1e-4 + 1e-5 * np.abs(want_lse[ok])).all(), "softmax_lse"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_matches_reference(name: str, dtype: str, arch: int) -> None:
    p = problem(CASES[name], dtype, seed=len(name) + arch, arch=arch)
    check(smla.sparse_flash_mla(p, core_num=8), p)


def empty_rows(p: smla.SmlaProblem) -> tuple[np.ndarray, np.ndarray]:
    """(rows without keys, padding rows) over softmax_lse's elements, from the reference without sinks."""
    _, lse = ref.sparse_flash_mla(p.query, p.ori_kv, p.cmp_kv, **p.ints, sinks=None, **p.attrs)
    return np.isneginf(lse), lse == 0


def test_rows_without_keys_are_exercised() -> None:
    # The cases above hold rows that see nothing (SWA, S1 > S2), rows with only a band (first tokens of HCA/CSA)
    # and padding rows, so check() tests their special values.
    for name, want_padding in (("swa_tnd", False), ("hca_bsnd", True), ("csa_tnd_seqused", True)):
        nothing, padding = empty_rows(problem(CASES[name], "float16", seed=1))
        assert padding.any() == want_padding, name
    nothing, _ = empty_rows(problem(CASES["swa_tnd"], "float16", seed=1))
    assert nothing.any()
    p = problem(CASES["hca_tnd"], "float16", seed=1)
    no_cmp = ref.sparse_flash_mla(p.query, p.ori_kv, None, **{**p.ints, "cu_seqlens_cmp_kv": None,
                                                                 "seqused_cmp_kv": None, "cmp_residual_kv": None},
                                  sinks=p.sinks, **{**p.attrs, "cmp_ratio": 1})[1]
    with_cmp = reference(p)[1]
    assert (no_cmp == with_cmp).any() and (no_cmp != with_cmp).any(), "rows with and without compressed keys"


@pytest.mark.parametrize("sinks", ["none", "minus_inf", "mixed"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_forward_sinks(sinks: str, dtype: str) -> None:
    # No sinks; every sink -inf (the same as none: lse -inf on rows without keys); -inf, +8 and random mixed.
    p = problem(CASES["swa_tnd"], dtype, seed=5)
    n1 = p.query.shape[-2]
    p.sinks = {"none": None, "minus_inf": np.full(n1, -np.inf, np.float32),
               "mixed": np.array([-np.inf, 8.0][:n1], np.float32)}[sinks]
    run = smla.sparse_flash_mla(p, core_num=8)
    check(run, p)
    if sinks == "minus_inf":
        plain = smla.sparse_flash_mla(replace(p, sinks=None), core_num=8)
        for a, b in zip(plain.outputs, run.outputs):
            assert np.array_equal(a, b), "a -inf sink gives the bits of no sink"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", ["csa_tnd", "hca_bsnd", "csa_bsnd_chunks"])
def test_same_bits_for_any_core_count_and_order(name: str, arch: int) -> None:
    # Each query row belongs to one AIV and its keys have one order: neither the split nor the order may change
    # a bit, nor whether the host knows the lengths (balanced by keys, or by count).
    p = problem(CASES[name], "bfloat16", seed=11, arch=arch)
    first = smla.sparse_flash_mla(p, core_num=1)
    check(first, p)
    for cores, seed, known in [(8, 0, True), (24, 0, True), (8, 5, False), (24, 77, True)]:
        run = smla.sparse_flash_mla(replace(p, lens_known=known), core_num=cores, seed=seed)
        for a, b in zip(first.outputs, run.outputs):
            assert np.array_equal(a, b, equal_nan=False), f"{cores} cores, seed {seed}"


@pytest.mark.parametrize("arch", ARCHS)
def test_forward_at_deepseek_v4_sizes(arch: int) -> None:
    # N1 64, D 512, window 128, K 512 over a 2200-token sequence (about 640 keys per row: several chunks).
    p = problem(REAL, "bfloat16", seed=3, arch=arch)
    s = smla.smla_schedule(p, core_num=24)
    assert s.key_chunk < 640, "the rows span several chunks"
    check(smla.sparse_flash_mla(p, core_num=24), p)


@pytest.mark.parametrize("cores", [1, 8, 20, 24, 40, 48])
def test_tiling_splits_every_row_once(cores: int) -> None:
    # Contiguous ranges covering every query row once, never more AIVs than rows, balanced by keys: no range
    # heavier than the mean by more than one row's weight.
    p = problem(CASES["csa_tnd"], "float16", seed=2)
    s = smla.smla_schedule(p, core_num=cores)
    rows = p.query.shape[0] * p.ori_kv.shape[-2]
    assert s.row_start[0] == 0 and s.row_start[-1] == rows and (np.diff(s.row_start) >= 0).all()
    assert s.aiv == 2 * s.used_aic <= 2 * cores and s.used_aic <= (rows + 1) // 2
    assert s.ub_bytes <= twin.platform_ub() and s.workspace_bytes == s.aiv * s.aiv_ws_bytes


def test_tiling_refuses_sizes_outside_the_ascend_limits() -> None:
    p = problem(CASES["csa_tnd"], "float16", seed=2)
    small = problem({**CASES["csa_tnd"], "d": 64}, "float16", seed=2)
    with pytest.raises(twin.TilingError, match=r"D \(head size, query dim -1\) must be in \[512, 512\] on Ascend"):
        smla.smla_schedule(small, core_num=8)
    p.ints["cmp_sparse_indices"] = p.ints["cmp_sparse_indices"][..., :256]
    with pytest.raises(twin.TilingError, match=r"K \(slots of cmp_sparse_indices"):
        smla.smla_schedule(p, core_num=8)
    with pytest.raises(twin.TilingError, match="ori_win_left"):
        smla.smla_schedule(replace(p, attrs={**p.attrs, "ori_win_left": 5}), core_num=8)
