"""ctypes bindings of the cla_gate harness (harness_cla_gate.cpp): both kernels on the twin's vector
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


def cla_gate_backward(dtype: str, grad: np.ndarray, og: np.ndarray, ol: np.ndarray, zg: np.ndarray,
                      zl: np.ndarray, core_num: int, ub_bytes: int | None = None, arch: int = ARCH_A2,
                      **attrs: object) -> KernelRun:
    """The kernel on ``core_num`` vector cores of ``arch``, its tiling budgeted ``ub_bytes``
    (default: the arch's platform UB); ``attrs`` the op's (table names, defaults the table's)."""
    t, n, d = grad.shape
    ins = [to_bits(a, dtype) for a in (grad, og, ol, zg, zl)]
    outs = [poisoned((t, n, d)), poisoned((t, n, d)), poisoned((t, n)), poisoned((t, n))]
    info = call("twin_cla_gate_backward", ctypes.c_int(DTYPE_CODES[dtype]),
                ctypes.byref(attr_args("cla_gate_backward", attrs)), I64(t), I64(n), I64(d),
                *(P(ptr(a)) for a in ins), *(P(ptr(a)) for a in outs), I64(core_num),
                I64(platform_ub(arch) if ub_bytes is None else ub_bytes), I64(arch))
    return KernelRun(tuple(from_bits(o, dtype) for o in outs), info)


def cla_gate_merge(dtype: str, og: np.ndarray, ol: np.ndarray, zg: np.ndarray, zl: np.ndarray, core_num: int,
                   ub_bytes: int | None = None, arch: int = ARCH_A2) -> KernelRun:
    t, n, d = og.shape
    ins = [to_bits(a, dtype) for a in (og, ol, zg, zl)]
    out = poisoned((t, n, d))
    info = call("twin_cla_gate_merge", ctypes.c_int(DTYPE_CODES[dtype]), I64(t), I64(n), I64(d),
                *(P(ptr(a)) for a in ins), P(ptr(out)), I64(core_num),
                I64(platform_ub(arch) if ub_bytes is None else ub_bytes), I64(arch))
    return KernelRun((from_bits(out, dtype),), info)


def cla_gate_schedule(kernel: str, t: int, n: int, d: int, core_num: int, ub_bytes: int = DEFAULT_UB) -> Schedule:
    code = ctypes.c_int({"merge": 0, "backward": 1}[kernel])
    return schedule("twin_cla_gate_schedule", (t, n, d), core_num, ub_bytes, (code,))
