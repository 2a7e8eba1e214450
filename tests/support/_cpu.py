"""What this CPU offers the kernels, for the tests of a code path: which instructions it has, and
whether the kernel library multiplies bfloat16 on oneDNN's bf16 matmul here.

The CPUs CI meets: AVX2 only (AMD EPYC), AVX-512 with AVX512-BF16 (Zen4 EPYC), AMX (Sapphire
Rapids). oneDNN's bf16 matmul needs AVX-512 and is fast with AVX512-BF16 or AMX-BF16; elsewhere,
and under MGO_CPU_ISA=avx2/portable, the kernels widen bf16 to float32 tiles (cpu/gemm.cc)."""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path

BF16_INSTRUCTIONS = ("avx512_bf16", "amx_bf16")


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The instruction-set flags of /proc/cpuinfo (empty where it does not exist)."""
    path = Path("/proc/cpuinfo")
    if not path.exists():
        return frozenset()
    for line in path.read_text().splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def has_bf16_instructions() -> bool:
    """AVX512-BF16 or AMX-BF16: oneDNN then has a bf16 matmul, and the kernels must take it."""
    return any(f in cpu_flags() for f in BF16_INSTRUCTIONS)


def describe() -> str:
    """This CPU's relevant flags, for messages: e.g. "avx2 avx512f avx512_bf16"."""
    wanted = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_bf16", "amx_tile", "amx_bf16")
    return " ".join(f for f in wanted if f in cpu_flags()) or "none of avx2/avx512/amx"


@functools.cache
def bf16_matmul_native() -> bool:
    """``MgoBf16Native()`` of the kernel library in this process (after ``import mindspore``, so on
    MindSpore's oneDNN): True when bf16 inputs multiply as raw bf16 on oneDNN's matmul. It reads
    MGO_CPU_ISA of this process."""
    import mindspore  # noqa: F401  (loads MindSpore's libdnnl.so.3 first, as for the kernels)

    from ms_grad_ops._custom import cpu_library
    lib = ctypes.CDLL(str(cpu_library()))
    lib.MgoBf16Native.restype = ctypes.c_int
    value = lib.MgoBf16Native()
    assert value in (0, 1), f"MgoBf16Native() failed ({value})"
    return value == 1


NO_BF16_MATMUL = ("needs oneDNN's bf16 matmul, i.e. a CPU with AVX512-BF16 or AMX-BF16; this CPU has " + describe()
                  + ", so the kernels widen bf16 to float32 tiles here (tested by the portable/avx2 cases)")
