"""The core of the ctypes bindings of the twin harness library: the library, its errors and
measurements, 16-bit <-> float helpers, the op attributes as the harness takes them, and the twin's
own self-tests. The kernels are bound per op family, as the C++ side is: ``twin_rope``,
``twin_cla_gate``, ``twin_sfa``, ``twin_indexer`` (lightning_indexer, its grad and the KL loss).

Every kernel call registers its GM buffers with exact sizes, poisons outputs with NaN first, and
returns the twin's measurements (UB footprint, write counts), so tests can check what the
kernel did, not only what it computed.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ms_grad_ops._specs import OP_SPECS

from . import twin_args
from .build import build
from .twin_args import RunInfo

DTYPE_CODES = {"float16": 0, "bfloat16": 1}
ROUND_MODES = ("CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC", "CAST_ODD")
# The NPU architectures the twin models (__NPU_ARCH__): Atlas A2/A3 and Ascend 950. A launch
# takes one; its UB, L1 and L0 capacities and arch-specific rules follow (twin/twin_arch.h).
ARCH_A2 = 2201
ARCH_950 = 3510
# The UB GetCoreMemSize(UB) reports on Atlas A2/A3: the ini's ub_size (192 KiB) less the 256 bytes
# the platform keeps for the Matmul client there, the budget the op_host hands the tilings (a mixed
# kernel's AIV may fill it, ub_bytes_of(mixed=True); a vector kernel could use 256 bytes more).
DEFAULT_UB = 192 * 1024 - 256
NAN16 = 0xFFFF  # a NaN in both float16 and bfloat16: unwritten outputs show up
I64 = ctypes.c_int64
P = ctypes.c_void_p
ERR_LEN = 4096


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
    ub = fn(I64(arch), ctypes.c_int(int(mixed)))
    if ub < 0:
        raise ValueError(f"NPU arch {arch} is not modelled by the twin")
    return int(ub)


def platform_ub(arch: int = ARCH_A2) -> int:
    """The UB budget a tiling gets on ``arch`` by default: what the platform reports on Atlas A2/A3,
    GetUBSizeInBytes() (248 KiB, the twin's capacity) on Ascend 950."""
    return DEFAULT_UB if arch == ARCH_A2 else ub_bytes_of(arch)


def raise_for(code: int, err: ctypes.Array) -> None:
    msg = err.value.decode(errors="replace")
    if code == 1:
        raise TwinRuleError(msg)
    if code == 3:
        raise TilingError(msg)
    if code != 0:
        raise RuntimeError(f"twin harness error {code}: {msg}")


def ptr(a: np.ndarray) -> int:
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


@contextlib.contextmanager
def lengths_hidden() -> Iterator[None]:
    """Kernel runs inside see the lengths only on the device, as from the op_host: the pure tilings
    get no values and split the query rows by count."""
    lib().twin_hide_lengths(ctypes.c_int(1))
    try:
        yield
    finally:
        lib().twin_hide_lengths(ctypes.c_int(0))


def call(fn_name: str, *args: object) -> RunInfo:
    info = RunInfo()
    err = ctypes.create_string_buffer(ERR_LEN)
    fn = getattr(lib(), fn_name)
    fn.restype = ctypes.c_int
    code = fn(*args, ctypes.byref(info), err, I64(ERR_LEN))
    raise_for(code, err)
    return info


def checked(fn_name: str, *args: object) -> None:
    """``fn_name(*args, err, err_len)`` of the harness library; raises its message on a nonzero return."""
    err = ctypes.create_string_buffer(ERR_LEN)
    raise_for(getattr(lib(), fn_name)(*args, err, I64(ERR_LEN)), err)


def op_args(op: str, dtype: str, args: ctypes.Structure, attrs: dict[str, object]) -> tuple[object, object, object]:
    """The leading arguments of op ``op``'s kernel and tiling entries: the dtype code, the shape arguments and
    the attributes (by reference)."""
    return ctypes.c_int(DTYPE_CODES[dtype]), ctypes.byref(args), ctypes.byref(attr_args(op, attrs))


def ptr_or_none(a: np.ndarray | None) -> object:
    return None if a is None else P(ptr(a))


def mixed_schedule(fn_name: str, dtype: str, args: ctypes.Structure, attrs: list[object],
                   lens: tuple[object, object, list[np.ndarray]], n_out: int, core_num: int,
                   key_starts: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A mixed kernel's pure tiling through its schedule entry ``fn_name(dtype, args, *attrs, lens_q,
    lens_k, out, row_start[, key_start], err, err_len)``: its ``n_out`` scalars (aivNum second)
    and the AIVs' row (and key) range starts."""
    lq, lk, keep = lens
    out = np.zeros(n_out, np.int64)
    starts = np.zeros(2 * max(core_num, 1) + 1, np.int64)
    kstarts = np.zeros_like(starts) if key_starts else None
    err = ctypes.create_string_buffer(ERR_LEN)
    code = getattr(lib(), fn_name)(ctypes.c_int(DTYPE_CODES[dtype]), ctypes.byref(args), *attrs, lq, lk, P(ptr(out)),
                                   P(ptr(starts)), *([] if kstarts is None else [P(ptr(kstarts))]), err, I64(ERR_LEN))
    del keep
    raise_for(code, err)
    aiv = int(out[1])
    return out, starts[: aiv + 1].copy(), None if kstarts is None else kstarts[: aiv + 1].copy()


# ---------------------------------------------------------------- attributes
def attr_args(op: str, attrs: dict[str, object]) -> ctypes.Structure:
    """The attributes of one ``op`` call as its harness struct (``twin_args.<OpType>AttrArgs``,
    generated from the table): the given ones by table name, the table's defaults for the others,
    a choice by its name. The harness reads them as the op_host does (choices parsed, every domain
    checked with the Ascend limits: a ``TilingError`` outside)."""
    spec = OP_SPECS[op]
    unknown = sorted(set(attrs) - {a.name for a in spec.attrs})
    missing = [a.name for a in spec.attrs if a.required and a.name not in attrs]
    if unknown or missing:
        raise TypeError(f"{op}: unknown attributes {unknown}, missing required {missing}")
    values = (attrs.get(a.name, a.default) for a in spec.attrs)
    struct = getattr(twin_args, f"{spec.op_type}AttrArgs")
    return struct(*(v.encode() if isinstance(v, str) else v for v in values))


# ---------------------------------------------------------------- vector tiling schedules
@dataclass
class Schedule:
    """The row split of a vector kernel's tiling: cores used, tile rows, UB bytes, each core's rows."""

    used_cores: int
    tile_rows: int
    ub_bytes: int
    starts: np.ndarray
    counts: np.ndarray


def schedule(fn_name: str, shape_args: tuple[int, ...], core_num: int, ub_bytes: int,
              lead: tuple[object, ...] = ()) -> Schedule:
    used, tile, ub = I64(), I64(), I64()
    starts = np.zeros(max(core_num, 1), np.int64)
    counts = np.zeros(max(core_num, 1), np.int64)
    err = ctypes.create_string_buffer(ERR_LEN)
    fn = getattr(lib(), fn_name)
    code = fn(*lead, *(I64(v) for v in shape_args), I64(core_num), I64(ub_bytes), ctypes.byref(used),
              ctypes.byref(tile), ctypes.byref(ub), P(ptr(starts)), P(ptr(counts)), err, I64(ERR_LEN))
    raise_for(code, err)
    return Schedule(used.value, tile.value, ub.value, starts[: used.value], counts[: used.value])


# ---------------------------------------------------------------- twin self-tests
def snippet_names() -> list[str]:
    buf = ctypes.create_string_buffer(ERR_LEN)
    lib().twin_snippet_names(buf, I64(ERR_LEN))
    return buf.value.decode().split(",")


def run_snippet(name: str, arch: int = 0) -> tuple[int, str, str]:
    """(status, expected message part, message) of one vector-launch snippet on ``arch`` (0: the
    arch the snippet is written for): status 0 clean, 1 rule fired, 2 a clean snippet's check
    failed."""
    expect = ctypes.create_string_buffer(256)
    err = ctypes.create_string_buffer(ERR_LEN)
    code = lib().twin_snippet(name.encode(), I64(arch), expect, I64(256), err, I64(ERR_LEN))
    return code, expect.value.decode(), err.value.decode(errors="replace")


def block_ids(blocks: int) -> np.ndarray:
    out = np.full(2 * blocks, -1, np.int64)
    err = ctypes.create_string_buffer(ERR_LEN)
    raise_for(lib().twin_block_ids(I64(blocks), P(ptr(out)), err, I64(ERR_LEN)), err)
    return out.reshape(blocks, 2)


def cast_from_float(x: np.ndarray, dtype: str, mode: str) -> np.ndarray:
    """The twin's Cast float32 -> ``dtype`` with ``mode``, as raw bits."""
    x32 = np.ascontiguousarray(x, np.float32)
    out = np.zeros(x32.size, np.uint16)
    err = ctypes.create_string_buffer(ERR_LEN)
    code = lib().twin_cast_from_float(ctypes.c_int(DTYPE_CODES[dtype]), ctypes.c_int(ROUND_MODES.index(mode)),
                                      P(ptr(x32)), P(ptr(out)), I64(x32.size), err, I64(ERR_LEN))
    raise_for(code, err)
    return out


# ---------------------------------------------------------------- mixed-launch self-tests
def mix_snippet_names() -> list[str]:
    buf = ctypes.create_string_buffer(ERR_LEN)
    lib().twin_mix_snippet_names(buf, I64(ERR_LEN))
    return buf.value.decode().split(",")


def run_mix_snippet(name: str, seed: int = 0, arch: int = 0) -> tuple[int, str, str]:
    """(status, expected message part, message) of one mixed-launch snippet on 2 AI cores of
    ``arch`` (0: the arch the snippet is written for): status 0 clean, 1 rule fired, 2 a clean
    snippet computed a wrong result."""
    expect = ctypes.create_string_buffer(256)
    err = ctypes.create_string_buffer(ERR_LEN)
    code = lib().twin_mix_snippet(name.encode(), I64(seed), I64(arch), expect, I64(256), err, I64(ERR_LEN))
    return code, expect.value.decode(), err.value.decode(errors="replace")
