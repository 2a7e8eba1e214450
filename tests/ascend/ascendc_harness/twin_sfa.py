"""ctypes bindings of the sparse_flash_attention harness (harness_sfa.cpp): the forward and grad
kernels on the twin's mixed launch, and their pure tiling."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import numpy as np

from ms_grad_ops._specs import OP_SPECS

from .twin_args import SfaArgs
from .twin_lib import (
    ARCH_A2,
    DEFAULT_UB,
    DTYPE_CODES,
    NAN16,
    KernelRun,
    P,
    attr_args,
    call,
    from_bits,
    mixed_schedule,
    platform_ub,
    poisoned,
    ptr,
    ptr_or_none,
    to_bits,
)


@dataclass
class SfaProblem:
    """Inputs of one sparse_flash_attention(_grad) call in the layouts of docs/contract.md section 0.2 (float arrays
    already rounded to ``dtype``); lengths cumulative (TND; None = one sequence) or per batch (BSND;
    either may be None);
    value None = key is value; sinks float32 [N1] or None (absent). ``attrs``: sparse_flash_attention's
    attributes by their table names (the grad's others are given per call); the table's defaults for
    those not given."""

    dtype: str
    query: np.ndarray
    key: np.ndarray
    value: np.ndarray | None
    sparse_indices: np.ndarray
    query_rope: np.ndarray | None
    key_rope: np.ndarray | None
    lens_q: np.ndarray | None
    lens_kv: np.ndarray | None
    attrs: dict[str, object] = field(default_factory=dict)
    lens_hidden: bool = False  # TND lengths unknown to the host tiling (no value-depend input)
    lens_dtype: str = "int32"
    sinks: np.ndarray | None = None
    arch: int = ARCH_A2  # the NPU arch of the launch; the tiling takes that SoC's platform

    @property
    def layout(self) -> str:
        return self.attrs.get("layout", OP_SPECS["sparse_flash_attention"].attr("layout").default)

    def args(self, core_num: int, seed: int = 0, ub_bytes: int | None = None) -> SfaArgs:
        """The shape and launch; ``ub_bytes`` the tiling's UB budget (None: the arch's platform UB)."""
        q, k = self.query, self.key
        dr = 0 if self.query_rope is None else self.query_rope.shape[-1]
        if self.layout == "BSND":
            b, s1, n1, d = q.shape
            s2, n2 = k.shape[1], k.shape[2]
            t1, t2 = b * s1, b * s2
        else:
            t1, n1, d = q.shape
            t2, n2 = k.shape[0], k.shape[1]
            b, s1, s2 = 0 if self.lens_q is None else len(self.lens_q), 0, 0
        kslots = self.sparse_indices.shape[-1]
        ub = platform_ub(self.arch) if ub_bytes is None else ub_bytes
        return SfaArgs(b, s1, s2, t1, t2, n1, n2, d, dr, kslots, core_num, ub, seed, self.arch,
                       int(self.value is None), int(self.lens_dtype == "int64"))

    def reference_args(self) -> tuple:
        """(value, lens_q, lens_kv) as the float64 reference takes them: key for an absent value,
        one sequence [T1] / [T2] for TND without lengths."""
        value = self.key if self.value is None else self.value
        if self.layout == "TND" and self.lens_q is None:
            return value, [self.query.shape[0]], [self.key.shape[0]]
        return value, self.lens_q, self.lens_kv

    def sinks_f32(self) -> np.ndarray | None:
        return None if self.sinks is None else np.ascontiguousarray(self.sinks, np.float32)

    def lens_ptrs(self) -> tuple[object, object, list[np.ndarray]]:
        """(query, key) lengths as ctypes pointers (None when absent), and the arrays to keep alive."""
        if self.lens_hidden:
            return None, None, []
        arrays = [None if x is None else np.ascontiguousarray(x, self.lens_dtype) for x in (self.lens_q, self.lens_kv)]
        return ptr_or_none(arrays[0]), ptr_or_none(arrays[1]), [a for a in arrays if a is not None]


def _bits_or_none(x: np.ndarray | None, dtype: str) -> np.ndarray | None:
    return None if x is None else to_bits(x, dtype)


def sparse_flash_attention(p: SfaProblem, core_num: int, seed: int = 0) -> KernelRun:
    """(out, softmax_max, softmax_sum) of the forward kernel on the twin."""
    args = p.args(core_num, seed)
    ins = [to_bits(a, p.dtype) for a in (p.query, p.key, p.key if p.value is None else p.value)]
    ropes = [_bits_or_none(p.query_rope, p.dtype), _bits_or_none(p.key_rope, p.dtype)]
    idx = np.ascontiguousarray(p.sparse_indices, np.int32)
    lq, lkv, keep = p.lens_ptrs()
    out = poisoned(p.query.shape)
    stats_shape = (args.t1 * args.n1,)
    smax = np.full(stats_shape, np.nan, np.float32)
    ssum = np.full(stats_shape, np.nan, np.float32)
    sinks = p.sinks_f32()
    info = call("twin_sparse_flash_attention", ctypes.c_int(DTYPE_CODES[p.dtype]), ctypes.byref(args),
                ctypes.byref(attr_args("sparse_flash_attention", p.attrs)), *(P(ptr(a)) for a in ins), P(ptr(idx)),
                ptr_or_none(ropes[0]), ptr_or_none(ropes[1]), lq, lkv, ptr_or_none(sinks), P(ptr(out)), P(ptr(smax)),
                P(ptr(ssum)))
    del keep
    return KernelRun((from_bits(out, p.dtype), smax.astype(np.float64), ssum.astype(np.float64)), info)


@dataclass
class SfaSchedule:
    used_aic: int
    aiv: int
    key_chunk: int
    row_chunk: int
    ub_bytes: int
    workspace_bytes: int
    tiling_key: int
    ub_tile_rows: int
    gather_rows: int
    chunk_cols: int
    m_rows: int
    aiv_ws_bytes: int
    ws_delta: int
    ws_sink: int
    sink_tile_rows: int
    row_start: np.ndarray
    key_row_start: np.ndarray


def sfa_schedule(kernel: str, p: SfaProblem, core_num: int, ub_bytes: int = DEFAULT_UB,
                 **grad_attrs: object) -> SfaSchedule:
    """The pure tiling of "forward" or "grad" for problem ``p`` on ``core_num`` AI cores (``grad_attrs``:
    the grad's attributes beyond the problem's)."""
    fwd = attr_args("sparse_flash_attention", p.attrs) if kernel == "forward" else None
    grad = None if kernel == "forward" else attr_args("sparse_flash_attention_grad", {**p.attrs, **grad_attrs})
    attrs = [None if a is None else ctypes.byref(a) for a in (fwd, grad)] + [ctypes.c_int(p.sinks is not None)]
    out, rows, keys = mixed_schedule("twin_sfa_schedule", p.dtype, p.args(core_num, 0, ub_bytes), attrs,
                                     p.lens_ptrs(), 15, core_num, True)
    return SfaSchedule(*(int(x) for x in out), rows, keys)


def sparse_flash_attention_grad(p: SfaProblem, d_out: np.ndarray, out: np.ndarray, softmax_max: np.ndarray,
                                softmax_sum: np.ndarray, core_num: int, seed: int = 0,
                                **grad_attrs: object) -> KernelRun:
    """(d_query, d_key, d_value, d_query_rope, d_key_rope, d_sinks) of the grad kernel on the twin
    (rope gradients None without rope, d_sinks float32 [N1] or None without sinks); ``grad_attrs``: the
    grad's attributes beyond the problem's."""
    args = p.args(core_num, seed)
    ins = [to_bits(a, p.dtype) for a in (p.query, p.key, p.key if p.value is None else p.value)]
    grads = [to_bits(d_out, p.dtype), to_bits(out, p.dtype)]
    stats = [np.ascontiguousarray(softmax_max, np.float32), np.ascontiguousarray(softmax_sum, np.float32)]
    ropes = [_bits_or_none(p.query_rope, p.dtype), _bits_or_none(p.key_rope, p.dtype)]
    idx = np.ascontiguousarray(p.sparse_indices, np.int32)
    lq, lkv, keep = p.lens_ptrs()
    outs = [poisoned(p.query.shape), poisoned(p.key.shape), poisoned(p.key.shape)]
    rope_outs = [None, None] if p.query_rope is None else [poisoned(p.query_rope.shape), poisoned(p.key_rope.shape)]
    sinks = p.sinks_f32()
    d_sinks = None if sinks is None else np.full(sinks.shape, np.nan, np.float32)
    raw = attr_args("sparse_flash_attention_grad", {**p.attrs, **grad_attrs})
    info = call("twin_sparse_flash_attention_grad", ctypes.c_int(DTYPE_CODES[p.dtype]), ctypes.byref(args),
                ctypes.byref(raw), *(P(ptr(a)) for a in ins), P(ptr(idx)), *(P(ptr(a)) for a in grads),
                *(P(ptr(a)) for a in stats), lq, lkv, ptr_or_none(ropes[0]), ptr_or_none(ropes[1]), ptr_or_none(sinks),
                *(P(ptr(a)) for a in outs), ptr_or_none(rope_outs[0]), ptr_or_none(rope_outs[1]), ptr_or_none(d_sinks))
    del keep
    values = [from_bits(o, p.dtype) for o in outs] + [None if o is None else from_bits(o, p.dtype) for o in rope_outs]
    values.append(None if d_sinks is None else d_sinks.astype(np.float64))
    if p.value is None:  # key is value: no d_value (its poisoned buffer must stay untouched)
        assert np.all(outs[2] == NAN16), "d_value written although value is absent"
        values[2] = None
    return KernelRun(tuple(values), info)
