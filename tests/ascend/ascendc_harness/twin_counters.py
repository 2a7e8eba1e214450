"""The twin's work counters (ascendc/twin/twin_context.h, ``Counter``): what each core of the last
launch on this thread did, for the cost estimate of ``scripts/bench/ascend_roofline.py``.

Per core: cube multiply-adds by operand dtype, Matmul calls, vector elements and calls, GM bytes
read / written (atomic part too) and scalar GM accesses, and the waits the twin models (queue
DeQue, WaitFlag, PipeBarrier, cross-core flags, SyncAll, Matmul requests). Units: the comment of
``Counter`` in twin_context.h.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import numpy as np

from .twin_lib import ERR_LEN, I64, P, lib, ptr

KINDS = ("vector", "aic", "aiv")


@functools.cache
def counter_names() -> tuple[str, ...]:
    buf = ctypes.create_string_buffer(ERR_LEN)
    lib().twin_counter_names(buf, I64(ERR_LEN))
    return tuple(buf.value.decode().split(","))


@dataclass
class LaunchCounters:
    """One launch's counters: ``values[core, counter]`` (int64), each core's kind ("vector", "aic",
    "aiv") and GetBlockIdx()."""

    values: np.ndarray
    kinds: tuple[str, ...]
    block_idx: np.ndarray

    def per_core(self, name: str) -> np.ndarray:
        return self.values[:, counter_names().index(name)]

    def total(self, name: str, kind: str | None = None) -> int:
        """The sum of counter ``name`` over the launch's cores (of ``kind`` only, if given)."""
        col = self.per_core(name)
        if kind is None:
            return int(col.sum())
        return int(sum(v for v, k in zip(col, self.kinds, strict=True) if k == kind))

    def totals(self) -> dict[str, int]:
        return {n: int(v) for n, v in zip(counter_names(), self.values.sum(axis=0), strict=True)}


def last_counters() -> LaunchCounters:
    """The counters of the last twin launch run on this thread (every kernel entry point launches
    once)."""
    fn = lib().twin_last_counters
    fn.restype = ctypes.c_int64
    cols = len(counter_names())
    rows = 256
    while True:
        values = np.zeros((rows, cols), np.int64)
        kinds = np.zeros(rows, np.int64)
        idx = np.zeros(rows, np.int64)
        n = int(fn(P(ptr(values)), P(ptr(kinds)), P(ptr(idx)), I64(rows)))
        if n <= rows:
            return LaunchCounters(values[:n].copy(), tuple(KINDS[k] for k in kinds[:n]), idx[:n].copy())
        rows = n
