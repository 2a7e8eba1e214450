"""safetensors files read with NumPy only, one tensor at a time.

A safetensors file is an 8-byte little-endian header length, a JSON header (name -> dtype, shape and
byte range in the data section) and the raw little-endian buffers. :func:`entries` reads the header
only; :meth:`Entry.read` then reads that one tensor's bytes (one seek, one read), so a loader that
wants a few tensors of a large shard never touches the rest. NumPy has no bfloat16 or float8, so the
``safetensors`` package cannot return those as arrays: bfloat16 is widened to float32 here (exact) and
float8_e4m3fn decoded to float32 (exact) and marked :class:`Fp8` for block-scale dequantisation.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np

# safetensors dtype tag -> NumPy type of its raw little-endian buffer.
RAW = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F8_E4M3": np.uint8}
FP8 = "F8_E4M3"
_MAX_HEADER = 100 << 20        # safetensors' own limit on the header size


def _e4m3fn_table() -> np.ndarray:
    """float32 value of each float8_e4m3fn byte: sign, 4 exponent bits (bias 7), 3 mantissa bits;
    exponent 0 is subnormal, 0x7f/0xff are NaN, there is no infinity."""
    b = np.arange(256)
    exp, man = (b >> 3) & 0xF, b & 0x7
    mag = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1 + man / 8.0) * 2.0 ** (exp - 7.0))
    mag = np.where((b & 0x7F) == 0x7F, np.nan, mag)
    return np.where(b & 0x80, -mag, mag).astype(np.float32)


E4M3FN = _e4m3fn_table()


class Fp8:
    """float8_e4m3fn values as float32 (exact), marked so the loader asks for their block scales."""

    def __init__(self, values: np.ndarray) -> None:
        self.values, self.shape = values, values.shape


@dataclass(frozen=True)
class Entry:
    """One tensor of a safetensors file, not read yet: ``begin``/``end`` are absolute file offsets."""

    path: str
    name: str
    dtype: str
    shape: tuple
    begin: int
    end: int

    @property
    def where(self) -> str:
        """The tensor's name and file, for messages."""
        return f"{self.name} in {self.path}"

    def read(self) -> np.ndarray | Fp8:
        """The tensor as float32 (BF16/F16 widened exactly, F64 rounded), an FP8 one as :class:`Fp8`."""
        if self.dtype not in RAW:
            raise ValueError(f"{self.where} has dtype {self.dtype}, expected one of {sorted(RAW)}")
        with open(self.path, "rb") as f:
            f.seek(self.begin)
            buf = f.read(self.end - self.begin)
        if len(buf) != self.end - self.begin:
            raise ValueError(f"{self.where}: the file ends inside the tensor's bytes {self.begin}..{self.end}")
        raw = np.frombuffer(buf, np.dtype(RAW[self.dtype]).newbyteorder("<")).reshape(self.shape)
        if self.dtype == "BF16":
            return (raw.astype(np.uint32) << 16).view(np.float32)
        if self.dtype == FP8:
            return Fp8(E4M3FN[raw])
        return raw.astype(np.float32)


def entries(path: str | os.PathLike) -> dict[str, Entry]:
    """Every tensor of the safetensors file ``path`` by name, from its header alone (the header is
    checked: each tensor's byte range lies in the file and fits its dtype and shape)."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if size < 8 or n > min(size - 8, _MAX_HEADER):
            raise ValueError(f"{path} is not a safetensors file (header length {n}, file size {size})")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise ValueError(f"{path} is not a safetensors file (its header is not JSON: {e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path} is not a safetensors file (its header is not a JSON object)")
    start, out = 8 + n, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], tuple(int(d) for d in info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: the header entry of {name} is malformed: {info!r}") from None
        width = np.dtype(RAW[dtype]).itemsize if dtype in RAW else None
        if not 0 <= begin <= end <= size - start or (width and end - begin != width * math.prod(shape)):
            raise ValueError(f"{path}: {name} ({dtype} {list(shape)}) has bytes {begin}..{end} of the "
                             f"{size - start}-byte data section, which do not fit it")
        out[name] = Entry(path, name, dtype, shape, start + begin, start + end)
    return out
