"""Direct calls of a CPU kernel's AOT entry point through tests/cpu/cpp/call_aot.cc, whose output buffers start
poisoned (all bytes 0xFF: NaN in every float dtype), so a test sees any output element the kernel never writes."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
from _paths import CPP, ROOT

_NP_STORAGE = {"float32": np.float32, "float16": np.float16, "int32": np.int32, "int64": np.int64}


def raw(x: np.ndarray, dtype: str) -> bytes:
    """``x`` as the bytes of a ``dtype`` tensor (bfloat16 truncated from float32: pass exact values)."""
    if dtype == "bfloat16":
        return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return np.asarray(x).astype(_NP_STORAGE[dtype]).tobytes()


def from_raw(data: bytes, dtype: str, shape: tuple) -> np.ndarray:
    if dtype == "bfloat16":
        return (np.frombuffer(data, np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return np.frombuffer(data, _NP_STORAGE[dtype]).reshape(shape)


def build_call_aot(where: Path) -> Path:
    """call_aot.cc built with MindSpore's string ABI (the library's) into the folder ``where``."""
    exe = where / "call_aot"
    subprocess.run(["g++", "-O1", "-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=0", f"-I{ROOT}", str(CPP / "call_aot.cc"),
                    "-o", str(exe), "-ldl"], check=True)
    return exe


def call(exe: Path, work: Path, op_type: str, attrs: list[str], ins: list[tuple[np.ndarray, str]],
         outs: list[tuple[tuple, str]]) -> list[np.ndarray]:
    """Runs kernel ``op_type`` on ``ins`` ((array, dtype)) with ``attrs`` ("attr <type> <name> <value>" lines) into
    poisoned outputs ``outs`` ((shape, dtype)); returns them as float64 (or int) arrays."""
    import mindspore as ms

    from ms_grad_ops._custom import cpu_library
    lines = list(attrs)
    for i, (x, dt) in enumerate(ins):
        (work / f"in{i}").write_bytes(raw(x, dt))
        lines.append(f"in {dt} {x.ndim} {' '.join(map(str, x.shape))} {work / f'in{i}'}")
    for i, (shape, dt) in enumerate(outs):
        lines.append(f"out {dt} {len(shape)} {' '.join(map(str, shape))} {work / f'out{i}'}")
    (work / "spec").write_text("\n".join(lines) + "\n")
    # The library runs on MindSpore's libdnnl.so.3 (setup.py); an editable build's rpath may not reach it.
    env = dict(os.environ, LD_LIBRARY_PATH=str(Path(ms.__file__).parent / "lib"))
    run = subprocess.run([str(exe), str(cpu_library()), op_type, str(work / "spec")], capture_output=True, text=True,
                         timeout=120, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    return [from_raw((work / f"out{i}").read_bytes(), dt, shape) for i, (shape, dt) in enumerate(outs)]
