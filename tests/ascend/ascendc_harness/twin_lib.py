"""ctypes bindings of the twin harness library, plus 16-bit <-> float helpers.

Every kernel call registers its GM buffers with exact sizes, poisons outputs with NaN first, and
returns the twin's measurements (UB footprint, write counts), so tests can check what the
kernel did, not only what it computed.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import numpy as np

from .build import build
from .twin_args import IndexerArgs, RunInfo, SfaArgs, SliArgs

DTYPE_CODES = {"float16": 0, "bfloat16": 1}
ROUND_MODES = ("CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC", "CAST_ODD")
# The NPU architectures the twin models (__NPU_ARCH__): Atlas A2/A3 and Ascend 950. A launch
# takes one; its UB, L1 and L0 capacities and arch-specific rules follow (twin/twin_arch.h).
ARCH_A2 = 2201
ARCH_950 = 3510
# The UB GetCoreMemSize(UB) reports on Atlas A2/A3 (ub_size in the SoC's platform ini): the
# budget the op_host hands the tilings. A mixed kernel may use 256 bytes less (ub_bytes_of).
DEFAULT_UB = 192 * 1024
NAN16 = 0xFFFF  # a NaN in both float16 and bfloat16: unwritten outputs show up
_I64 = ctypes.c_int64
_P = ctypes.c_void_p
_ERR_LEN = 4096


class TwinRuleError(RuntimeError):
    """An Ascend C rule the twin enforces was violated."""


class TilingError(ValueError):
    """The pure tiling function rejected the shape."""


@functools.cache
def lib() -> ctypes.CDLL:
    """The compiled harness (built once per process, cached on disk by source hash)."""
    return ctypes.CDLL(str(build()))


def ub_bytes_of(arch: int = ARCH_A2, mixed: bool = False) -> int:
    """The UB bytes the twin lets a kernel allocate on ``arch``: a vector kernel's, or an AIV's
    of a mixed (cube + vector) kernel."""
    fn = lib().twin_arch_ub
    fn.restype = ctypes.c_int64
    ub = fn(_I64(arch), ctypes.c_int(int(mixed)))
    if ub < 0:
        raise ValueError(f"NPU arch {arch} is not modelled by the twin")
    return int(ub)


def platform_ub(arch: int = ARCH_A2) -> int:
    """The UB budget a tiling gets on ``arch`` by default: what the platform reports on Atlas A2/A3,
    GetUBSizeInBytes() (248 KiB, the twin's capacity) on Ascend 950."""
    return DEFAULT_UB if arch == ARCH_A2 else ub_bytes_of(arch)


def _raise_for(code: int, err: ctypes.Array) -> None:
    msg = err.value.decode(errors="replace")
    if code == 1:
        raise TwinRuleError(msg)
    if code == 3:
        raise TilingError(msg)
    if code != 0:
        raise RuntimeError(f"twin harness error {code}: {msg}")


def _ptr(a: np.ndarray) -> int:
    assert a.flags.c_contiguous
    return a.ctypes.data


# ---------------------------------------------------------------- 16-bit storage
def to_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` rounded to nearest even in ``dtype``, as raw uint16 bits."""
    x32 = np.ascontiguousarray(x, np.float32)
    if dtype == "float16":
        return x32.astype(np.float16).view(np.uint16)
    u = x32.view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x32), np.uint16(0x7FC0), bits)


def from_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    """Raw 16-bit values of ``dtype`` as float64."""
    if dtype == "float16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def poisoned(shape: tuple[int, ...]) -> np.ndarray:
    return np.full(shape, NAN16, np.uint16)


# ---------------------------------------------------------------- kernels
@dataclass
class KernelRun:
    outputs: tuple[np.ndarray, ...]  # float64 values of every output
    info: RunInfo


def _call(fn_name: str, *args: object) -> RunInfo:
    info = RunInfo()
    err = ctypes.create_string_buffer(_ERR_LEN)
    fn = getattr(lib(), fn_name)
    fn.restype = ctypes.c_int
    code = fn(*args, ctypes.byref(info), err, _I64(_ERR_LEN))
    _raise_for(code, err)
    return info


def cla_gate_backward(dtype: str, grad: np.ndarray, og: np.ndarray, ol: np.ndarray, zg: np.ndarray,
                      zl: np.ndarray, core_num: int, ub_bytes: int | None = None, arch: int = ARCH_A2) -> KernelRun:
    """The kernel on ``core_num`` vector cores of ``arch``, its tiling budgeted ``ub_bytes``
    (default: the arch's platform UB)."""
    t, n, d = grad.shape
    ins = [to_bits(a, dtype) for a in (grad, og, ol, zg, zl)]
    outs = [poisoned((t, n, d)), poisoned((t, n, d)), poisoned((t, n)), poisoned((t, n))]
    info = _call("twin_cla_gate_backward", ctypes.c_int(DTYPE_CODES[dtype]), _I64(t), _I64(n), _I64(d),
                 *(_P(_ptr(a)) for a in ins), *(_P(_ptr(a)) for a in outs), _I64(core_num),
                 _I64(platform_ub(arch) if ub_bytes is None else ub_bytes), _I64(arch))
    return KernelRun(tuple(from_bits(o, dtype) for o in outs), info)


def cla_gate_merge(dtype: str, og: np.ndarray, ol: np.ndarray, zg: np.ndarray, zl: np.ndarray, core_num: int,
                   ub_bytes: int | None = None, arch: int = ARCH_A2) -> KernelRun:
    t, n, d = og.shape
    ins = [to_bits(a, dtype) for a in (og, ol, zg, zl)]
    out = poisoned((t, n, d))
    info = _call("twin_cla_gate_merge", ctypes.c_int(DTYPE_CODES[dtype]), _I64(t), _I64(n), _I64(d),
                 *(_P(_ptr(a)) for a in ins), _P(_ptr(out)), _I64(core_num),
                 _I64(platform_ub(arch) if ub_bytes is None else ub_bytes), _I64(arch))
    return KernelRun((from_bits(out, dtype),), info)


ROPE_VARIANTS = {"rope": 0, "atb": 1, "vjp": 2}


def rope_family(variant: str, dtype: str, x1: np.ndarray, x2: np.ndarray, cos: np.ndarray, sin: np.ndarray,
                q_seq_len: np.ndarray, core_num: int, ub_bytes: int | None = None, arch: int = ARCH_A2) -> KernelRun:
    """``variant``: "rope" (forward), "atb" or "vjp" (rope_grad modes)."""
    n_tokens, hidden = x1.shape
    max_seq = cos.shape[0]
    lens = np.ascontiguousarray(q_seq_len, np.int32)
    ins = [to_bits(a, dtype) for a in (x1, x2, cos, sin)]
    outs = [poisoned((n_tokens, hidden)), poisoned((n_tokens, hidden))]
    info = _call("twin_rope_family", ctypes.c_int(ROPE_VARIANTS[variant]), ctypes.c_int(DTYPE_CODES[dtype]),
                 _I64(n_tokens), _I64(hidden), _I64(max_seq), _I64(lens.size), *(_P(_ptr(a)) for a in ins),
                 _P(_ptr(lens)), *(_P(_ptr(a)) for a in outs), _I64(core_num),
                 _I64(platform_ub(arch) if ub_bytes is None else ub_bytes), _I64(arch))
    return KernelRun(tuple(from_bits(o, dtype) for o in outs), info)


# ---------------------------------------------------------------- tiling schedules
@dataclass
class Schedule:
    used_cores: int
    tile_rows: int
    ub_bytes: int
    starts: np.ndarray
    counts: np.ndarray


def _schedule(fn_name: str, shape_args: tuple[int, ...], core_num: int, ub_bytes: int,
              lead: tuple[object, ...] = ()) -> Schedule:
    used, tile, ub = _I64(), _I64(), _I64()
    starts = np.zeros(max(core_num, 1), np.int64)
    counts = np.zeros(max(core_num, 1), np.int64)
    err = ctypes.create_string_buffer(_ERR_LEN)
    fn = getattr(lib(), fn_name)
    code = fn(*lead, *(_I64(v) for v in shape_args), _I64(core_num), _I64(ub_bytes), ctypes.byref(used),
              ctypes.byref(tile), ctypes.byref(ub), _P(_ptr(starts)), _P(_ptr(counts)), err, _I64(_ERR_LEN))
    _raise_for(code, err)
    return Schedule(used.value, tile.value, ub.value, starts[: used.value], counts[: used.value])


def cla_gate_schedule(kernel: str, t: int, n: int, d: int, core_num: int, ub_bytes: int = DEFAULT_UB) -> Schedule:
    code = ctypes.c_int({"merge": 0, "backward": 1}[kernel])
    return _schedule("twin_cla_gate_schedule", (t, n, d), core_num, ub_bytes, (code,))


def rope_schedule(n_tokens: int, hidden: int, max_seq: int, batch: int, core_num: int,
                  ub_bytes: int = DEFAULT_UB) -> Schedule:
    return _schedule("twin_rope_schedule", (n_tokens, hidden, max_seq, batch), core_num, ub_bytes)


# ---------------------------------------------------------------- twin self-tests
def snippet_names() -> list[str]:
    buf = ctypes.create_string_buffer(_ERR_LEN)
    lib().twin_snippet_names(buf, _I64(_ERR_LEN))
    return buf.value.decode().split(",")


def run_snippet(name: str, arch: int = 0) -> tuple[int, str, str]:
    """(status, expected message part, message) of one vector-launch snippet on ``arch`` (0: the
    arch the snippet is written for): status 0 clean, 1 rule fired, 2 a clean snippet's check
    failed."""
    expect = ctypes.create_string_buffer(256)
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().twin_snippet(name.encode(), _I64(arch), expect, _I64(256), err, _I64(_ERR_LEN))
    return code, expect.value.decode(), err.value.decode(errors="replace")


def block_ids(blocks: int) -> np.ndarray:
    out = np.full(2 * blocks, -1, np.int64)
    err = ctypes.create_string_buffer(_ERR_LEN)
    _raise_for(lib().twin_block_ids(_I64(blocks), _P(_ptr(out)), err, _I64(_ERR_LEN)), err)
    return out.reshape(blocks, 2)


def cast_from_float(x: np.ndarray, dtype: str, mode: str) -> np.ndarray:
    """The twin's Cast float32 -> ``dtype`` with ``mode``, as raw bits."""
    x32 = np.ascontiguousarray(x, np.float32)
    out = np.zeros(x32.size, np.uint16)
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().twin_cast_from_float(ctypes.c_int(DTYPE_CODES[dtype]), ctypes.c_int(ROUND_MODES.index(mode)),
                                      _P(_ptr(x32)), _P(_ptr(out)), _I64(x32.size), err, _I64(_ERR_LEN))
    _raise_for(code, err)
    return out


# ---------------------------------------------------------------- mixed-launch self-tests
def mix_snippet_names() -> list[str]:
    buf = ctypes.create_string_buffer(_ERR_LEN)
    lib().twin_mix_snippet_names(buf, _I64(_ERR_LEN))
    return buf.value.decode().split(",")


def run_mix_snippet(name: str, seed: int = 0, arch: int = 0) -> tuple[int, str, str]:
    """(status, expected message part, message) of one mixed-launch snippet on 2 AI cores of
    ``arch`` (0: the arch the snippet is written for): status 0 clean, 1 rule fired, 2 a clean
    snippet computed a wrong result."""
    expect = ctypes.create_string_buffer(256)
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().twin_mix_snippet(name.encode(), _I64(seed), _I64(arch), expect, _I64(256), err, _I64(_ERR_LEN))
    return code, expect.value.decode(), err.value.decode(errors="replace")


# ---------------------------------------------------------------- sparse flash attention
@dataclass
class SfaProblem:
    """Inputs of one sparse_flash_attention(_grad) call in the layouts of docs/contract.md section 0.2 (float arrays
    already rounded to ``dtype``); lengths cumulative (TND; None = one sequence) or None (BSND);
    value None = key is value."""

    dtype: str
    layout: str
    query: np.ndarray
    key: np.ndarray
    value: np.ndarray | None
    sparse_indices: np.ndarray
    query_rope: np.ndarray | None
    key_rope: np.ndarray | None
    lens_q: np.ndarray | None
    lens_kv: np.ndarray | None
    scale: float
    block_size: int
    sparse_mode: int
    lens_hidden: bool = False  # TND lengths unknown to the host tiling (no value-depend input)
    lens_dtype: str = "int32"

    def args(self, core_num: int, seed: int = 0, deterministic: bool = False, ub_bytes: int = DEFAULT_UB) -> SfaArgs:
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
        return SfaArgs(1 if self.layout == "TND" else 0, b, s1, s2, t1, t2, n1, n2, d, dr, kslots, self.block_size,
                       self.sparse_mode, int(deterministic), self.scale, core_num, ub_bytes, seed, ARCH_A2,
                       int(self.value is None), int(self.lens_dtype == "int64"))

    def reference_args(self) -> tuple:
        """(value, lens_q, lens_kv) as the float64 reference takes them: key for an absent value,
        one sequence [T1] / [T2] for TND without lengths."""
        value = self.key if self.value is None else self.value
        if self.layout == "TND" and self.lens_q is None:
            return value, [self.query.shape[0]], [self.key.shape[0]]
        return value, self.lens_q, self.lens_kv

    def lens_ptrs(self) -> tuple[object, object, list[np.ndarray]]:
        if self.lens_q is None or self.lens_hidden:
            return None, None, []
        lq = np.ascontiguousarray(self.lens_q, self.lens_dtype)
        lkv = np.ascontiguousarray(self.lens_kv, self.lens_dtype)
        return _P(_ptr(lq)), _P(_ptr(lkv)), [lq, lkv]


def _bits_or_none(x: np.ndarray | None, dtype: str) -> np.ndarray | None:
    return None if x is None else to_bits(x, dtype)


def _p(a: np.ndarray | None) -> object:
    return None if a is None else _P(_ptr(a))


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
    info = _call("twin_sparse_flash_attention", ctypes.c_int(DTYPE_CODES[p.dtype]), ctypes.byref(args),
                 *(_P(_ptr(a)) for a in ins), _P(_ptr(idx)), _p(ropes[0]), _p(ropes[1]), lq, lkv,
                 _P(_ptr(out)), _P(_ptr(smax)), _P(_ptr(ssum)))
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
    row_start: np.ndarray
    key_row_start: np.ndarray


def sfa_schedule(kernel: str, p: SfaProblem, core_num: int, ub_bytes: int = DEFAULT_UB,
                 deterministic: bool = False) -> SfaSchedule:
    """The pure tiling of "forward" or "grad" for problem ``p`` on ``core_num`` AI cores."""
    args = p.args(core_num, 0, deterministic, ub_bytes)
    lq, lkv, keep = p.lens_ptrs()
    out = np.zeros(13, np.int64)
    starts = np.zeros(2 * max(core_num, 1) + 1, np.int64)
    kstarts = np.zeros_like(starts)
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().twin_sfa_schedule(ctypes.c_int(0 if kernel == "forward" else 1), ctypes.c_int(DTYPE_CODES[p.dtype]),
                                   ctypes.byref(args), lq, lkv, _P(_ptr(out)), _P(_ptr(starts)), _P(_ptr(kstarts)),
                                   err, _I64(_ERR_LEN))
    del keep
    _raise_for(code, err)
    aiv = int(out[1])
    return SfaSchedule(*(int(x) for x in out), starts[: aiv + 1].copy(), kstarts[: aiv + 1].copy())


def sparse_flash_attention_grad(p: SfaProblem, d_out: np.ndarray, out: np.ndarray, softmax_max: np.ndarray,
                                softmax_sum: np.ndarray, core_num: int, seed: int = 0,
                                deterministic: bool = False) -> KernelRun:
    """(d_query, d_key, d_value, d_query_rope, d_key_rope) of the grad kernel on the twin
    (rope gradients None without rope)."""
    args = p.args(core_num, seed, deterministic)
    ins = [to_bits(a, p.dtype) for a in (p.query, p.key, p.key if p.value is None else p.value)]
    grads = [to_bits(d_out, p.dtype), to_bits(out, p.dtype)]
    stats = [np.ascontiguousarray(softmax_max, np.float32), np.ascontiguousarray(softmax_sum, np.float32)]
    ropes = [_bits_or_none(p.query_rope, p.dtype), _bits_or_none(p.key_rope, p.dtype)]
    idx = np.ascontiguousarray(p.sparse_indices, np.int32)
    lq, lkv, keep = p.lens_ptrs()
    outs = [poisoned(p.query.shape), poisoned(p.key.shape), poisoned(p.key.shape)]
    rope_outs = [None, None] if p.query_rope is None else [poisoned(p.query_rope.shape), poisoned(p.key_rope.shape)]
    info = _call("twin_sparse_flash_attention_grad", ctypes.c_int(DTYPE_CODES[p.dtype]), ctypes.byref(args),
                 *(_P(_ptr(a)) for a in ins), _P(_ptr(idx)), *(_P(_ptr(a)) for a in grads),
                 *(_P(_ptr(a)) for a in stats), lq, lkv, _p(ropes[0]), _p(ropes[1]),
                 *(_P(_ptr(a)) for a in outs), _p(rope_outs[0]), _p(rope_outs[1]))
    del keep
    values = [from_bits(o, p.dtype) for o in outs] + [None if o is None else from_bits(o, p.dtype) for o in rope_outs]
    if p.value is None:  # key is value: no d_value (its poisoned buffer must stay untouched)
        assert np.all(outs[2] == NAN16), "d_value written although value is absent"
        values[2] = None
    return KernelRun(tuple(values), info)


# ---------------------------------------------------------------- lightning indexer grad
def _lens_args(lens_q: list[int] | None, lens_k: list[int] | None) -> tuple[object, object, list[np.ndarray]]:
    """(query, key) cumulative int32 lengths as ctypes pointers (None when absent), and the arrays
    to keep alive for the call."""
    if lens_q is None:
        return None, None, []
    lq, lk = np.ascontiguousarray(lens_q, np.int32), np.ascontiguousarray(lens_k, np.int32)
    return _P(_ptr(lq)), _P(_ptr(lk)), [lq, lk]


@dataclass
class SliProblem:
    """Inputs of one sparse_lightning_indexer_grad_kl_loss call in the layouts of docs/contract.md section 0.2 (float
    arrays already rounded to ``dtype`` / ``wdtype``), cumulative TND lengths or None."""

    dtype: str
    wdtype: str
    layout: str
    arrays: dict[str, np.ndarray]
    lens_q: list[int] | None
    lens_k: list[int] | None
    scale: float
    sparse_mode: int

    def args(self, core_num: int, seed: int = 0, deterministic: bool = False, ub_bytes: int = DEFAULT_UB) -> SliArgs:
        a = self.arrays
        q, qi = a["query"], a["query_index"]
        dr = a["query_rope"].shape[-1] if a.get("query_rope") is not None else 0
        if self.layout == "BSND":
            b, s1, n1, d = q.shape
            s2 = a["key"].shape[1]
            t1, t2 = b * s1, b * s2
        else:
            t1, n1, d = q.shape
            t2 = a["key"].shape[0]
            b, s1, s2 = 0 if self.lens_q is None else len(self.lens_q), 0, 0
        return SliArgs(1 if self.layout == "TND" else 0, b, s1, s2, t1, t2, n1, d, dr, qi.shape[-2], qi.shape[-1],
                       a["sparse_indices"].shape[-1], self.sparse_mode, int(deterministic),
                       int(self.wdtype == "float32"), self.scale, core_num, ub_bytes, seed, ARCH_A2)

    def lens(self) -> tuple[object, object, list[np.ndarray]]:
        return _lens_args(self.lens_q, self.lens_k)


def _store(x: np.ndarray, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(x, np.float32) if dtype == "float32" else to_bits(x, dtype)


def _load(x: np.ndarray, dtype: str) -> np.ndarray:
    return x.astype(np.float64) if dtype == "float32" else from_bits(x, dtype)


def _poisoned_as(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return np.full(shape, np.nan, np.float32) if dtype == "float32" else poisoned(shape)


def sparse_lightning_indexer_grad_kl_loss(p: SliProblem, core_num: int, seed: int = 0,
                                          deterministic: bool = False) -> KernelRun:
    """(d_query_index, d_key_index, d_weights, loss) of the kernel on the twin; the 16-bit / float32
    raw outputs are in ``KernelRun.outputs[4:]`` for bitwise comparisons."""
    a = p.arrays
    args = p.args(core_num, seed, deterministic)
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
    info = _call("twin_sparse_lightning_indexer_grad_kl_loss", ctypes.c_int(DTYPE_CODES[p.dtype]), ctypes.byref(args),
                 *(_P(_ptr(x)) for x in ins), _P(_ptr(w)), _P(_ptr(idx)), *(_P(_ptr(x)) for x in stats),
                 _p(ropes[0]), _p(ropes[1]), lq, lk, *(_P(_ptr(x)) for x in outs), _P(_ptr(loss)))
    del keep
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
    args = p.args(core_num, 0, False, ub_bytes)
    lq, lk, keep = p.lens()
    out = np.zeros(16, np.int64)
    starts = np.zeros(2 * max(core_num, 1) + 1, np.int64)
    kstarts = np.zeros_like(starts)
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().twin_sli_schedule(ctypes.c_int(DTYPE_CODES[p.dtype]), ctypes.byref(args), lq, lk, _P(_ptr(out)),
                                   _P(_ptr(starts)), _P(_ptr(kstarts)), err, _I64(_ERR_LEN))
    del keep
    _raise_for(code, err)
    aiv = int(out[1])
    return SliSchedule(*(int(x) for x in out), starts[: aiv + 1].copy(), kstarts[: aiv + 1].copy())


# ---------------------------------------------------------------- lightning indexer forward
@dataclass
class LiProblem:
    """Inputs of one lightning_indexer call (float arrays already rounded to ``dtype`` /
    ``wdtype``), cumulative TND lengths or None."""

    dtype: str
    wdtype: str
    layout: str
    query_index: np.ndarray
    key_index: np.ndarray
    weights: np.ndarray
    lens_q: list[int] | None
    lens_k: list[int] | None
    sparse_count: int
    sparse_mode: int

    def args(self, core_num: int, seed: int = 0, ub_bytes: int = DEFAULT_UB) -> IndexerArgs:
        qi, ki = self.query_index, self.key_index
        if self.layout == "BSND":
            b, s1, nidx, didx = qi.shape
            s2 = ki.shape[1]
            t1, t2 = b * s1, b * s2
        else:
            t1, nidx, didx = qi.shape
            t2 = ki.shape[0]
            b, s1, s2 = 0 if self.lens_q is None else len(self.lens_q), 0, 0
        return IndexerArgs(1 if self.layout == "TND" else 0, b, s1, s2, t1, t2, nidx, didx, self.sparse_count,
                      self.sparse_mode, int(self.wdtype == "float32"), core_num, ub_bytes, seed, ARCH_A2)

    def lens(self) -> tuple[object, object, list[np.ndarray]]:
        return _lens_args(self.lens_q, self.lens_k)


def lightning_indexer(p: LiProblem, core_num: int, seed: int = 0) -> KernelRun:
    """(sparse_indices int32, sparse_values float32) of the kernel on the twin, shaped as the op's."""
    args = p.args(core_num, seed)
    qi, ki = to_bits(p.query_index, p.dtype), to_bits(p.key_index, p.dtype)
    w = _store(p.weights, p.wdtype)
    lq, lk, keep = p.lens()
    shape = (*p.query_index.shape[:-2], 1, p.sparse_count)
    idx = np.full(shape, -7, np.int32)
    val = np.full(shape, np.nan, np.float32)
    info = _call("twin_lightning_indexer", ctypes.c_int(DTYPE_CODES[p.dtype]), ctypes.byref(args), _P(_ptr(qi)),
                 _P(_ptr(ki)), _P(_ptr(w)), lq, lk, _P(_ptr(idx)), _P(_ptr(val)))
    del keep
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
    args = p.args(core_num, 0, ub_bytes)
    lq, lk, keep = p.lens()
    out = np.zeros(8, np.int64)
    starts = np.zeros(2 * max(core_num, 1) + 1, np.int64)
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().twin_li_schedule(ctypes.c_int(DTYPE_CODES[p.dtype]), ctypes.byref(args), lq, lk, _P(_ptr(out)),
                                  _P(_ptr(starts)), err, _I64(_ERR_LEN))
    del keep
    _raise_for(code, err)
    aiv = int(out[1])
    return LiSchedule(*(int(x) for x in out), starts[: aiv + 1].copy())


# ---------------------------------------------------------------- lightning indexer value grad
@dataclass
class LigProblem:
    """Inputs of one lightning_indexer_grad call in the layouts of docs/contract.md section 0.2 (float arrays already
    rounded to ``dtype`` / ``wdtype``; sparse_indices int, d_values float32-representable),
    cumulative TND lengths or None."""

    dtype: str
    wdtype: str
    layout: str
    query_index: np.ndarray
    key_index: np.ndarray
    weights: np.ndarray
    sparse_indices: np.ndarray
    d_values: np.ndarray
    lens_q: list[int] | None
    lens_k: list[int] | None
    sparse_mode: int

    def args(self, core_num: int, seed: int = 0, ub_bytes: int = DEFAULT_UB) -> IndexerArgs:
        li = LiProblem(self.dtype, self.wdtype, self.layout, self.query_index, self.key_index, self.weights,
                       self.lens_q, self.lens_k, self.sparse_indices.shape[-1], self.sparse_mode)
        return li.args(core_num, seed, ub_bytes)

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
    outs = [poisoned(p.query_index.shape), poisoned(p.key_index.shape), _poisoned_as(p.weights.shape, p.wdtype)]
    info = _call("twin_lightning_indexer_grad", ctypes.c_int(DTYPE_CODES[p.dtype]), ctypes.byref(args), _P(_ptr(qi)),
                 _P(_ptr(ki)), _P(_ptr(w)), _P(_ptr(idx)), _P(_ptr(dv)), lq, lk, *(_P(_ptr(x)) for x in outs))
    del keep
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
    args = p.args(core_num, 0, ub_bytes)
    lq, lk, keep = p.lens()
    out = np.zeros(12, np.int64)
    starts = np.zeros(2 * max(core_num, 1) + 1, np.int64)
    kstarts = np.zeros_like(starts)
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().twin_lig_schedule(ctypes.c_int(DTYPE_CODES[p.dtype]), ctypes.byref(args), lq, lk, _P(_ptr(out)),
                                   _P(_ptr(starts)), _P(_ptr(kstarts)), err, _I64(_ERR_LEN))
    del keep
    _raise_for(code, err)
    aiv = int(out[1])
    return LigSchedule(*(int(x) for x in out), starts[: aiv + 1].copy(), kstarts[: aiv + 1].copy())


def sort32(scores: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The twin's Sort32 over ``len(scores) / 32`` groups: (sorted scores, their indices)."""
    s = np.ascontiguousarray(scores, np.float32)
    i = np.ascontiguousarray(indices, np.uint32)
    out = np.zeros(2 * s.size, np.uint32)
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().twin_sort32(_P(_ptr(s)), _P(_ptr(i)), _I64(s.size // 32), _P(_ptr(out)), err, _I64(_ERR_LEN))
    _raise_for(code, err)
    pairs = out.reshape(-1, 2)
    return pairs[:, 0].view(np.float32), pairs[:, 1]
