"""ctypes bindings of the indexer harnesses (harness_li.cpp, harness_lig.cpp, harness_sli.cpp,
harness_slkg.cpp, sharing harness_indexer.h): lightning_indexer, lightning_indexer_grad,
sparse_lightning_indexer_grad_kl_loss and sparse_lightning_indexer_kl_loss_grad on the twin's mixed launch,
their pure tilings, and the twin's Sort32 the forward uses."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import numpy as np

from ms_grad_ops._specs import OP_SPECS

from .twin_args import IndexerArgs, SliArgs
from .twin_lib import (
    ARCH_A2,
    DEFAULT_UB,
    DTYPE_CODES,
    I64,
    KernelRun,
    P,
    attr_args,
    call,
    checked,
    from_bits,
    mixed_schedule,
    platform_ub,
    poisoned,
    ptr,
    ptr_or_none,
    to_bits,
)


def _lens_args(lens_q: list[int] | None, lens_k: list[int] | None) -> tuple[object, object, list[np.ndarray]]:
    """(query, key) int32 lengths (TND cumulative, BSND per batch) as ctypes pointers (None when
    absent), and the arrays to keep alive for the call."""
    arrays = [None if x is None else np.ascontiguousarray(x, np.int32) for x in (lens_q, lens_k)]
    return ptr_or_none(arrays[0]), ptr_or_none(arrays[1]), [a for a in arrays if a is not None]


def _residual_arg(residual: list[int] | None) -> tuple[object, list[np.ndarray]]:
    """cmp_residual_k (int32, one per batch) as a ctypes pointer (None when absent), and the array to
    keep alive for the call."""
    if residual is None:
        return None, []
    r = np.ascontiguousarray(residual, np.int32)
    return P(ptr(r)), [r]


def _attr(op: str, attrs: dict[str, object], name: str) -> object:
    """Attribute ``name`` of an ``op`` call: the given value, else the table's default."""
    return attrs.get(name, OP_SPECS[op].attr(name).default)


def _tokens(layout: str, q: np.ndarray, k: np.ndarray, lens_q: list[int] | None) -> tuple[int, ...]:
    """(batch, s1, s2, t1, t2) of query-side ``q`` and key-side ``k`` tensors in ``layout``."""
    if layout == "BSND":
        b, s1, s2 = q.shape[0], q.shape[1], k.shape[1]
        return b, s1, s2, b * s1, b * s2
    return 0 if lens_q is None else len(lens_q), 0, 0, q.shape[0], k.shape[0]


def _store(x: np.ndarray, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(x, np.float32) if dtype == "float32" else to_bits(x, dtype)


def _load(x: np.ndarray, dtype: str) -> np.ndarray:
    return x.astype(np.float64) if dtype == "float32" else from_bits(x, dtype)


def _poisoned_as(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return np.full(shape, np.nan, np.float32) if dtype == "float32" else poisoned(shape)


# ---------------------------------------------------------------- sparse_lightning_indexer_grad_kl_loss
SLI = "sparse_lightning_indexer_grad_kl_loss"


@dataclass
class SliProblem:
    """Inputs of one sparse_lightning_indexer_grad_kl_loss call in the layouts of docs/contract.md section 0.2 (float
    arrays already rounded to ``dtype`` / ``wdtype``), cumulative TND lengths or None; ``attrs`` by
    their table names (the table's defaults for those not given)."""

    dtype: str
    wdtype: str
    arrays: dict[str, np.ndarray]
    lens_q: list[int] | None
    lens_k: list[int] | None
    attrs: dict[str, object] = field(default_factory=dict)
    sinks: np.ndarray | None = None  # float32 [N1], or None (absent)
    arch: int = ARCH_A2  # the NPU arch of the launch; the tiling takes that SoC's platform
    cmp_residual_k: list[int] | None = None  # one per batch (docs/contract.md section 9.1), or None (absent)

    @property
    def layout(self) -> str:
        return _attr(SLI, self.attrs, "layout")

    def args(self, core_num: int, seed: int = 0, ub_bytes: int | None = None) -> SliArgs:
        """The shape and launch; ``ub_bytes`` the tiling's UB budget (None: the arch's platform UB)."""
        a = self.arrays
        q, qi = a["query"], a["query_index"]
        dr = a["query_rope"].shape[-1] if a.get("query_rope") is not None else 0
        n1, d = q.shape[-2:]
        return SliArgs(*_tokens(self.layout, q, a["key"], self.lens_q), n1, d, dr, qi.shape[-2], qi.shape[-1],
                       a["sparse_indices"].shape[-1], int(self.wdtype == "float32"), core_num,
                       platform_ub(self.arch) if ub_bytes is None else ub_bytes, seed, self.arch)

    def lens(self) -> tuple[object, object, list[np.ndarray]]:
        return _lens_args(self.lens_q, self.lens_k)


def sparse_lightning_indexer_grad_kl_loss(p: SliProblem, core_num: int, seed: int = 0, **attrs: object) -> KernelRun:
    """(d_query_index, d_key_index, d_weights, loss) of the kernel on the twin (``attrs`` over the
    problem's); the 16-bit / float32 raw outputs are in ``KernelRun.outputs[4:]`` for bitwise
    comparisons."""
    a = p.arrays
    args = p.args(core_num, seed)
    ins = [to_bits(a[n], p.dtype) for n in ("query", "key", "query_index", "key_index")]
    w = _store(a["weights"], p.wdtype)
    idx = np.ascontiguousarray(a["sparse_indices"], np.int32)
    stats = [np.ascontiguousarray(a[n], np.float32) for n in ("softmax_max", "softmax_sum")]
    rope = a.get("query_rope") is not None
    ropes = [to_bits(a[n], p.dtype) if rope else None for n in ("query_rope", "key_rope")]
    lq, lk, keep = p.lens()
    outs = [poisoned(a["query_index"].shape), poisoned(a["key_index"].shape),
            _poisoned_as(a["weights"].shape, p.wdtype)]
    loss = np.full(1, np.nan, np.float32)
    sinks = None if p.sinks is None else np.ascontiguousarray(p.sinks, np.float32)
    res, keep_res = _residual_arg(p.cmp_residual_k)
    info = call("twin_sparse_lightning_indexer_grad_kl_loss", ctypes.c_int(DTYPE_CODES[p.dtype]), ctypes.byref(args),
                ctypes.byref(attr_args(SLI, {**p.attrs, **attrs})), *(P(ptr(x)) for x in ins), P(ptr(w)), P(ptr(idx)),
                *(P(ptr(x)) for x in stats), ptr_or_none(ropes[0]), ptr_or_none(ropes[1]), lq, lk, ptr_or_none(sinks),
                res, *(P(ptr(x)) for x in outs), P(ptr(loss)))
    del keep, keep_res
    values = (from_bits(outs[0], p.dtype), from_bits(outs[1], p.dtype), _load(outs[2], p.wdtype), float(loss[0]))
    return KernelRun((*values, *outs, loss), info)


@dataclass
class SliSchedule:
    used_aic: int
    aiv: int
    key_chunk: int
    tile_rows: int
    gather_rows: int
    key_block: int
    key_blocks: int
    row_chunk: int
    m_key: int
    ub_bytes: int
    workspace_bytes: int
    tiling_key: int
    aiv_ws_bytes: int
    ws_di: int
    ws_loss: int
    k_pad: int
    row_start: np.ndarray
    key_block_start: np.ndarray


def sli_schedule(p: SliProblem, core_num: int, ub_bytes: int = DEFAULT_UB) -> SliSchedule:
    """The pure tiling of sparse_lightning_indexer_grad_kl_loss for ``p`` on ``core_num`` AI cores."""
    out, rows, keys = mixed_schedule("twin_sli_schedule", p.dtype, p.args(core_num, 0, ub_bytes),
                                     [ctypes.byref(attr_args(SLI, p.attrs))], p.lens(), 16, core_num, True)
    return SliSchedule(*(int(x) for x in out), rows, keys)


# ---------------------------------------------------------------- lightning_indexer
LI = "lightning_indexer"


@dataclass
class LiProblem:
    """Inputs of one lightning_indexer call (float arrays already rounded to ``dtype`` /
    ``wdtype``), cumulative TND lengths or None; ``attrs`` by their table names (the table's
    defaults for those not given)."""

    dtype: str
    wdtype: str
    query_index: np.ndarray
    key_index: np.ndarray
    weights: np.ndarray
    lens_q: list[int] | None
    lens_k: list[int] | None
    attrs: dict[str, object] = field(default_factory=dict)
    sinks: np.ndarray | None = None  # float32 [N1], or None (absent)
    arch: int = ARCH_A2  # the NPU arch of the launch; the tiling takes that SoC's platform
    cmp_residual_k: list[int] | None = None  # one per batch (docs/contract.md section 9.1), or None (absent)

    @property
    def layout(self) -> str:
        return _attr(LI, self.attrs, "layout")

    @property
    def sparse_count(self) -> int:
        return _attr(LI, self.attrs, "sparse_count")

    def args(self, core_num: int, seed: int = 0, ub_bytes: int | None = None, k: int | None = None) -> IndexerArgs:
        """The shape and launch; ``k`` the slots of sparse_indices (lightning_indexer's: its sparse_count),
        ``ub_bytes`` the tiling's UB budget (None: the arch's platform UB)."""
        qi = self.query_index
        return IndexerArgs(*_tokens(self.layout, qi, self.key_index, self.lens_q), qi.shape[-2], qi.shape[-1],
                           self.sparse_count if k is None else k, int(self.wdtype == "float32"), core_num,
                           platform_ub(self.arch) if ub_bytes is None else ub_bytes, seed, self.arch)

    def lens(self) -> tuple[object, object, list[np.ndarray]]:
        return _lens_args(self.lens_q, self.lens_k)


def lightning_indexer(p: LiProblem, core_num: int, seed: int = 0) -> KernelRun:
    """(sparse_indices int32, sparse_values float32) of the kernel on the twin, shaped as the op's."""
    args = p.args(core_num, seed)
    qi, ki = to_bits(p.query_index, p.dtype), to_bits(p.key_index, p.dtype)
    w = _store(p.weights, p.wdtype)
    lq, lk, keep = p.lens()
    res, keep_res = _residual_arg(p.cmp_residual_k)
    shape = (*p.query_index.shape[:-2], 1, p.sparse_count)
    idx = np.full(shape, -7, np.int32)
    val = np.full(shape, np.nan, np.float32)
    info = call("twin_lightning_indexer", ctypes.c_int(DTYPE_CODES[p.dtype]), ctypes.byref(args),
                ctypes.byref(attr_args(LI, p.attrs)), P(ptr(qi)), P(ptr(ki)), P(ptr(w)), lq, lk, res, P(ptr(idx)),
                P(ptr(val)))
    del keep, keep_res
    return KernelRun((idx, val), info)


@dataclass
class LiSchedule:
    used_aic: int
    aiv: int
    key_chunk: int
    k_pad: int
    ub_bytes: int
    workspace_bytes: int
    tiling_key: int
    aiv_ws_bytes: int
    row_start: np.ndarray


def li_schedule(p: LiProblem, core_num: int, ub_bytes: int = DEFAULT_UB) -> LiSchedule:
    """The pure tiling of lightning_indexer for ``p`` on ``core_num`` AI cores."""
    out, rows, _ = mixed_schedule("twin_li_schedule", p.dtype, p.args(core_num, 0, ub_bytes),
                                  [ctypes.byref(attr_args(LI, p.attrs))], p.lens(), 8, core_num, False)
    return LiSchedule(*(int(x) for x in out), rows)


def sort32(scores: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The twin's Sort32 over ``len(scores) / 32`` groups: (sorted scores, their indices)."""
    s = np.ascontiguousarray(scores, np.float32)
    i = np.ascontiguousarray(indices, np.uint32)
    out = np.zeros(2 * s.size, np.uint32)
    checked("twin_sort32", P(ptr(s)), P(ptr(i)), I64(s.size // 32), P(ptr(out)))
    pairs = out.reshape(-1, 2)
    return pairs[:, 0].view(np.float32), pairs[:, 1]


# ---------------------------------------------------------------- lightning_indexer_grad
LIG = "lightning_indexer_grad"


@dataclass
class LigProblem:
    """Inputs of one lightning_indexer_grad call in the layouts of docs/contract.md section 0.2 (float arrays already
    rounded to ``dtype`` / ``wdtype``; sparse_indices int, d_values float32-representable),
    cumulative TND lengths or None; ``attrs`` by their table names (the table's defaults for those
    not given)."""

    dtype: str
    wdtype: str
    query_index: np.ndarray
    key_index: np.ndarray
    weights: np.ndarray
    sparse_indices: np.ndarray
    d_values: np.ndarray
    lens_q: list[int] | None
    lens_k: list[int] | None
    attrs: dict[str, object] = field(default_factory=dict)
    sinks: np.ndarray | None = None  # float32 [N1], or None (absent)
    arch: int = ARCH_A2  # the NPU arch of the launch; the tiling takes that SoC's platform
    cmp_residual_k: list[int] | None = None  # one per batch (docs/contract.md section 9.1), or None (absent)

    @property
    def layout(self) -> str:
        return _attr(LIG, self.attrs, "layout")

    def args(self, core_num: int, seed: int = 0, ub_bytes: int | None = None) -> IndexerArgs:
        li = LiProblem(self.dtype, self.wdtype, self.query_index, self.key_index, self.weights, self.lens_q,
                       self.lens_k, {"layout": self.layout}, arch=self.arch)
        return li.args(core_num, seed, ub_bytes, k=self.sparse_indices.shape[-1])

    def lens(self) -> tuple[object, object, list[np.ndarray]]:
        return _lens_args(self.lens_q, self.lens_k)


def lightning_indexer_grad(p: LigProblem, core_num: int, seed: int = 0) -> KernelRun:
    """(d_query_index, d_key_index, d_weights) of the kernel on the twin as float64; the raw 16-bit /
    float32 outputs are in ``KernelRun.outputs[3:]`` for bitwise comparisons."""
    args = p.args(core_num, seed)
    qi, ki = to_bits(p.query_index, p.dtype), to_bits(p.key_index, p.dtype)
    w = _store(p.weights, p.wdtype)
    idx = np.ascontiguousarray(p.sparse_indices, np.int32)
    dv = np.ascontiguousarray(p.d_values, np.float32)
    lq, lk, keep = p.lens()
    res, keep_res = _residual_arg(p.cmp_residual_k)
    outs = [poisoned(p.query_index.shape), poisoned(p.key_index.shape), _poisoned_as(p.weights.shape, p.wdtype)]
    info = call("twin_lightning_indexer_grad", ctypes.c_int(DTYPE_CODES[p.dtype]), ctypes.byref(args),
                ctypes.byref(attr_args(LIG, p.attrs)), P(ptr(qi)), P(ptr(ki)), P(ptr(w)), P(ptr(idx)), P(ptr(dv)),
                lq, lk, res, *(P(ptr(x)) for x in outs))
    del keep, keep_res
    values = (from_bits(outs[0], p.dtype), from_bits(outs[1], p.dtype), _load(outs[2], p.wdtype))
    return KernelRun((*values, *outs), info)


@dataclass
class LigSchedule:
    used_aic: int
    aiv: int
    k_pad: int
    gather_rows: int
    key_block: int
    key_blocks: int
    row_chunk: int
    m_key: int
    ub_bytes: int
    workspace_bytes: int
    tiling_key: int
    aiv_ws_bytes: int
    row_start: np.ndarray
    key_block_start: np.ndarray


def lig_schedule(p: LigProblem, core_num: int, ub_bytes: int = DEFAULT_UB) -> LigSchedule:
    """The pure tiling of lightning_indexer_grad for ``p`` on ``core_num`` AI cores."""
    out, rows, keys = mixed_schedule("twin_lig_schedule", p.dtype, p.args(core_num, 0, ub_bytes),
                                     [ctypes.byref(attr_args(LIG, p.attrs))], p.lens(), 12, core_num, True)
    return LigSchedule(*(int(x) for x in out), rows, keys)


# ---------------------------------------------------------------- sparse_lightning_indexer_kl_loss_grad
SLKG = "sparse_lightning_indexer_kl_loss_grad"


@dataclass
class SlkgProblem:
    """Inputs of one sparse_lightning_indexer_kl_loss_grad call in the layouts of docs/contract.md section 0.2
    (float arrays already rounded to ``dtype`` / ``wdtype``; sparse_indices int; the target
    attn_softmax_l1_norm float32-representable), cumulative TND lengths or None; ``attrs`` by their table
    names (the table's defaults for those not given)."""

    dtype: str
    wdtype: str
    query_index: np.ndarray
    key_index: np.ndarray
    weights: np.ndarray
    sparse_indices: np.ndarray
    target: np.ndarray
    lens_q: list[int] | None
    lens_k: list[int] | None
    attrs: dict[str, object] = field(default_factory=dict)
    arch: int = ARCH_A2  # the NPU arch of the launch; the tiling takes that SoC's platform
    cmp_residual_k: list[int] | None = None  # one per batch (docs/contract.md section 9.1), or None (absent)

    @property
    def layout(self) -> str:
        return _attr(SLKG, self.attrs, "layout")

    def args(self, core_num: int, seed: int = 0, ub_bytes: int | None = None) -> IndexerArgs:
        li = LiProblem(self.dtype, self.wdtype, self.query_index, self.key_index, self.weights, self.lens_q,
                       self.lens_k, {"layout": self.layout}, arch=self.arch)
        return li.args(core_num, seed, ub_bytes, k=self.sparse_indices.shape[-1])

    def lens(self) -> tuple[object, object, list[np.ndarray]]:
        return _lens_args(self.lens_q, self.lens_k)


def sparse_lightning_indexer_kl_loss_grad(p: SlkgProblem, core_num: int, seed: int = 0) -> KernelRun:
    """(d_query_index, d_key_index, d_weights, softmax_out, loss) of the kernel on the twin as float64; the raw
    16-bit / float32 outputs are in ``KernelRun.outputs[5:]`` for bitwise comparisons."""
    args = p.args(core_num, seed)
    qi, ki = to_bits(p.query_index, p.dtype), to_bits(p.key_index, p.dtype)
    w = _store(p.weights, p.wdtype)
    idx = np.ascontiguousarray(p.sparse_indices, np.int32)
    target = np.ascontiguousarray(p.target, np.float32)
    lq, lk, keep = p.lens()
    res, keep_res = _residual_arg(p.cmp_residual_k)
    outs = [poisoned(p.query_index.shape), poisoned(p.key_index.shape), _poisoned_as(p.weights.shape, p.wdtype),
            np.full(p.sparse_indices.shape, np.nan, np.float32), np.full(1, np.nan, np.float32)]
    info = call("twin_sparse_lightning_indexer_kl_loss_grad", ctypes.c_int(DTYPE_CODES[p.dtype]),
                ctypes.byref(args), ctypes.byref(attr_args(SLKG, p.attrs)), P(ptr(qi)), P(ptr(ki)), P(ptr(w)),
                P(ptr(idx)), P(ptr(target)), lq, lk, res, *(P(ptr(x)) for x in outs))
    del keep, keep_res
    values = (from_bits(outs[0], p.dtype), from_bits(outs[1], p.dtype), _load(outs[2], p.wdtype),
              outs[3].astype(np.float64), float(outs[4][0]))
    return KernelRun((*values, *outs), info)


@dataclass
class SlkgSchedule:
    used_aic: int
    aiv: int
    k_pad: int
    gather_rows: int
    key_block: int
    key_blocks: int
    row_chunk: int
    m_key: int
    ub_bytes: int
    workspace_bytes: int
    tiling_key: int
    aiv_ws_bytes: int
    ws_di: int
    ws_loss: int
    row_start: np.ndarray
    key_block_start: np.ndarray


def slkg_schedule(p: SlkgProblem, core_num: int, ub_bytes: int = DEFAULT_UB) -> SlkgSchedule:
    """The pure tiling of sparse_lightning_indexer_kl_loss_grad for ``p`` on ``core_num`` AI cores."""
    out, rows, keys = mixed_schedule("twin_slkg_schedule", p.dtype, p.args(core_num, 0, ub_bytes),
                                     [ctypes.byref(attr_args(SLKG, p.attrs))], p.lens(), 14, core_num, True)
    return SlkgSchedule(*(int(x) for x in out), rows, keys)
