"""rope (forward) and rope_grad (modes "atb" and "vjp") Ascend C kernels, run on the CPU twin,
against the float64 reference: fp16 and bf16, hidden 128..5120, single-token sequences, one
head, T=1, sequence boundaries inside tiles, several core counts and UB sizes.

Outputs start as NaN (poison) and the twin counts writes per byte: a token a core forgot or
wrote twice fails even when its value happens to look right.
"""
from __future__ import annotations

import numpy as np
import pytest
from _util import TOLERANCES, rel_l2
from ascendc_harness import twin_lib as twin
from ascendc_harness import twin_rope

from ms_grad_ops.reference import rope, rope_grad

DTYPES = ("float16", "bfloat16")
VARIANTS = ("rope", "atb", "vjp")
# (q_seq_len, hidden, cores)
CASES = [
    ([2, 1, 4, 4], 128, 8),           # the seed's example
    ([1], 128, 1),                    # T = 1, one head, one core
    ([1], 128, 48),                   # T = 1 on many cores: one core used
    ([1] * 9, 640, 20),               # single-token sequences
    ([37, 5, 1], 5120, 48),           # the largest hidden the seed allows
    ([300], 256, 1),                  # many tiles on one core
    ([7, 0, 12, 3], 384, 40),         # an empty sequence in the middle
    ([1] * 50 + [64], 1024, 8),       # many sequence boundaries inside one tile
]


def quantized(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return twin.from_bits(twin.to_bits(rng.standard_normal(shape), dtype), dtype)


def inputs(lens: list[int], hidden: int, dtype: str, seed: int, spare_rows: int = 3) -> list[np.ndarray]:
    """x1, x2 [n_tokens, hidden]; cos, sin [max(lens) + spare_rows, 128]; all rounded to dtype."""
    rng = np.random.default_rng(seed)
    n = sum(lens)
    angles = rng.uniform(0.0, 2 * np.pi, (max(lens) + spare_rows, 128))
    cos = twin.from_bits(twin.to_bits(np.cos(angles), dtype), dtype)
    sin = twin.from_bits(twin.to_bits(np.sin(angles), dtype), dtype)
    return [quantized(rng, (n, hidden), dtype), quantized(rng, (n, hidden), dtype), cos, sin]


def reference(variant: str, x1: np.ndarray, x2: np.ndarray, cos: np.ndarray, sin: np.ndarray,
              lens: list[int]) -> tuple[np.ndarray, np.ndarray]:
    if variant == "rope":
        return rope(x1, x2, cos, sin, lens)
    return rope_grad(x1, x2, cos, sin, lens, mode=variant)


def check_bookkeeping(run: twin.KernelRun, ub: int = twin.DEFAULT_UB) -> None:
    # Atlas A2/A3 only (ms_grad_ops/_specs.py): the twin runs rope on NPU arch 2201.
    info = run.info
    assert info.min_writes == 1 and info.max_writes == 1, "every output byte written exactly once"
    assert info.ub_peak_bytes == info.tiling_ub_bytes <= ub, "the kernel uses exactly the UB its tiling planned"


def check_values(run: twin.KernelRun, refs: tuple[np.ndarray, ...], dtype: str) -> None:
    tol = TOLERANCES["elementwise"][dtype]
    for name, got, ref in zip(("q", "k"), run.outputs, refs):
        assert np.isfinite(got).all(), f"{name}: non-finite values"
        err = rel_l2(got, ref)
        assert err <= tol, f"{name}: relative L2 error {err:.3g} > {tol:g} ({dtype})"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("lens,hidden,cores", CASES)
def test_kernel_matches_reference(lens: list[int], hidden: int, cores: int, variant: str, dtype: str) -> None:
    x1, x2, cos, sin = inputs(lens, hidden, dtype, seed=hidden + len(lens))
    run = twin_rope.rope_family(variant, dtype, x1, x2, cos, sin, np.array(lens), core_num=cores)
    assert run.info.blocks == min(cores, sum(lens))
    check_bookkeeping(run)
    check_values(run, reference(variant, x1, x2, cos, sin, lens), dtype)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("ub_kib", [16, 64, 192])
def test_unified_buffer_size_changes_tiles_not_results(ub_kib: int, variant: str) -> None:
    lens = [5, 60, 1, 33]
    x1, x2, cos, sin = inputs(lens, 512, "bfloat16", seed=3)
    ub = ub_kib * 1024
    run = twin_rope.rope_family(variant, "bfloat16", x1, x2, cos, sin, np.array(lens), core_num=3, ub_bytes=ub)
    check_bookkeeping(run, ub)
    check_values(run, reference(variant, x1, x2, cos, sin, lens), "bfloat16")


def test_tiling_larger_than_the_ub_is_a_twin_error() -> None:
    # A tiling budgeted 256 KiB fills more than Atlas A2/A3's 192 KiB UB: the launch names the
    # rule, the buffer and the sizes.
    lens = [5, 60, 1, 33]
    x1, x2, cos, sin = inputs(lens, 512, "bfloat16", seed=3)
    with pytest.raises(twin.TwinRuleError, match=r"unified buffer overflow on NPU arch 2201.*TBuf<VECCALC>"):
        twin_rope.rope_family("rope", "bfloat16", x1, x2, cos, sin, np.array(lens), core_num=3, ub_bytes=256 * 1024)


def test_atb_differs_from_vjp() -> None:
    # Guards against the two modes sharing a code path by mistake (they agree only when the two
    # halves of every head of g are equal).
    lens = [4, 4]
    x1, x2, cos, sin = inputs(lens, 256, "float16", seed=9)
    atb = twin_rope.rope_family("atb", "float16", x1, x2, cos, sin, np.array(lens), core_num=2).outputs[0]
    vjp = twin_rope.rope_family("vjp", "float16", x1, x2, cos, sin, np.array(lens), core_num=2).outputs[0]
    assert rel_l2(atb, vjp) > 0.1


@pytest.mark.parametrize("variant", VARIANTS)
def test_bad_lengths_never_read_out_of_bounds(variant: str) -> None:
    # The host validates q_seq_len; the kernel must still stay inside cos/sin (the twin throws on
    # any GM access outside an allocation) and write every output: rows of a sequence longer than
    # cos/sin and tokens beyond sum(q_seq_len) come out as zeros.
    lens = [5, 9]  # the second sequence is longer than the 6 cos/sin rows
    x1, x2, cos, sin = inputs([5, 6, 2], 256, "float16", seed=4, spare_rows=0)  # 13 tokens, 6 rows
    run = twin_rope.rope_family(variant, "float16", x1, x2, cos, sin, np.array(lens), core_num=4)
    check_bookkeeping(run)
    valid = np.r_[0:5, 5:11]
    refs = reference(variant, x1[valid], x2[valid], cos, sin, [5, 6])
    for got, ref in zip(run.outputs, refs):
        assert rel_l2(got[valid], ref) <= TOLERANCES["elementwise"]["float16"]
        assert (got[11:] == 0).all()
    # Lengths summing to fewer tokens than there are: the extra tokens are zeros.
    run = twin_rope.rope_family(variant, "float16", x1, x2, cos, sin, np.array([4]), core_num=4)
    check_bookkeeping(run)
    refs = reference(variant, x1[:4], x2[:4], cos, sin, [4])
    for got, ref in zip(run.outputs, refs):
        assert rel_l2(got[:4], ref) <= TOLERANCES["elementwise"]["float16"]
        assert (got[4:] == 0).all()


def test_hidden_not_multiple_of_128_is_a_tiling_error() -> None:
    x1, x2, cos, sin = inputs([3], 128, "float16", seed=1)
    with pytest.raises(twin.TilingError, match="multiple of 128"):
        twin_rope.rope_family("atb", "float16", x1[:, :100].copy(), x2[:, :100].copy(), cos, sin, np.array([3]), 8)
