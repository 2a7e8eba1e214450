"""Compiles and runs the C++ check of the oneDNN GEMM wrapper (tests/cpp/test_gemm.cc): float32
and bfloat16 paths vs a float64 triple loop on odd sizes, transposes and leading dimensions, and
bitwise determinism when called from several OpenMP threads. The bf16 path runs twice: as this
CPU takes it (oneDNN's bf16 matmul on AVX-512, widened to float32 sgemm elsewhere) and with
MGO_CPU_ISA=portable, which forces the widening path."""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _dist_dir(dist: str, name: str, parent: str = "") -> Path:
    for f in importlib.metadata.distribution(dist).files or []:
        if f.name == name and (not parent or f.parent.name == parent):
            return Path(f.locate()).resolve().parent
    raise AssertionError(f"{name} is not installed by {dist}")


@pytest.mark.parametrize("isa", ["native", "portable"])
def test_gemm_wrapper(tmp_path: Path, isa: str) -> None:
    inc = _dist_dir("onednn-devel-cpu-gomp", "dnnl.h", parent="include")
    lib = _dist_dir("onednn-cpu-gomp", "libdnnl.so.3")
    exe = tmp_path / "test_gemm"
    subprocess.run(["g++", "-O2", "-fopenmp", "-D_GLIBCXX_USE_CXX11_ABI=0", "-std=c++17", f"-I{inc}", f"-I{ROOT}",
                    str(ROOT / "tests/cpp/test_gemm.cc"), str(ROOT / "cpu/gemm.cc"), "-o", str(exe), f"-L{lib}",
                    "-l:libdnnl.so.3", f"-Wl,-rpath,{lib}"], check=True)
    env = dict(os.environ, MGO_CPU_ISA=isa)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "OK: 0/" in run.stdout, run.stdout
