"""Invariants of the pure tiling functions (ascendc/*/<op>_tiling.h), for the core counts of
the Ascend parts we target (1, 8, 20, 40, 48) and many shapes:

* every row (token for rope, (token, head) pair for cla_gate) belongs to exactly one core:
  the per-core ranges are contiguous, disjoint and cover [0, rows);
* balance: core shares differ by at most one row;
* no idle core is launched (cores used = min(cores, rows));
* a tile holds at least one row and no more than a core's share, and the UB footprint of the
  chosen tile never exceeds the UB size (the kernel tests check the twin measures exactly it).
"""
from __future__ import annotations

import itertools

import pytest
from ascendc_harness import twin_cla_gate, twin_rope
from ascendc_harness import twin_lib as twin

CORE_COUNTS = (1, 8, 20, 40, 48)
UB = twin.DEFAULT_UB


def check_schedule(s: twin.Schedule, rows: int, cores: int, ub: int = UB) -> None:
    assert s.used_cores == max(1, min(cores, rows))
    assert s.starts[0] == 0
    assert (s.starts[1:] == s.starts[:-1] + s.counts[:-1]).all(), "core ranges must be contiguous"
    assert s.counts.sum() == rows, "every row exactly once"
    assert s.counts.max() - s.counts.min() <= 1, "core shares differ by more than one row"
    assert 1 <= s.tile_rows <= max(1, int(s.counts.max()))
    assert 0 < s.ub_bytes <= ub


@pytest.mark.parametrize("cores", CORE_COUNTS)
@pytest.mark.parametrize("kernel", ["merge", "backward"])
def test_cla_gate_tiling_invariants(kernel: str, cores: int) -> None:
    for t, n, d in itertools.product((1, 2, 7, 37, 128, 1000, 4096), (1, 3, 16, 128), (128, 256)):
        check_schedule(twin_cla_gate.cla_gate_schedule(kernel, t, n, d, cores), t * n, cores)


@pytest.mark.parametrize("cores", CORE_COUNTS)
def test_rope_tiling_invariants(cores: int) -> None:
    for tokens, hidden in itertools.product((1, 3, 17, 100, 2049, 40000), (128, 640, 1024, 5120)):
        check_schedule(twin_rope.rope_schedule(tokens, hidden, 4096, 3, cores), tokens, cores)


def test_zero_rows_launch_one_idle_core() -> None:
    s = twin_cla_gate.cla_gate_schedule("backward", 0, 4, 128, 8)
    assert s.used_cores == 1 and s.counts.tolist() == [0]
    s = twin_rope.rope_schedule(0, 256, 16, 1, 8)
    assert s.used_cores == 1 and s.counts.tolist() == [0]


@pytest.mark.parametrize("kernel", ["merge", "backward"])
def test_cla_gate_tile_grows_with_ub(kernel: str) -> None:
    tiles = [twin_cla_gate.cla_gate_schedule(kernel, 4096, 16, 256, 1, ub).tile_rows
             for ub in (64 * 1024, UB, 256 * 1024)]
    assert tiles[0] < tiles[1] < tiles[2]
    for ub in (64 * 1024, 256 * 1024):
        check_schedule(twin_cla_gate.cla_gate_schedule(kernel, 4096, 16, 256, 1, ub), 4096 * 16, 1, ub)


def test_rope_hidden_5120_fits_with_double_buffering() -> None:
    s = twin_rope.rope_schedule(64, 5120, 64, 1, 1)
    assert s.tile_rows >= 1 and s.ub_bytes <= UB


@pytest.mark.parametrize("args,match", [
    (("backward", 4, 4, 100), "multiple of 16"),
    (("merge", 4, 0, 128), "N must be positive"),
])
def test_cla_gate_tiling_rejects(args: tuple, match: str) -> None:
    with pytest.raises(twin.TilingError, match=match):
        twin_cla_gate.cla_gate_schedule(*args, 8)


@pytest.mark.parametrize("args,match", [
    ((4, 200, 16, 1), "multiple of 128"),
    ((4, 128, 0, 1), "at least one row"),
    ((4, 128 * 200, 16, 1), "does not fit"),
])
def test_rope_tiling_rejects(args: tuple, match: str) -> None:
    with pytest.raises(twin.TilingError, match=match):
        twin_rope.rope_schedule(*args, 8)


@pytest.mark.parametrize("schedule", [lambda: twin_cla_gate.cla_gate_schedule("merge", 4, 4, 128, 0),
                                      lambda: twin_rope.rope_schedule(4, 128, 4, 1, 0)])
def test_tiling_rejects_zero_cores(schedule: object) -> None:
    with pytest.raises(twin.TilingError, match="core count"):
        schedule()
