"""ctypes bindings of the rope harness (harness_rope.cpp): rope and rope_grad on the twin's vector
launch, and their pure tiling's row split."""
from __future__ import annotations

import ctypes

import numpy as np

from .twin_lib import (
    ARCH_A2,
    DEFAULT_UB,
    DTYPE_CODES,
    I64,
    KernelRun,
    P,
    Schedule,
    attr_args,
    call,
    from_bits,
    platform_ub,
    poisoned,
    ptr,
    schedule,
    to_bits,
)


def rope_family(variant: str, dtype: str, x1: np.ndarray, x2: np.ndarray, cos: np.ndarray, sin: np.ndarray,
                q_seq_len: np.ndarray, core_num: int, ub_bytes: int | None = None, arch: int = ARCH_A2) -> KernelRun:
    """``variant``: "rope" (the forward), or a ``mode`` of rope_grad ("atb", "vjp": the table's)."""
    n_tokens, hidden = x1.shape
    max_seq = cos.shape[0]
    lens = np.ascontiguousarray(q_seq_len, np.int32)
    ins = [to_bits(a, dtype) for a in (x1, x2, cos, sin)]
    outs = [poisoned((n_tokens, hidden)), poisoned((n_tokens, hidden))]
    grad = None if variant == "rope" else ctypes.byref(attr_args("rope_grad", {"mode": variant}))
    info = call("twin_rope_family", grad, ctypes.c_int(DTYPE_CODES[dtype]), I64(n_tokens), I64(hidden),
                I64(max_seq), I64(lens.size), *(P(ptr(a)) for a in ins), P(ptr(lens)), *(P(ptr(a)) for a in outs),
                I64(core_num), I64(platform_ub(arch) if ub_bytes is None else ub_bytes), I64(arch))
    return KernelRun(tuple(from_bits(o, dtype) for o in outs), info)


def rope_schedule(n_tokens: int, hidden: int, max_seq: int, batch: int, core_num: int,
                  ub_bytes: int = DEFAULT_UB) -> Schedule:
    return schedule("twin_rope_schedule", (n_tokens, hidden, max_seq, batch), core_num, ub_bytes)
