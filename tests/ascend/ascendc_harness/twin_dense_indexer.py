"""ctypes bindings of the dense indexer harnesses (harness_dli.cpp, harness_dlig.cpp, sharing
harness_indexer.h): dense_lightning_indexer_softmax_lse and dense_lightning_indexer_grad_kl_loss on
the twin's mixed launch, and their pure tilings."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import numpy as np

from .twin_args import IndexerArgs, SliArgs
from .twin_indexer import LiProblem, SliProblem, _attr, _lens_args, _load, _poisoned_as, _residual_arg, _store
from .twin_lib import (
    ARCH_A2,
    DEFAULT_UB,
    DTYPE_CODES,
    KernelRun,
    P,
    attr_args,
    call,
    from_bits,
    mixed_schedule,
    poisoned,
    ptr,
    ptr_or_none,
    to_bits,
)

# ---------------------------------------------------------------- dense_lightning_indexer_softmax_lse
DLI = "dense_lightning_indexer_softmax_lse"


@dataclass
class DliProblem:
    """Inputs of one dense_lightning_indexer_softmax_lse call (float arrays already rounded to
    ``dtype`` / ``wdtype``), cumulative TND lengths or None; ``attrs`` by their table names."""

    dtype: str
    wdtype: str
    query_index: np.ndarray
    key_index: np.ndarray
    weights: np.ndarray
    lens_q: list[int] | None
    lens_k: list[int] | None
    attrs: dict[str, object] = field(default_factory=dict)
    arch: int = ARCH_A2  # the NPU arch of the launch; the tiling takes that SoC's platform
    cmp_residual_k: list[int] | None = None  # one per batch (docs/contract.md section 9.1), or None (absent)

    @property
    def layout(self) -> str:
        return _attr(DLI, self.attrs, "layout")

    def args(self, core_num: int, seed: int = 0, ub_bytes: int | None = None) -> IndexerArgs:
        li = LiProblem(self.dtype, self.wdtype, self.query_index, self.key_index, self.weights, self.lens_q,
                       self.lens_k, {"layout": self.layout}, arch=self.arch)
        return li.args(core_num, seed, ub_bytes, k=0)

    def stats_shape(self) -> tuple[int, ...]:
        """[B, 1, S1] (BSND) or [1, T1] (TND)."""
        qi = self.query_index
        return (qi.shape[0], 1, qi.shape[1]) if self.layout == "BSND" else (1, qi.shape[0])


def dense_lightning_indexer_softmax_lse(p: DliProblem, core_num: int, seed: int = 0) -> KernelRun:
    """(softmax_max_index, softmax_sum_index) float32 of the kernel on the twin, shaped as the op's."""
    args = p.args(core_num, seed)
    qi, ki = to_bits(p.query_index, p.dtype), to_bits(p.key_index, p.dtype)
    w = _store(p.weights, p.wdtype)
    lq, lk, keep = _lens_args(p.lens_q, p.lens_k)
    res, keep_res = _residual_arg(p.cmp_residual_k)
    smax = np.full(p.stats_shape(), np.nan, np.float32)
    ssum = np.full(p.stats_shape(), np.nan, np.float32)
    info = call("twin_dense_lightning_indexer_softmax_lse", ctypes.c_int(DTYPE_CODES[p.dtype]), ctypes.byref(args),
                ctypes.byref(attr_args(DLI, p.attrs)), P(ptr(qi)), P(ptr(ki)), P(ptr(w)), lq, lk, res, P(ptr(smax)),
                P(ptr(ssum)))
    del keep, keep_res
    return KernelRun((smax, ssum), info)


@dataclass
class DliSchedule:
    used_aic: int
    aiv: int
    key_chunk: int
    ub_bytes: int
    workspace_bytes: int
    tiling_key: int
    aiv_ws_bytes: int
    row_start: np.ndarray


def dli_schedule(p: DliProblem, core_num: int, ub_bytes: int = DEFAULT_UB) -> DliSchedule:
    """The pure tiling of dense_lightning_indexer_softmax_lse for ``p`` on ``core_num`` AI cores."""
    out, rows, _ = mixed_schedule("twin_dli_schedule", p.dtype, p.args(core_num, 0, ub_bytes),
                                  [ctypes.byref(attr_args(DLI, p.attrs))], _lens_args(p.lens_q, p.lens_k), 7,
                                  core_num, False)
    return DliSchedule(*(int(x) for x in out), rows)


# ---------------------------------------------------------------- dense_lightning_indexer_grad_kl_loss
DLIG = "dense_lightning_indexer_grad_kl_loss"


@dataclass
class DligProblem:
    """Inputs of one dense_lightning_indexer_grad_kl_loss call in the layouts of docs/contract.md
    section 0.2 (float arrays already rounded to ``dtype`` / ``wdtype``; statistics
    float32-representable), cumulative TND lengths or None; ``attrs`` by their table names."""

    dtype: str
    wdtype: str
    arrays: dict[str, np.ndarray]
    lens_q: list[int] | None
    lens_k: list[int] | None
    attrs: dict[str, object] = field(default_factory=dict)
    arch: int = ARCH_A2  # the NPU arch of the launch; the tiling takes that SoC's platform
    cmp_residual_k: list[int] | None = None  # one per batch (docs/contract.md section 9.1), or None (absent)

    @property
    def layout(self) -> str:
        return _attr(DLIG, self.attrs, "layout")

    @property
    def n2(self) -> ctypes.c_int64:
        """The key heads (key dim -2) as the harness takes them."""
        return ctypes.c_int64(self.arrays["key"].shape[-2])

    def args(self, core_num: int, seed: int = 0, ub_bytes: int | None = None) -> SliArgs:
        a = self.arrays
        sli = SliProblem(self.dtype, self.wdtype, {**a, "sparse_indices": np.zeros((1, 0), np.int32)}, self.lens_q,
                         self.lens_k, {"layout": self.layout}, arch=self.arch)
        return sli.args(core_num, seed, ub_bytes)


def dense_lightning_indexer_grad_kl_loss(p: DligProblem, core_num: int, seed: int = 0) -> KernelRun:
    """(d_query_index, d_key_index, d_weights, loss) of the kernel on the twin as float64; the raw
    16-bit / float32 outputs are in ``KernelRun.outputs[4:]`` for bitwise comparisons."""
    a = p.arrays
    args = p.args(core_num, seed)
    ins = [to_bits(a[n], p.dtype) for n in ("query", "key", "query_index", "key_index")]
    w = _store(a["weights"], p.wdtype)
    stats = [np.ascontiguousarray(a[n], np.float32)
             for n in ("softmax_max", "softmax_sum", "softmax_max_index", "softmax_sum_index")]
    rope = a.get("query_rope") is not None
    ropes = [to_bits(a[n], p.dtype) if rope else None for n in ("query_rope", "key_rope")]
    lq, lk, keep = _lens_args(p.lens_q, p.lens_k)
    res, keep_res = _residual_arg(p.cmp_residual_k)
    outs = [poisoned(a["query_index"].shape), poisoned(a["key_index"].shape),
            _poisoned_as(a["weights"].shape, p.wdtype)]
    loss = np.full(1, np.nan, np.float32)
    info = call("twin_dense_lightning_indexer_grad_kl_loss", ctypes.c_int(DTYPE_CODES[p.dtype]), ctypes.byref(args),
                ctypes.byref(attr_args(DLIG, p.attrs)), p.n2, *(P(ptr(x)) for x in ins), P(ptr(w)),
                *(P(ptr(x)) for x in stats), ptr_or_none(ropes[0]), ptr_or_none(ropes[1]), lq, lk, res,
                *(P(ptr(x)) for x in outs), P(ptr(loss)))
    del keep, keep_res
    values = (from_bits(outs[0], p.dtype), from_bits(outs[1], p.dtype), _load(outs[2], p.wdtype), float(loss[0]))
    return KernelRun((*values, *outs, loss), info)


@dataclass
class DligSchedule:
    used_aic: int
    aiv: int
    key_chunk: int
    tile_rows: int
    key_block: int
    key_blocks: int
    tok_chunk: int
    m_main: int
    m_key: int
    ub_bytes: int
    workspace_bytes: int
    tiling_key: int
    aiv_ws_bytes: int
    ws_loss: int
    q_group: int
    row_start: np.ndarray
    key_block_start: np.ndarray


def dlig_schedule(p: DligProblem, core_num: int, ub_bytes: int = DEFAULT_UB) -> DligSchedule:
    """The pure tiling of dense_lightning_indexer_grad_kl_loss for ``p`` on ``core_num`` AI cores."""
    out, rows, keys = mixed_schedule("twin_dlig_schedule", p.dtype, p.args(core_num, 0, ub_bytes),
                                     [ctypes.byref(attr_args(DLIG, p.attrs)), p.n2], _lens_args(p.lens_q, p.lens_k), 15,
                                     core_num, True)
    return DligSchedule(*(int(x) for x in out), rows, keys)
