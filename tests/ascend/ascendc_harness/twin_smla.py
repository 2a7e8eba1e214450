"""ctypes bindings of the sparse_flash_mla harness (harness_smla.cpp): the forward kernel on the twin's mixed
launch, and its pure tiling."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from .twin_args import SmlaArgs
from .twin_lib import ARCH_A2, KernelRun, call, checked, from_bits, op_args, platform_ub, poisoned, ptr_or_none, to_bits

LENGTHS = ("cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q", "seqused_ori_kv", "seqused_cmp_kv",
           "cmp_residual_kv")


@dataclass
class SmlaProblem:
    """One sparse_flash_mla call: query, ori_kv, cmp_kv (or None) already rounded to ``dtype``, int32 index and
    length inputs by their table names (None: absent), float32 sinks or None, the attributes by table name.
    ``lens_known``: the host tiling sees the length values (balancing by keys), as the twin harness can."""

    dtype: str
    query: np.ndarray
    ori_kv: np.ndarray
    cmp_kv: np.ndarray | None
    ints: dict[str, np.ndarray | None]
    sinks: np.ndarray | None
    attrs: dict[str, object]
    arch: int = ARCH_A2
    lens_known: bool = True

    @property
    def bsnd(self) -> bool:
        return self.attrs.get("layout", "BSND") == "BSND"

    def args(self, core_num: int, seed: int = 0, ub_bytes: int | None = None) -> SmlaArgs:
        q, o, c = self.query, self.ori_kv, self.cmp_kv
        if self.bsnd:
            b, s1, n1, d = q.shape
            s2, n2 = o.shape[1], o.shape[2]
            s3 = 0 if c is None else c.shape[1]
            t1, t2, t3 = b * s1, b * s2, b * s3
        else:
            (t1, n1, d), (t2, n2) = q.shape, o.shape[:2]
            t3 = 0 if c is None else c.shape[0]
            cu = self.ints.get("cu_seqlens_q")
            b, s1, s2, s3 = 0 if cu is None else len(cu) - 1, 0, 0, 0
        idx = [self.ints.get(n) for n in ("ori_sparse_indices", "cmp_sparse_indices")]
        k_ori, k_cmp = (0 if x is None else x.shape[-1] for x in idx)
        mask = sum(1 << i for i, n in enumerate(LENGTHS) if self.ints.get(n) is not None)
        ub = platform_ub(self.arch) if ub_bytes is None else ub_bytes
        return SmlaArgs(b, t1, t2, t3, s1, s2, s3, n1, n2, d, k_ori, k_cmp, int(c is not None),
                        int(self.sinks is not None), mask, int(self.lens_known), core_num, ub, seed, self.arch)

    def lens(self) -> tuple[ctypes.Array, list[np.ndarray]]:
        """The 7 length pointers in table order (null: absent) and the arrays they point into."""
        keep = [None if self.ints.get(n) is None else np.ascontiguousarray(self.ints[n], np.int32) for n in LENGTHS]
        arr = (ctypes.c_void_p * len(LENGTHS))(*(ptr_or_none(a) for a in keep))
        return arr, keep


def sparse_flash_mla(p: SmlaProblem, core_num: int, seed: int = 0) -> KernelRun:
    """(attn_out, softmax_lse) of the forward kernel on the twin (outputs start poisoned: NaN)."""
    args = p.args(core_num, seed)
    ins = [to_bits(p.query, p.dtype), to_bits(p.ori_kv, p.dtype),
           None if p.cmp_kv is None else to_bits(p.cmp_kv, p.dtype)]
    idx = [None if p.ints.get(n) is None else np.ascontiguousarray(p.ints[n], np.int32)
           for n in ("ori_sparse_indices", "cmp_sparse_indices")]
    lens, keep = p.lens()
    sinks = None if p.sinks is None else np.ascontiguousarray(p.sinks, np.float32)
    out = poisoned(p.query.shape)
    lse = np.full(args.t1 * args.n1, np.nan, np.float32)
    info = call("twin_sparse_flash_mla", *op_args("sparse_flash_mla", p.dtype, args, p.attrs),
                *(ptr_or_none(a) for a in (*ins, *idx)), lens, ptr_or_none(sinks), ptr_or_none(out), ptr_or_none(lse))
    del keep
    return KernelRun((from_bits(out, p.dtype), lse.astype(np.float64)), info)


@dataclass
class SmlaSchedule:
    used_aic: int
    aiv: int
    key_chunk: int
    ub_bytes: int
    workspace_bytes: int
    tiling_key: int
    ub_tile_rows: int
    gather_rows: int
    aiv_ws_bytes: int
    row_start: np.ndarray


def smla_schedule(p: SmlaProblem, core_num: int, ub_bytes: int | None = None) -> SmlaSchedule:
    """The pure tiling of the forward for ``p`` on ``core_num`` AI cores."""
    lens, keep = p.lens()
    out = np.zeros(9, np.int64)
    starts = np.zeros(2 * core_num + 1, np.int64)
    checked("twin_smla_schedule", *op_args("sparse_flash_mla", p.dtype, p.args(core_num, 0, ub_bytes), p.attrs), lens,
            ptr_or_none(out), ptr_or_none(starts))
    del keep
    return SmlaSchedule(*(int(x) for x in out), starts[: int(out[1]) + 1].copy())
