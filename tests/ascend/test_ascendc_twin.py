"""The CPU twin of the Ascend C API: every rule it enforces fires on a bad snippet (on the NPU
arch the snippet is written for), clean code passes, capacities and arch-specific rules follow
the launch's arch, the launcher numbers blocks, and Cast rounds exactly as each RoundMode says."""
from __future__ import annotations

import numpy as np
import pytest
from ascendc_harness import twin_lib as twin

# Each broken snippet in harness_twin.cpp with the rule it must trip (checked against the
# message the C++ side declares, so both lists are kept in step).
EXPECTED_RULES = {
    "alloc_exhausted": "buffers are all in use",
    "cast_unsupported_mode": "not supported",
    "cast_widening_in_place": "of the later repeat",
    "count_zero_on_3510": "is not guaranteed to be a NOP",
    "datacopy_gm_misaligned": "is not aligned to its 2-byte elements",
    "datacopy_too_many_blocks": "one DataCopy moves at most 65535",
    "datacopypad_block_count": "must be in [1, 4095]",
    "datacopypad_padding_too_wide": "exceed 32",
    "datacopypad_ub_stride_3510": "exceeds 65535",
    "initbuffer_num_out_of_range": "num must be in [1, 64]",
    "initbuffer_zero_len": "len must be > 0",
    "tbuf_get_partial_block": "positive multiple of 32",
    "too_many_pipe_buffers": "allows at most 64",
    "too_many_queue_buffers_3510": "buffer ids, one per TQue buffer",
    "too_many_queue_buffers_per_position": "event ids per position",
    "ub_overflow_3510": "unified buffer overflow",
    "vector_overlap_later_repeat": "of the later repeat",
    "vector_partial_overlap": "partially overlaps the source",
    "copy_in_without_queue_sync": "MTE2 (GM->UB copy) -> V",
    "copy_out_without_queue_sync": "V (vector op) -> MTE3",
    "datacopy_partial_block": "is not a positive multiple of 32",
    "datacopy_unaligned_ub": "is not 32-byte aligned",
    "datacopypad_unaligned_ub": "is not 32-byte aligned",
    "deque_empty": "DeQue on an empty",
    "double_free": "not allocated",
    "enque_beyond_depth": "beyond the queue depth",
    "free_while_queued": "still in the queue",
    "gm_out_of_bounds": "outside every allocated GM buffer",
    "reduce_sum_small_work": "ReduceSum (workspace)",
    "scalar_read_without_sync": "V (vector op) -> S",
    "setflag_never_waited": "never waited",
    "setflag_twice": "set twice",
    "tensor_not_freed": "never freed",
    "two_pipes": "a second TPipe",
    "ub_overflow": "unified buffer overflow",
    "use_after_free": "used after FreeTensor",
    "vector_after_scalar_write_without_sync": "S (scalar SetValue) -> V",
    "vector_count_negative": "is negative",
    "vector_count_too_large": "exceeds",
    "vector_unaligned": "is not 32-byte aligned",
    "waitflag_without_setflag": "without a preceding SetFlag",
}
CLEAN = ("clean_pipeline", "clean_scalar_sync", "clean_datacopypad_padding", "clean_count_zero_on_2201",
         "clean_reduce_to_unaligned_element")


def test_snippet_list_matches() -> None:
    assert sorted(twin.snippet_names()) == sorted([*EXPECTED_RULES, *CLEAN])


@pytest.mark.parametrize("name", sorted(EXPECTED_RULES))
def test_rule_fires(name: str) -> None:
    status, declared, message = twin.run_snippet(name)
    assert status == 1, f"{name}: expected a twin rule violation, got status {status}: {message}"
    assert declared == EXPECTED_RULES[name]
    assert message.startswith("block 0: ") and "Ascend C rule violated" in message
    assert EXPECTED_RULES[name] in message, message


@pytest.mark.parametrize("name", CLEAN)
def test_clean_snippet_passes(name: str) -> None:
    status, _, message = twin.run_snippet(name)
    assert status == 0, message


def test_capacities_follow_the_arch() -> None:
    # 200 KiB of queue buffers: over 2201's 192 KiB UB, within 3510's 248 KiB; 250 KiB is over both.
    assert twin.ub_bytes_of(twin.ARCH_A2) == 192 * 1024 and twin.ub_bytes_of(twin.ARCH_950) == 248 * 1024
    assert twin.ub_bytes_of(twin.ARCH_A2, mixed=True) == 192 * 1024 - 256
    assert twin.run_snippet("ub_overflow", twin.ARCH_A2)[0] == 1
    status, _, message = twin.run_snippet("ub_overflow", twin.ARCH_950)
    assert status == 0, message
    assert twin.run_snippet("ub_overflow_3510", twin.ARCH_A2)[0] == 1


@pytest.mark.parametrize("name,arch", [("count_zero_on_3510", twin.ARCH_A2),
                                       ("too_many_queue_buffers_per_position", twin.ARCH_950)])
def test_arch_specific_rules_hold_on_their_arch_only(name: str, arch: int) -> None:
    # Count 0 is a documented NOP on 2201; 3510 has buffer ids instead of 8 event ids per position.
    status, _, message = twin.run_snippet(name, arch)
    assert status == 0, message


@pytest.mark.parametrize("blocks", [1, 3, 48])
def test_launcher_numbers_blocks(blocks: int) -> None:
    ids = twin.block_ids(blocks)
    assert ids[:, 0].tolist() == list(range(blocks))
    assert (ids[:, 1] == blocks).all()


def _grid(dtype: str) -> np.ndarray:
    """Every finite non-negative value of the 16-bit format, ascending, as float64."""
    bits = np.arange(0, 0x7C00 if dtype == "float16" else 0x7F80, dtype=np.uint16)
    return twin.from_bits(bits, dtype)


def _expected(x: np.ndarray, dtype: str, mode: str) -> np.ndarray:
    """Round |x| to the format by definition: the two neighbours on the grid, chosen per mode."""
    grid = _grid(dtype)
    a = np.abs(x.astype(np.float64))
    hi_idx = np.searchsorted(grid, a, side="left")
    lo_idx = np.where(grid[hi_idx] == a, hi_idx, hi_idx - 1)
    lo, hi = grid[lo_idx], grid[hi_idx]
    exact = lo == a
    neg = x < 0
    if mode in ("CAST_RINT", "CAST_NONE"):
        tie = (a - lo) == (hi - a)
        pick_hi = ((a - lo) > (hi - a)) | (tie & (lo_idx % 2 == 1))
    elif mode == "CAST_ROUND":
        pick_hi = (a - lo) >= (hi - a)
    elif mode == "CAST_TRUNC":
        pick_hi = np.zeros_like(a, bool)
    elif mode == "CAST_FLOOR":
        pick_hi = neg
    elif mode == "CAST_CEIL":
        pick_hi = ~neg
    else:  # CAST_ODD: the neighbour with an odd last bit
        pick_hi = hi_idx % 2 == 1
    mag = np.where(exact, lo, np.where(pick_hi, hi, lo))
    return np.where(neg, -mag, mag)


def _samples(dtype: str) -> np.ndarray:
    """Random values over the whole range, exact grid points and exact midpoints (ties)."""
    rng = np.random.default_rng(7)
    grid = _grid(dtype)
    top = grid[-2] if dtype == "float16" else 1e38  # below the largest finite value
    pick = rng.integers(0, grid.size - 2, 3000)
    mids = (grid[pick] + grid[pick + 1]) / 2
    mids = mids[mids.astype(np.float32) == mids]  # only ties float32 can hold
    vals = np.concatenate([
        rng.uniform(-1, 1, 2000) * 10.0 ** rng.integers(-9, 5, 2000),
        grid[pick], mids, rng.uniform(-top, top, 500), [0.0, 1.0, -1.0],
    ]).astype(np.float32)
    return np.concatenate([vals, -vals])


CAST_MODES = {
    "float16": ("CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC", "CAST_ODD"),
    "bfloat16": ("CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC"),
}


@pytest.mark.parametrize("dtype,mode", [(d, m) for d, modes in CAST_MODES.items() for m in modes])
def test_cast_round_modes(dtype: str, mode: str) -> None:
    x = _samples(dtype)
    got = twin.from_bits(twin.cast_from_float(x, dtype, mode), dtype)
    want = _expected(x, dtype, mode)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{dtype} {mode}: {x[bad[:5]]} -> {got[bad[:5]]}, want {want[bad[:5]]}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cast_rint_matches_numpy_rounding(dtype: str) -> None:
    x = _samples(dtype)
    assert (twin.cast_from_float(x, dtype, "CAST_RINT") == twin.to_bits(x, dtype)).all()


def test_cast_special_values() -> None:
    x = np.array([np.inf, -np.inf, np.nan, 1e6, -1e6, 65520.0, 65519.0], np.float32)
    h = twin.from_bits(twin.cast_from_float(x, "float16", "CAST_RINT"), "float16")
    assert h[0] == np.inf and h[1] == -np.inf and np.isnan(h[2])
    assert h[3] == np.inf and h[4] == -np.inf and h[5] == np.inf and h[6] == 65504.0
    trunc = twin.from_bits(twin.cast_from_float(x[3:5], "float16", "CAST_TRUNC"), "float16")
    assert trunc.tolist() == [65504.0, -65504.0]  # directed toward zero: saturate, no inf
    b = twin.from_bits(twin.cast_from_float(x[:3], "bfloat16", "CAST_RINT"), "bfloat16")
    assert b[0] == np.inf and b[1] == -np.inf and np.isnan(b[2])
