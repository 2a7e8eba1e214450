"""The attention and indexer kernels the table registers for Ascend 950 (ms_grad_ops/_specs.py), run
on the twin's NPU arch 3510: the tiling takes that SoC's platform (tiling_common.h kAscend950Platform:
36 AIC / 72 AIV, UB 248 KiB, L0C 256 KiB) and the twin enforces 3510's capacities and rules.

The whole matrix runs on 2201 in each kernel's own test file; here a representative subset per
kernel, against the same float64 reference and checks: one generic case per dtype (sinks where the
op takes them), one at the Ascend sizes (CANN's 950-only head counts where it has them: SFAG
N1 = 48, SLIGKL N1 = 48 with Nidx = 24), and the same output bits for 1, 7 and 36 cores and a
shuffled core order; and the pure tilings of each op's own tiling shapes on 950's platform.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import test_ascendc_dense_lightning_indexer_softmax_lse as dli_test
import test_ascendc_lightning_indexer as li_test
import test_ascendc_sparse_flash_attention as sfa_test
import test_ascendc_sparse_flash_attention_grad as sfag_test
import test_ascendc_sparse_flash_attention_tiling as sfa_tiling
import test_ascendc_sparse_lightning_indexer_grad_kl_loss as sli_test
from _indexer_cases import make_case
from ascendc_harness import twin_dense_indexer as dense
from ascendc_harness import twin_indexer as indexer
from ascendc_harness import twin_lib as twin
from ascendc_harness import twin_sfa as sfa

from ms_grad_ops._specs import OP_SPECS

ARCH = twin.ARCH_950
CORES = 36  # Ascend950PR's AI cores
DTYPES = ("float16", "bfloat16")
# SFAG's head counts CANN takes on 950 only, at D = 512, Dr = 64, K = 1024 (small S).
MLA_N48 = dict(layout="TND", lens_q=[3, 2], lens_kv=[7, 40], n1=48, d=512, dr=64, k=1024)


def on_950(p: object) -> object:
    p.arch = ARCH
    return p


def same_bits(first: twin.KernelRun, run: twin.KernelRun, what: str) -> None:
    for i, (a, b) in enumerate(zip(first.outputs, run.outputs)):
        assert (a is None and b is None) or np.array_equal(np.asarray(a).view(np.uint8),
                                                           np.asarray(b).view(np.uint8)), f"output {i}: {what}"


@pytest.mark.parametrize("op", ["sparse_flash_attention", "sparse_flash_attention_grad", "lightning_indexer",
                                "sparse_lightning_indexer_grad_kl_loss", "dense_lightning_indexer_softmax_lse"])
def test_the_table_registers_950(op: str) -> None:
    # The kernels tested here are the ops registered for Ascend 950 (and the other way round below).
    assert "ascend950" in OP_SPECS[op].ascend_socs


def test_every_op_registered_for_950_is_tested_here() -> None:
    tested = {"sparse_flash_attention", "sparse_flash_attention_grad", "lightning_indexer",
              "sparse_lightning_indexer_grad_kl_loss", "dense_lightning_indexer_softmax_lse", "cla_gate_merge",
              "cla_gate_backward", "sparse_flash_mla", "sparse_flash_mla_grad",
              "sparse_lightning_indexer_kl_loss_grad"}  # their own test files run both archs
    assert {n for n, s in OP_SPECS.items() if "ascend950" in s.ascend_socs} == tested


# ---------------------------------------------------------------- the tilings on Ascend950PR's platform
def fits_950(s: object, rows: int) -> None:
    """Every row (token) in exactly one AIV range of a launch of at most 36 AIC, the UB plan within 3510's."""
    assert 1 <= s.used_aic <= CORES and s.aiv == 2 * s.used_aic
    assert sfa_tiling.covered_once(s.row_start, rows), "each row exactly once"
    assert s.ub_bytes <= twin.ub_bytes_of(ARCH, mixed=True)


@pytest.mark.parametrize("kernel", ["forward", "grad"])
@pytest.mark.parametrize("name", sorted(sfa_tiling.PROBLEMS))
def test_sfa_tiling_on_950(name: str, kernel: str) -> None:
    p = on_950(replace(sfa_tiling.PROBLEMS[name]))
    args = p.args(CORES)
    fits_950(sfa.sfa_schedule(kernel, p, CORES, ub_bytes=twin.platform_ub(ARCH)), args.t1 * args.n2)


@pytest.mark.parametrize(("layout", "kw"), li_test.TILING_SHAPES)
def test_lightning_indexer_tiling_on_950(layout: str, kw: dict) -> None:
    p = on_950(li_test.shape_only(layout, **kw))
    fits_950(indexer.li_schedule(p, CORES, ub_bytes=twin.platform_ub(ARCH)), p.args(CORES).t1)


@pytest.mark.parametrize(("layout", "kw"), sli_test.TILING_SHAPES)
def test_sli_tiling_on_950(layout: str, kw: dict) -> None:
    p = on_950(sli_test.shape_only(layout, **kw))
    fits_950(indexer.sli_schedule(p, CORES, ub_bytes=twin.platform_ub(ARCH)), p.args(CORES).t1)


@pytest.mark.parametrize(("layout", "kw"), dli_test.TILING_SHAPES)
def test_dense_softmax_lse_tiling_on_950(layout: str, kw: dict) -> None:
    p = on_950(dli_test.shape_only(layout, **kw))
    fits_950(dense.dli_schedule(p, CORES, ub_bytes=twin.platform_ub(ARCH)), p.args(CORES).t1)


# ---------------------------------------------------------------- sparse_flash_attention(_grad)
@pytest.mark.parametrize("kernel", ["forward", "grad"])
def test_sfa_tiles_grow_with_the_950_platform(kernel: str) -> None:
    # N1 = 64 at D = 512: the key chunk is bounded by the UB. Ascend 950's 248 KiB take chunks twice
    # as long as Atlas A2's 192 KiB - 256, and the plan uses more than A2 could hold.
    _, p = sfa_test.make("mla_n64", "bfloat16", seed=1)
    a2 = sfa.sfa_schedule(kernel, p, 24)
    on_950(p)
    s950 = sfa.sfa_schedule(kernel, p, CORES, ub_bytes=twin.platform_ub(ARCH))
    assert s950.key_chunk == 2 * a2.key_chunk
    assert twin.platform_ub(twin.ARCH_A2) < s950.ub_bytes <= twin.ub_bytes_of(ARCH, mixed=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sfa_forward(dtype: str) -> None:
    p = on_950(sfa_test.with_sinks("tnd_uneven", dtype, "mixed", seed=3))
    sfa_test.check(sfa.sparse_flash_attention(p, core_num=8), p)
    _, q = sfa_test.make("mla_n64", dtype, seed=4)
    on_950(q)
    sfa_test.check(sfa.sparse_flash_attention(q, core_num=CORES), q)


def test_sfa_forward_same_bits_for_any_core_count_and_order() -> None:
    p = on_950(sfa_test.with_sinks("tnd_chunks", "bfloat16", "random", seed=5))
    first = sfa.sparse_flash_attention(p, core_num=1)
    sfa_test.check(first, p)
    for cores, seed in ((7, 0), (CORES, 0), (CORES, 9)):
        same_bits(first, sfa.sparse_flash_attention(p, core_num=cores, seed=seed), f"{cores} cores, seed {seed}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_sfa_grad(dtype: str) -> None:
    sfag_test.run_sinks(on_950(sfa_test.with_sinks("bsnd_mode0_n2", dtype, "mixed", seed=6)), cores=8)


def test_sfa_grad_cann_950_head_count() -> None:
    _, p = sfa_test.make_spec(MLA_N48, "bfloat16", seed=7)
    on_950(p)
    p.sinks = sfa_test.make_sinks("random", 48, 7)
    sfag_test.run_sinks(p, cores=CORES)


def test_sfa_grad_same_bits_for_any_core_count_and_order() -> None:
    p = on_950(sfa_test.with_sinks("tnd_uneven", "bfloat16", "random", seed=8))
    d_out, out, smax, ssum = sfag_test.grad_inputs(p, seed=8)
    first = sfa.sparse_flash_attention_grad(p, d_out, out, smax, ssum, core_num=1)
    sfag_test.check(first, p, d_out, out, smax, ssum)
    for cores, seed in ((7, 0), (CORES, 0), (CORES, 11)):
        run = sfa.sparse_flash_attention_grad(p, d_out, out, smax, ssum, core_num=cores, seed=seed)
        same_bits(first, run, f"{cores} cores, seed {seed}")


# ---------------------------------------------------------------- sparse_lightning_indexer_grad_kl_loss
def sli_run(case: object, dtype: str, wdtype: str, cores: int, sinks: np.ndarray | None, seed: int = 0
            ) -> twin.KernelRun:
    p = on_950(sli_test.problem(case, dtype, wdtype, sinks))
    run = indexer.sparse_lightning_indexer_grad_kl_loss(p, cores, seed=seed, deterministic=True)
    sli_test.check(run, case, dtype, sinks, arch=ARCH)
    return run


@pytest.mark.parametrize(("dtype", "wdtype"), [("float16", "float16"), ("bfloat16", "float32")])
def test_sli(dtype: str, wdtype: str) -> None:
    case = sli_test.small(9, dtype, wdtype, "TND", lens_q=[9, 14, 5], lens_k=[40, 18, 23], k=16, drop=0.1)
    sinks = sfa_test.make_sinks("mixed", case.arrays["query"].shape[-2], 9)
    sli_run(sli_test.rebuild_stats(case, sinks), dtype, wdtype, 8, sinks)


def test_sli_cann_950_head_counts() -> None:
    # CANN's 950-only pair N1 = 48, Nidx = 24, at D = 512, Dr = 64, Didx = 128, K = 1024.
    case = make_case(np.random.default_rng(10), "bfloat16", "float32", "BSND", n1=48, d=512, dr=64, nidx=24,
                     didx=128, k=1024, b=1, s1=4, s2=6)
    sli_run(case, "bfloat16", "float32", CORES, None)


def test_sli_same_bits_for_any_core_count_and_order() -> None:
    case = sli_test.small(11, "bfloat16", "float32", "TND", lens_q=[9, 14, 5], lens_k=[40, 18, 23], k=16, drop=0.1)
    sinks = sfa_test.make_sinks("random", case.arrays["query"].shape[-2], 11)
    sli_test.rebuild_stats(case, sinks)
    first = sli_run(case, "bfloat16", "float32", 1, sinks)
    for cores, seed in ((7, 0), (CORES, 0), (CORES, 5)):
        run = sli_run(case, "bfloat16", "float32", cores, sinks, seed)
        for a, b in zip(first.outputs[4:], run.outputs[4:]):
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"bits differ at {cores} cores, seed {seed}"


# ---------------------------------------------------------------- lightning_indexer, dense softmax statistics
@pytest.mark.parametrize(("dtype", "wdtype"), [("float16", "float16"), ("bfloat16", "float32")])
def test_lightning_indexer(dtype: str, wdtype: str) -> None:
    lens = {"lens_q": [5, 0, 17, 1], "lens_k": [7, 3, 40, 0]}
    li_test.check(on_950(li_test.problem(12, dtype, wdtype, "TND", k=8, **lens)), 8)
    li_test.check(on_950(li_test.problem(13, dtype, wdtype, "BSND", k=50)), CORES)
    p = li_test.problem(2, dtype, wdtype, "TND", k=2048, lens_q=[3, 4], lens_k=[300, 9], nidx=64, didx=128)
    li_test.check(on_950(p), CORES)


def test_lightning_indexer_same_bits_for_any_core_count_and_order() -> None:
    p = on_950(li_test.problem(14, "bfloat16", "float32", "TND", k=37, lens_q=[30, 6], lens_k=[90, 40]))
    first = li_test.check(p, 1)
    for cores, seed in ((7, 0), (CORES, 3)):
        same_bits(first, indexer.lightning_indexer(p, cores, seed), f"{cores} cores, seed {seed}")


@pytest.mark.parametrize(("dtype", "wdtype"), [("float16", "float16"), ("bfloat16", "float32")])
def test_dense_softmax_lse(dtype: str, wdtype: str) -> None:
    dli_test.check(on_950(dli_test.problem(15, dtype, wdtype, "TND", lens_q=[5, 0, 17, 1], lens_k=[7, 3, 40, 0])), 8)
    p = dli_test.problem(2, dtype, wdtype, "BSND", b=1, s1=4, s2=700, nidx=64, didx=128)
    dli_test.check(on_950(p), CORES)


def test_dense_softmax_lse_same_bits_for_any_core_count_and_order() -> None:
    p = on_950(dli_test.problem(16, "float16", "float16", "TND", lens_q=[30, 6, 11], lens_k=[90, 40, 11]))
    first = dli_test.check(p, 1)
    for cores, seed in ((7, 3), (CORES, 0), (CORES, 7)):
        same_bits(first, dense.dense_lightning_indexer_softmax_lse(p, cores, seed), f"{cores} cores, seed {seed}")
