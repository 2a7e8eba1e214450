"""sparse_flash_attention (forward) Ascend C kernel on the CPU twin (mixed AIC + AIV launch)
against the float64 reference: TND/BSND, rope or not, sparse_mode 0/3, block sizes 1/16/odd,
-1 slots at start/middle/end, empty rows, the Ascend head dims, fp16/bf16, 1/8/24 cores and
shuffled core order; with sinks (random, -inf = no sink, large positive). Outputs start as NaN and
the twin counts writes per byte."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from _sfa_data import Case, make_case
from _util import TOLERANCES, quantize, rel_l2
from ascendc_harness import twin_lib as twin
from ascendc_harness import twin_sfa as sfa

from ms_grad_ops import reference as ref

# name -> make_case kwargs (d and dr multiples of 16: 32-byte rows for the Ascend kernel).
CASES = {
    # uneven TND batches, an empty batch, S1 > S2 (first rows see nothing), -1 slots everywhere
    "tnd_uneven": dict(layout="TND", lens_q=[5, 0, 7, 3], lens_kv=[9, 4, 4, 12], n1=4, d=16, dr=16, k=6,
                       pattern="mixed"),
    # blocks of 16 with the diagonal block partly masked, S1 != S2, no rope
    "tnd_block16": dict(layout="TND", lens_q=[20, 9], lens_kv=[40, 33], n1=2, d=32, dr=None, k=3, bs=16),
    # BSND, no mask, N2 = 2 groups, odd block size, -1 at start/middle/end
    "bsnd_mode0_n2": dict(layout="BSND", batch=2, s1=6, s2=11, n1=4, n2=2, d=16, dr=16, k=5, bs=3, mode=0,
                          pattern="mixed"),
    # BSND, N1 = 16, no rope, -1 slots in the middle
    "bsnd_n16": dict(layout="BSND", batch=1, s1=12, s2=12, n1=16, d=32, dr=None, k=8, pattern="middle"),
    # N1 = 1, K larger than the visible keys, -1 slots first
    "tnd_n1": dict(layout="TND", lens_q=[4, 6], lens_kv=[4, 10], n1=1, d=16, dr=16, k=12, pattern="start"),
    # more visible keys than one kernel chunk (online softmax across chunks), block size 64
    "tnd_chunks": dict(layout="TND", lens_q=[2], lens_kv=[1400], n1=2, d=16, dr=16, k=21, bs=64, mode=0),
}
# The Ascend shapes: D = 512, Dr = 64, N1 in {1, 16, 64}, K = 1024 (block size 1), small S.
ASCEND_CASES = {
    "mla_n1": dict(layout="TND", lens_q=[3, 2], lens_kv=[7, 40], n1=1, d=512, dr=64, k=1024),
    "mla_n16": dict(layout="BSND", batch=1, s1=4, s2=24, n1=16, d=512, dr=64, k=1024, pattern="end"),
    "mla_n64": dict(layout="TND", lens_q=[2], lens_kv=[150], n1=64, d=512, dr=64, k=1024, mode=0),
}


# Optional inputs (issue 9): value absent (key is value), TND without lengths (one sequence),
# int64 lengths.
VARIANT_CASES = {
    "key_is_value": ("tnd_uneven", {}),
    "tnd_one_sequence": ("tnd_single", {}),
    "int64_lengths": ("tnd_block16", {}),
}
SINGLE = {"tnd_single": dict(layout="TND", lens_q=[9], lens_kv=[14], n1=4, d=32, dr=16, k=5, bs=2, pattern="mixed")}


def make_variant(variant: str, dtype: str, seed: int) -> sfa.SfaProblem:
    name, _ = VARIANT_CASES[variant]
    _, p = make(name, dtype, seed)
    if variant == "key_is_value":
        p.value = None
    elif variant == "tnd_one_sequence":
        p.lens_q = p.lens_kv = None
    else:
        p.lens_dtype = "int64"
    return p


def make(name: str, dtype: str, seed: int) -> tuple[Case, sfa.SfaProblem]:
    return make_spec({**CASES, **ASCEND_CASES, **SINGLE}[name], dtype, seed)


def make_spec(spec: dict, dtype: str, seed: int) -> tuple[Case, sfa.SfaProblem]:
    """The case of make_case kwargs ``spec`` and its problem in ``dtype``."""
    case = make_case(np.random.default_rng(seed), **spec)
    qz = {n: None if getattr(case, n) is None else quantize(getattr(case, n), dtype)
          for n in ("query", "key", "value", "query_rope", "key_rope")}
    lens_q = None if case.lens_q is None else np.asarray(case.lens_q)
    lens_kv = None if case.lens_kv is None else np.asarray(case.lens_kv)
    attrs = dict(scale_value=case.scale_value, sparse_block_size=case.sparse_block_size, layout=case.layout,
                 sparse_mode=case.sparse_mode)
    problem = sfa.SfaProblem(dtype, qz["query"], qz["key"], qz["value"], case.sparse_indices, qz["query_rope"],
                             qz["key_rope"], lens_q, lens_kv, attrs)
    return case, problem


def reference(p: sfa.SfaProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    value, lens_q, lens_kv = p.reference_args()
    return ref.sparse_flash_attention(p.query, p.key, value, p.sparse_indices, p.query_rope, p.key_rope,
                                      lens_q, lens_kv, p.sinks, **p.attrs)


def make_sinks(kind: str, n1: int, seed: int) -> np.ndarray:
    """float32 [N1] sinks: "random" N(0, 2^2) (around the scores); "minus_inf" all -inf (no sink);
    "large" +40 (above every score: the sink takes nearly all of each row); "mixed" cycles -inf,
    +40 and random values over the heads."""
    rnd = 2.0 * np.random.default_rng(seed).standard_normal(n1)
    fixed = {"minus_inf": np.full(n1, -np.inf), "large": np.full(n1, 40.0), "random": rnd,
             "mixed": np.choose(np.arange(n1) % 3, [np.full(n1, -np.inf), np.full(n1, 40.0), rnd])}
    return fixed[kind].astype(np.float32)


def sink_of_stats(p: sfa.SfaProblem, shape: tuple[int, ...]) -> np.ndarray:
    """The sink of the head of every statistics element ([N2, T1, G] or [B, N2, S1, G]); -inf without."""
    n2 = p.key.shape[-2]
    sinks = np.full(p.query.shape[-2], -np.inf) if p.sinks is None else p.sinks.astype(np.float64)
    per_group = sinks.reshape(n2, -1)
    return np.broadcast_to(per_group[:, None, :] if len(shape) == 3 else per_group[None, :, None, :], shape)


def check(run: twin.KernelRun, p: sfa.SfaProblem) -> None:
    info = run.info
    assert info.min_writes == 1 and info.max_writes == 1, "every output byte written exactly once"
    assert info.ub_peak_bytes == info.tiling_ub_bytes <= twin.ub_bytes_of(p.arch, mixed=True), "UB = the tiling's plan"
    out, smax, ssum = run.outputs
    want_out, want_max, want_sum = reference(p)
    tol = TOLERANCES["attention"][p.dtype]
    assert np.isfinite(out).all()
    err = rel_l2(out, want_out)
    assert err <= tol, f"out: relative L2 error {err:.3g} > {tol:g}"
    smax = smax.reshape(want_max.shape)
    ssum = ssum.reshape(want_sum.shape)
    empty = reference(replace(p, sinks=None))[2] == 0  # rows without a visible key
    sink = sink_of_stats(p, want_max.shape)
    lone = empty & (sink > -np.inf)  # only the sink: (sink, 1); no sink (or -inf): (0, 0)
    assert (smax[lone] == sink[lone]).all() and (ssum[lone] == 1).all(), "rows with only the sink: sink / 1"
    assert (smax[empty & ~lone] == 0).all() and (ssum[empty & ~lone] == 0).all(), "rows without a visible key: 0 / 0"
    zero_rows = np.all(want_out == 0, axis=-1)  # exactly the heads of rows without a visible key
    assert zero_rows.sum() == empty.sum() and (out[zero_rows] == 0).all(), "empty rows give out = 0"
    assert np.allclose(smax[~empty], want_max[~empty], rtol=1e-5, atol=1e-5), "softmax_max"
    assert rel_l2(ssum[~empty], want_sum[~empty]) <= 1e-5, "softmax_sum"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_matches_reference(name: str, dtype: str) -> None:
    _, p = make(name, dtype, seed=len(name))
    check(sfa.sparse_flash_attention(p, core_num=8), p)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(ASCEND_CASES))
def test_forward_ascend_shapes(name: str, dtype: str) -> None:
    _, p = make(name, dtype, seed=3)
    check(sfa.sparse_flash_attention(p, core_num=24), p)


@pytest.mark.parametrize("name", ["tnd_uneven", "bsnd_mode0_n2", "tnd_chunks"])
def test_forward_same_bits_for_any_core_count_and_order(name: str) -> None:
    # Each query row belongs to one AIV, so neither the split nor the order may change a bit.
    _, p = make(name, "bfloat16", seed=11)
    first = sfa.sparse_flash_attention(p, core_num=1)
    check(first, p)
    for cores, seed in [(8, 0), (24, 0), (8, 5), (24, 77)]:
        run = sfa.sparse_flash_attention(p, core_num=cores, seed=seed)
        for a, b in zip(first.outputs, run.outputs):
            assert np.array_equal(a, b, equal_nan=False), f"{cores} cores, seed {seed}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("variant", sorted(VARIANT_CASES))
def test_forward_optional_inputs(variant: str, dtype: str) -> None:
    p = make_variant(variant, dtype, seed=13)
    check(sfa.sparse_flash_attention(p, core_num=8), p)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_forward_nan_propagates(dtype: str) -> None:
    # NaN in one query head and in one key: out and both statistics are NaN exactly where the
    # float64 reference has NaN (a max that drops NaN would give a finite softmax_max).
    _, p = make("tnd_uneven", dtype, seed=4)
    p.query[1, 0, 3] = np.nan
    p.key[20, 0, 2] = np.nan
    run = sfa.sparse_flash_attention(p, core_num=8)
    want = reference(p)
    for what, got, ref_val in zip(("out", "softmax_max", "softmax_sum"), run.outputs, want):
        got = got.reshape(ref_val.shape)
        assert np.isnan(ref_val).any() and (np.isnan(got) == np.isnan(ref_val)).all(), f"{what}: NaN pattern"
        ok = ~np.isnan(ref_val)
        assert rel_l2(got[ok], ref_val[ok]) <= TOLERANCES["attention"][dtype], what


# ---------------------------------------------------------------- sinks
SINK_CASES = ("tnd_uneven", "bsnd_mode0_n2", "bsnd_n16", "tnd_chunks")


def with_sinks(name: str, dtype: str, kind: str, seed: int) -> sfa.SfaProblem:
    _, p = make(name, dtype, seed)
    p.sinks = make_sinks(kind, p.query.shape[-2], seed)
    return p


@pytest.mark.parametrize("kind", ["random", "mixed"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", SINK_CASES)
def test_forward_with_sinks_matches_reference(name: str, dtype: str, kind: str) -> None:
    # Empty rows (tnd_uneven: an empty batch, rows that see nothing) give (sink, 1) and out = 0.
    p = with_sinks(name, dtype, kind, seed=len(name) + 1)
    check(sfa.sparse_flash_attention(p, core_num=8), p)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_forward_with_sinks_ascend_shape(dtype: str) -> None:
    p = with_sinks("mla_n16", dtype, "mixed", seed=5)
    check(sfa.sparse_flash_attention(p, core_num=24), p)


@pytest.mark.parametrize("name", ["tnd_uneven", "tnd_chunks", "key_is_value"])
def test_forward_large_sinks_take_the_rows(name: str) -> None:
    # A sink above every score is each row's max, and its probability is about 1.
    p = make_variant(name, "bfloat16", 9) if name in VARIANT_CASES else make(name, "bfloat16", 9)[1]
    p.sinks = make_sinks("large", p.query.shape[-2], 9)
    run = sfa.sparse_flash_attention(p, core_num=8)
    check(run, p)
    assert (run.outputs[1] == 40.0).all() and np.allclose(run.outputs[2], 1.0, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["tnd_uneven", "bsnd_mode0_n2", "tnd_chunks"])
def test_forward_minus_inf_sinks_are_no_sinks(name: str, dtype: str) -> None:
    _, p = make(name, dtype, seed=23)
    plain = sfa.sparse_flash_attention(p, core_num=8)
    p.sinks = make_sinks("minus_inf", p.query.shape[-2], 0)
    sunk = sfa.sparse_flash_attention(p, core_num=8)
    check(sunk, p)
    for a, b in zip(plain.outputs, sunk.outputs):
        assert np.array_equal(a, b), "a -inf sink must give the bits of no sink"


@pytest.mark.parametrize("name", ["tnd_uneven", "bsnd_mode0_n2"])
def test_forward_with_sinks_same_bits_for_any_core_count_and_order(name: str) -> None:
    p = with_sinks(name, "float16", "mixed", seed=31)
    first = sfa.sparse_flash_attention(p, core_num=1)
    check(first, p)
    for cores, seed in [(8, 0), (24, 3)]:
        run = sfa.sparse_flash_attention(p, core_num=cores, seed=seed)
        for a, b in zip(first.outputs, run.outputs):
            assert np.array_equal(a, b), f"{cores} cores, seed {seed}"
