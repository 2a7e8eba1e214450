"""Calls one CPU AOT kernel directly, outside MindSpore, with every output buffer poisoned first
(tests/cpu/cpp/call_aot.cc: all bytes 0xFF, NaN in every float dtype), so a test sees any output
element the kernel leaves unwritten."""
from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import mindspore as ms
import numpy as np
from _paths import CPP, ROOT

_STORAGE = {"float32": np.float32, "float16": np.float16, "int32": np.int32, "int64": np.int64}


@functools.cache
def _call_aot(build_dir: str) -> Path:
    """call_aot.cc built with MindSpore's string ABI (the library's)."""
    exe = Path(build_dir) / "call_aot"
    subprocess.run(["g++", "-O1", "-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=0", f"-I{ROOT}", str(CPP / "call_aot.cc"),
                    "-o", str(exe), "-ldl"], check=True)
    return exe


def _raw(x: np.ndarray, dtype: str) -> bytes:
    if dtype == "bfloat16":
        return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return np.asarray(x).astype(_STORAGE[dtype]).tobytes()


def _from_raw(data: bytes, dtype: str, shape: tuple) -> np.ndarray:
    if dtype == "bfloat16":
        return (np.frombuffer(data, np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return np.frombuffer(data, _STORAGE[dtype]).reshape(shape)


def call_aot_kernel(tmp: Path, op_type: str, inputs: list[tuple[np.ndarray, str]],
                    outputs: list[tuple[tuple, str]], attrs: dict[str, object]) -> list[np.ndarray]:
    """Runs kernel ``op_type`` of the CPU library on ``inputs`` ((array, dtype) each) with the
    attributes ``attrs``; returns the outputs ((shape, dtype) each) as float64."""
    from ms_grad_ops._custom import cpu_library

    def kind(v: object) -> str:
        return ("bool" if isinstance(v, bool) else "int" if isinstance(v, (int, np.integer)) else
                "float" if isinstance(v, (float, np.floating)) else "str")

    lines = [f"attr {kind(v)} {k} {int(v) if isinstance(v, bool) else v}" for k, v in attrs.items()]
    for i, (x, dt) in enumerate(inputs):
        (tmp / f"in{i}").write_bytes(_raw(x, dt))
        lines.append(f"in {dt} {x.ndim} {' '.join(map(str, x.shape))} {tmp / f'in{i}'}")
    for i, (shape, dt) in enumerate(outputs):
        lines.append(f"out {dt} {len(shape)} {' '.join(map(str, shape))} {tmp / f'out{i}'}")
    (tmp / "spec").write_text("\n".join(lines) + "\n")
    # The library runs on MindSpore's libdnnl.so.3 (setup.py); an editable build's rpath may not reach it.
    env = dict(os.environ, LD_LIBRARY_PATH=str(Path(ms.__file__).parent / "lib"))
    run = subprocess.run([str(_call_aot(str(tmp))), str(cpu_library()), op_type, str(tmp / "spec")],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    return [_from_raw((tmp / f"out{i}").read_bytes(), dt, shape).astype(np.float64)
            for i, (shape, dt) in enumerate(outputs)]
