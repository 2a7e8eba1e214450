"""ctypes bindings of the sparse_flash_mla_grad harness (harness_smla_grad.cpp): the grad kernel on the twin's
mixed launch, and its pure tiling."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .twin_args import SmlaGradArgs
from .twin_lib import ARCH_A2, KernelRun, call, checked, from_bits, op_args, platform_ub, poisoned, ptr_or_none, to_bits

INTS = ("ori_sparse_indices", "cmp_sparse_indices", "cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv",
        "seqused_q", "seqused_ori_kv", "seqused_cmp_kv", "cmp_residual_kv")


@dataclass
class SmlaGradProblem:
    """One sparse_flash_mla_grad call: float arrays already rounded to ``dtype`` (query, d_out, out, ori_kv,
    cmp_kv or None), softmax_lse float32, ``ints`` the optional int32 inputs by table name (None: absent),
    sinks float32 [N1] or None, ``attrs`` the op's attributes by table name."""

    dtype: str
    query: np.ndarray
    d_out: np.ndarray
    out: np.ndarray
    softmax_lse: np.ndarray
    ori_kv: np.ndarray
    cmp_kv: np.ndarray | None
    ints: dict[str, np.ndarray | None]
    sinks: np.ndarray | None
    attrs: dict[str, object]
    arch: int = ARCH_A2

    def args(self, core_num: int, seed: int = 0) -> SmlaGradArgs:
        bsnd = self.attrs.get("layout", "BSND") == "BSND"
        q, o, c = self.query, self.ori_kv, self.cmp_kv
        n1, d, n2 = q.shape[-2], q.shape[-1], o.shape[-2]
        if bsnd:
            b, s1, s2 = q.shape[0], q.shape[1], o.shape[1]
            s3 = 0 if c is None else c.shape[1]
        else:
            cu = self.ints.get("cu_seqlens_q")
            b, s1, s2, s3 = (1 if cu is None else len(cu) - 1), 0, 0, 0
        t1 = q.size // (n1 * d)
        t2 = o.size // (n2 * d)
        t3 = 0 if c is None else c.size // (n2 * d)
        k_ori, k_cmp = (0 if self.ints.get(n) is None else self.ints[n].shape[-1]
                        for n in ("ori_sparse_indices", "cmp_sparse_indices"))
        has = [int(c is not None), int(self.ints.get("cu_seqlens_q") is not None)]
        has += [int(self.ints.get(n) is not None) for n in ("seqused_q", "seqused_ori_kv", "seqused_cmp_kv",
                                                            "cmp_residual_kv")]
        has.append(int(self.sinks is not None))
        return SmlaGradArgs(b, s1, s2, s3, t1, t2, t3, n1, n2, d, k_ori, k_cmp, core_num, platform_ub(self.arch),
                            seed, self.arch, *has)


@dataclass
class SmlaGradSchedule:
    used_aic: int
    aiv: int
    key_chunk: int
    row_chunk: int
    ub_bytes: int
    workspace_bytes: int
    tiling_key: int
    ub_tile_rows: int
    m_rows: int
    chunk_cols: int
    row_start: np.ndarray
    ori_start: np.ndarray
    cmp_start: np.ndarray


def schedule(p: SmlaGradProblem, core_num: int) -> SmlaGradSchedule:
    """The pure tiling of problem ``p`` on ``core_num`` AI cores."""
    out = np.zeros(10, np.int64)
    starts = [np.zeros(2 * core_num + 1, np.int64) for _ in range(3)]
    checked("twin_smla_grad_schedule", *op_args("sparse_flash_mla_grad", p.dtype, p.args(core_num), p.attrs),
            ptr_or_none(out), *(ptr_or_none(s) for s in starts))
    aiv = int(out[1])
    return SmlaGradSchedule(*(int(x) for x in out), *(s[: aiv + 1].copy() for s in starts))


def sparse_flash_mla_grad(p: SmlaGradProblem, core_num: int, seed: int = 0) -> KernelRun:
    """(d_query, d_ori_kv, d_cmp_kv, d_sinks, ori_softmax_l1_norm, cmp_softmax_l1_norm) of the kernel on the
    twin, float64 (None where the op gives none); every output poisoned with NaN before the launch."""
    args = p.args(core_num, seed)
    floats = [to_bits(a, p.dtype) for a in (p.query, p.d_out, p.out)]
    lse = np.ascontiguousarray(p.softmax_lse, np.float32)
    ori = to_bits(p.ori_kv, p.dtype)
    cmp = None if p.cmp_kv is None else to_bits(p.cmp_kv, p.dtype)
    ints = [None if p.ints.get(n) is None else np.ascontiguousarray(p.ints[n], np.int32) for n in INTS]
    sinks = None if p.sinks is None else np.ascontiguousarray(p.sinks, np.float32)
    outs16 = [poisoned(p.query.shape), poisoned(p.ori_kv.shape), None if cmp is None else poisoned(p.cmp_kv.shape)]
    d_sinks = None if sinks is None else np.full(sinks.shape, np.nan, np.float32)
    l1 = [None if ints[i] is None else np.full(ints[i].shape, np.nan, np.float32) for i in (0, 1)]
    info = call("twin_sparse_flash_mla_grad", *op_args("sparse_flash_mla_grad", p.dtype, args, p.attrs),
                *(ptr_or_none(a) for a in floats), ptr_or_none(lse), ptr_or_none(ori), ptr_or_none(cmp),
                *(ptr_or_none(a) for a in ints), ptr_or_none(sinks),
                *(ptr_or_none(a) for a in outs16), ptr_or_none(d_sinks), *(ptr_or_none(a) for a in l1))
    values = [None if o is None else from_bits(o, p.dtype) for o in outs16]
    values.append(None if d_sinks is None else d_sinks.astype(np.float64))
    values += [None if a is None else a.astype(np.float64) for a in l1]
    return KernelRun(tuple(values), info)
