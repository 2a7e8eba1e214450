"""sparse_flash_attention_grad Ascend C kernel on the CPU twin (mixed AIC + AIV launch, row pass
for dQ + key-ownership pass for dK/dV) against the float64 reference, on the same problems as
the forward test; fp16/bf16, 1/8/24 cores, and the same output bits for any core count and any
core execution order (deterministic by construction); with sinks, d_sinks too (summed in token
order by one AIV)."""
from __future__ import annotations

import numpy as np
import pytest
from _util import TOLERANCES, quantize, rel_l2
from ascendc_harness import twin_lib as twin
from ascendc_harness import twin_sfa as sfa
from test_ascendc_sparse_flash_attention import (
    ASCEND_CASES,
    CASES,
    VARIANT_CASES,
    make,
    make_sinks,
    make_variant,
    with_sinks,
)

from ms_grad_ops import reference as ref

NAMES = ("d_query", "d_key", "d_value", "d_query_rope", "d_key_rope", "d_sinks")
# d_sinks = -sum over rows of P_sink * delta, in float32 from the same 16-bit dO and O as the
# reference's: only float32 rounding separates them.
D_SINKS_TOL = 1e-5


def grad_inputs(p: sfa.SfaProblem, seed: int) -> tuple[np.ndarray, ...]:
    """d_out (random), out (the forward, rounded to the dtype), float32 statistics."""
    value, lens_q, lens_kv = p.reference_args()
    out, smax, ssum = ref.sparse_flash_attention(p.query, p.key, value, p.sparse_indices, p.query_rope, p.key_rope,
                                                 lens_q, lens_kv, p.sinks, **p.attrs)
    d_out = quantize(np.random.default_rng(seed).standard_normal(out.shape), p.dtype)
    return d_out, quantize(out, p.dtype), smax.astype(np.float32), ssum.astype(np.float32)


def check(run: twin.KernelRun, p: sfa.SfaProblem, d_out: np.ndarray, out: np.ndarray, smax: np.ndarray,
          ssum: np.ndarray) -> None:
    info = run.info
    assert info.min_writes == 1 and info.max_writes == 1, "every output byte written exactly once"
    assert info.ub_peak_bytes == info.tiling_ub_bytes <= twin.ub_bytes_of(p.arch, mixed=True), "UB = the tiling's plan"
    value, lens_q, lens_kv = p.reference_args()
    want = list(ref.sparse_flash_attention_grad(p.query, p.key, value, p.sparse_indices, d_out, out, smax, ssum,
                                                lens_q, lens_kv, p.query_rope, p.key_rope, p.sinks, **p.attrs))
    if p.value is None:  # key is value: d_key is the fused dK + dV, no d_value
        want[1], want[2] = want[1] + want[2], None
    if p.sinks is None:
        want.append(None)
    tol = TOLERANCES["attention"][p.dtype]
    assert len(run.outputs) == len(want) == len(NAMES)
    for name, got, ref_val in zip(NAMES, run.outputs, want):
        if ref_val is None:
            assert got is None
            continue
        if name == "d_sinks":
            assert (got[np.isneginf(p.sinks)] == 0).all(), "d_sinks of a -inf sink: 0"
            err = rel_l2(got, ref_val)
            assert err <= D_SINKS_TOL, f"d_sinks: relative L2 error {err:.3g} > {D_SINKS_TOL:g}"
            continue
        assert np.isfinite(got).all(), name
        err = rel_l2(got, ref_val)
        assert err <= tol, f"{name}: relative L2 error {err:.3g} > {tol:g} ({p.dtype})"
        zero = np.all(ref_val == 0, axis=-1)  # rows nobody reaches: exactly zero
        assert (got[zero] == 0).all(), f"{name}: rows without a contribution must be 0"


def run_case(name: str, dtype: str, cores: int, seed: int = 0) -> None:
    _, p = make(name, dtype, seed=len(name))
    d_out, out, smax, ssum = grad_inputs(p, seed=7)
    check(sfa.sparse_flash_attention_grad(p, d_out, out, smax, ssum, core_num=cores, seed=seed), p, d_out, out,
          smax, ssum)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_grad_matches_reference(name: str, dtype: str) -> None:
    run_case(name, dtype, cores=8)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(ASCEND_CASES))
def test_grad_ascend_shapes(name: str, dtype: str) -> None:
    run_case(name, dtype, cores=24)


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("name", ["tnd_uneven", "bsnd_mode0_n2", "tnd_block16"])
def test_grad_same_bits_for_any_core_count_and_order(name: str, deterministic: bool) -> None:
    # dK/dV rows are summed by the AIV owning their key block, in ascending query order, and
    # dQ rows by the AIV owning the query row: the bits cannot depend on cores or order.
    _, p = make(name, "bfloat16", seed=21)
    d_out, out, smax, ssum = grad_inputs(p, seed=3)
    first = sfa.sparse_flash_attention_grad(p, d_out, out, smax, ssum, core_num=1, deterministic=deterministic)
    check(first, p, d_out, out, smax, ssum)
    for cores, seed in [(8, 0), (24, 0), (8, 9), (24, 1234)]:
        run = sfa.sparse_flash_attention_grad(p, d_out, out, smax, ssum, core_num=cores, seed=seed,
                                               deterministic=deterministic)
        for name_, a, b in zip(("dq", "dk", "dv", "dqr", "dkr"), first.outputs, run.outputs):
            assert (a is None and b is None) or np.array_equal(a, b), f"{name_}: {cores} cores, seed {seed}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("variant", sorted(VARIANT_CASES))
def test_grad_optional_inputs(variant: str, dtype: str) -> None:
    p = make_variant(variant, dtype, seed=17)
    d_out, out, smax, ssum = grad_inputs(p, seed=5)
    check(sfa.sparse_flash_attention_grad(p, d_out, out, smax, ssum, core_num=8), p, d_out, out, smax, ssum)


# ---------------------------------------------------------------- sinks
def run_sinks(p: sfa.SfaProblem, cores: int) -> None:
    d_out, out, smax, ssum = grad_inputs(p, seed=7)
    check(sfa.sparse_flash_attention_grad(p, d_out, out, smax, ssum, core_num=cores), p, d_out, out, smax, ssum)


@pytest.mark.parametrize("kind", ["random", "mixed"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["tnd_uneven", "bsnd_mode0_n2", "bsnd_n16", "tnd_chunks", "tnd_block16"])
def test_grad_with_sinks_matches_reference(name: str, dtype: str, kind: str) -> None:
    # mixed: -inf (d_sinks 0), +40 (P_sink about 1, dS about 0) and random sinks side by side.
    run_sinks(with_sinks(name, dtype, kind, seed=len(name) + 2), cores=8)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_grad_with_sinks_ascend_shape(dtype: str) -> None:
    run_sinks(with_sinks("mla_n16", dtype, "random", seed=6), cores=24)


@pytest.mark.parametrize("variant", sorted(VARIANT_CASES))
def test_grad_with_sinks_optional_inputs(variant: str) -> None:
    p = make_variant(variant, "bfloat16", seed=19)
    p.sinks = make_sinks("random", p.query.shape[-2], 19)
    run_sinks(p, cores=8)


@pytest.mark.parametrize("name", ["tnd_uneven", "bsnd_mode0_n2"])
def test_grad_minus_inf_sinks_are_no_sinks(name: str) -> None:
    _, p = make(name, "float16", seed=29)
    d_out, out, smax, ssum = grad_inputs(p, seed=2)
    plain = sfa.sparse_flash_attention_grad(p, d_out, out, smax, ssum, core_num=8)
    p.sinks = np.full(p.query.shape[-2], -np.inf, np.float32)
    sunk = sfa.sparse_flash_attention_grad(p, d_out, out, smax, ssum, core_num=8)
    check(sunk, p, d_out, out, smax, ssum)
    for a, b in zip(plain.outputs[:5], sunk.outputs[:5]):
        assert (a is None and b is None) or np.array_equal(a, b), "a -inf sink must give the bits of no sink"
    assert plain.outputs[5] is None and (sunk.outputs[5] == 0).all()


@pytest.mark.parametrize("name", ["tnd_uneven", "bsnd_mode0_n2", "tnd_chunks"])
def test_grad_d_sinks_same_bits_for_any_core_count_and_order(name: str) -> None:
    # d_sinks is one AIV's sum in token order of the rows' terms: no core count or order changes it.
    p = with_sinks(name, "bfloat16", "random", seed=37)
    d_out, out, smax, ssum = grad_inputs(p, seed=4)
    first = sfa.sparse_flash_attention_grad(p, d_out, out, smax, ssum, core_num=1)
    check(first, p, d_out, out, smax, ssum)
    for cores, seed in [(2, 0), (8, 0), (24, 0), (8, 9), (24, 1234)]:
        run = sfa.sparse_flash_attention_grad(p, d_out, out, smax, ssum, core_num=cores, seed=seed)
        for name_, a, b in zip(NAMES, first.outputs, run.outputs):
            assert (a is None and b is None) or np.array_equal(a, b), f"{name_}: {cores} cores, seed {seed}"
