"""cla_gate_merge and cla_gate_backward Ascend C kernels, run on the CPU twin, against the
float64 reference: fp16 and bf16, odd shapes, several core counts and UB sizes, on both NPU
architectures the ops' SoCs include (ms_grad_ops/_specs.py: Atlas A2/A3 = 2201 and Ascend 950 =
3510; the tiling is sized from the UB, which differs: 192 vs 248 KiB).

Outputs start as NaN (poison) and the twin counts writes per byte, so an element a core forgot
or wrote twice fails the test even when its value happens to look right.
"""
from __future__ import annotations

import numpy as np
import pytest
from _util import TOLERANCES, rel_l2
from ascendc_harness import twin_cla_gate as cla
from ascendc_harness import twin_lib as twin

from ms_grad_ops.reference import cla_gate_backward, cla_gate_merge

DTYPES = ("float16", "bfloat16")
ARCHS = (twin.ARCH_A2, twin.ARCH_950)
# (T, N, D, cores): T=1, one head, N=128, odd T, both Ascend head dims, every target core count.
CASES = [
    (1, 1, 128, 1),
    (1, 1, 256, 48),
    (37, 3, 128, 8),
    (5, 7, 256, 40),
    (64, 1, 256, 20),
    (3, 128, 128, 48),
    (300, 16, 256, 20),
    (1001, 5, 128, 40),
]


def inputs(t: int, n: int, d: int, dtype: str, seed: int, logit_scale: float = 3.0) -> list[np.ndarray]:
    """G, O_g, O_l, z_g, z_l already rounded to ``dtype`` (the reference sees what the kernel sees)."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((t, n, d)) for _ in range(3)]
    arrays += [rng.standard_normal((t, n)) * logit_scale for _ in range(2)]
    return [twin.from_bits(twin.to_bits(a, dtype), dtype) for a in arrays]


def check_run(run: twin.KernelRun, refs: tuple[np.ndarray, ...], dtype: str, ub: int | None = None,
              arch: int = twin.ARCH_A2) -> None:
    info = run.info
    ub = twin.platform_ub(arch) if ub is None else ub
    assert info.min_writes == 1 and info.max_writes == 1, "every output byte written exactly once"
    assert info.ub_peak_bytes == info.tiling_ub_bytes <= ub, "the kernel uses exactly the UB its tiling planned"
    tol = TOLERANCES["elementwise"][dtype]
    for i, (got, ref) in enumerate(zip(run.outputs, refs)):
        assert np.isfinite(got).all(), f"output {i}: non-finite values"
        err = rel_l2(got, ref)
        assert err <= tol, f"output {i}: relative L2 error {err:.3g} > {tol:g} ({dtype})"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t,n,d,cores", CASES)
def test_cla_gate_backward_matches_reference(t: int, n: int, d: int, cores: int, dtype: str, arch: int) -> None:
    x = inputs(t, n, d, dtype, seed=t * 1000 + n)
    run = cla.cla_gate_backward(dtype, *x, core_num=cores, arch=arch)
    assert run.info.blocks == min(cores, t * n)
    check_run(run, cla_gate_backward(*x), dtype, arch=arch)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t,n,d,cores", CASES)
def test_cla_gate_merge_matches_reference(t: int, n: int, d: int, cores: int, dtype: str, arch: int) -> None:
    og, ol, _, zg, zl = inputs(t, n, d, dtype, seed=t * 1000 + n + 1)
    run = cla.cla_gate_merge(dtype, og, ol, zg, zl, core_num=cores, arch=arch)
    check_run(run, (cla_gate_merge(og, ol, zg, zl),), dtype, arch=arch)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ub_kib", [32, 64, None])
def test_small_and_large_unified_buffer(ub_kib: int | None, dtype: str, arch: int) -> None:
    # A smaller UB means more, shorter tiles (last one partial); results must not change. None:
    # all the arch has (on 3510 the tiles grow past what fits 2201).
    x = inputs(97, 9, 256, dtype, seed=5)
    ub = twin.platform_ub(arch) if ub_kib is None else ub_kib * 1024
    run = cla.cla_gate_backward(dtype, *x, core_num=8, ub_bytes=ub, arch=arch)
    check_run(run, cla_gate_backward(*x), dtype, ub)
    run = cla.cla_gate_merge(dtype, x[1], x[2], x[3], x[4], core_num=8, ub_bytes=ub, arch=arch)
    check_run(run, (cla_gate_merge(x[1], x[2], x[3], x[4]),), dtype, ub)


@pytest.mark.parametrize("kernel", ["merge", "backward"])
def test_tiling_for_950_overflows_atlas_a2_ub(kernel: str) -> None:
    # The tiling sized for Ascend 950's 248 KiB UB, launched on Atlas A2/A3 (192 KiB): the twin
    # names the rule, the buffer and the sizes instead of corrupting UB.
    x = inputs(1024, 1, 256, "float16", seed=5)
    ub = twin.platform_ub(twin.ARCH_950)
    with pytest.raises(twin.TwinRuleError, match=r"unified buffer overflow on NPU arch 2201.*capacity 196608 bytes"):
        if kernel == "merge":
            cla.cla_gate_merge("float16", x[1], x[2], x[3], x[4], core_num=1, ub_bytes=ub)
        else:
            cla.cla_gate_backward("float16", *x, core_num=1, ub_bytes=ub)


@pytest.mark.parametrize("dtype", DTYPES)
def test_saturated_gates_stay_finite(dtype: str) -> None:
    # |z| up to 200: exp(-z) overflows to inf in float32 and sigmoid must still be exactly 0 or 1.
    x = inputs(33, 4, 128, dtype, seed=11, logit_scale=80.0)
    check_run(cla.cla_gate_backward(dtype, *x, core_num=20), cla_gate_backward(*x), dtype)
    check_run(cla.cla_gate_merge(dtype, x[1], x[2], x[3], x[4], core_num=20),
              (cla_gate_merge(x[1], x[2], x[3], x[4]),), dtype)


def test_unsupported_head_dim_is_a_tiling_error() -> None:
    x = inputs(4, 2, 100, "float16", seed=1)
    with pytest.raises(twin.TilingError, match="multiple of 16"):
        cla.cla_gate_backward("float16", *x, core_num=8)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gate_gradient_is_accurate_for_large_logits(dtype: str) -> None:
    # s * (1 - s) cancels in float32 for large |z| (at |z| = 16, 1 - s is 0 or off by 6%); the
    # kernel computes s * sigmoid(-z). Each dz must be the reference rounded to dtype, within 1 ulp.
    x = inputs(64, 4, 128, dtype, seed=13)
    for i in (3, 4):
        z = np.linspace(-16.0, 16.0, x[i].size).reshape(x[i].shape)
        x[i] = twin.from_bits(twin.to_bits(z, dtype), dtype)
    run = cla.cla_gate_backward(dtype, *x, core_num=8)
    refs = cla_gate_backward(*x)
    check_run(run, refs, dtype)
    for got, want in zip(run.outputs[2:], refs[2:]):
        want_q = twin.from_bits(twin.to_bits(want, dtype), dtype)
        ulp = np.abs(twin.from_bits(twin.to_bits(want_q, dtype) + np.uint16(1), dtype) - want_q)
        assert (np.abs(got - want_q) <= ulp).all(), np.max(np.abs(got - want_q) / ulp)
