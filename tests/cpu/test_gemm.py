"""Compiles and runs the C++ check of the oneDNN GEMM wrapper (tests/cpu/cpp/test_gemm.cc): float32
and bfloat16 paths vs a float64 triple loop on odd sizes, transposes and leading dimensions, and
bitwise determinism when called from several OpenMP threads. The bf16 path runs on oneDNN's bf16
matmul (``native``: needs a CPU with AVX512-BF16 or AMX-BF16, skipped saying so elsewhere, and
there the wrapper must take it) and widened to float32 sgemm (``MGO_CPU_ISA=avx2`` and
``=portable``: every CPU). The test binary links oneDNN the way the package does: built against
the headers, run on MindSpore's libdnnl.so.3.

Also: the packaged kernel library runs on MindSpore's oneDNN, with or without MindSpore in the
process, and it is the only oneDNN mapped."""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import _cpu
import pytest
from _paths import CPP, ROOT


def _dist_dir(dist: str, name: str, parent: str = "") -> Path:
    for f in importlib.metadata.distribution(dist).files or []:
        if f.name == name and (not parent or f.parent.name == parent):
            return Path(f.locate()).resolve().parent
    raise AssertionError(f"{name} is not installed by {dist}")


def _mindspore_lib() -> Path:
    return _dist_dir("mindspore", "libdnnl.so.3", parent="lib")


# Loads the kernel library (after MindSpore has run a CPU op, or alone) and prints the running oneDNN's
# version and every libdnnl mapped into the process.
_PROBE = """
import ctypes, importlib.util, pathlib, sys
if sys.argv[1] == "mindspore":
    import mindspore, numpy as np
    ones = mindspore.Tensor(np.ones((4, 4), np.float32))
    mindspore.ops.matmul(ones, ones).asnumpy()
pkg = pathlib.Path(importlib.util.find_spec("ms_grad_ops").submodule_search_locations[0])
lib = ctypes.CDLL(str(next(pkg.glob("_cpu_kernels*.so"))))
dnnl = ctypes.CDLL("libdnnl.so.3")  # the copy already loaded, by soname
class Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint), ("gpu_runtime", ctypes.c_uint)]
dnnl.dnnl_version.restype = ctypes.POINTER(Version)
v = dnnl.dnnl_version().contents
print("version", v.major, v.minor, v.patch)
for path in sorted({line.split()[-1] for line in open("/proc/self/maps") if "libdnnl" in line}):
    print("mapped", path)
"""


@pytest.mark.parametrize("context", ["mindspore", "alone"])
def test_kernels_run_on_mindspore_onednn(context: str) -> None:
    run = subprocess.run([sys.executable, "-c", _PROBE, context], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    mapped = [line.split(" ", 1)[1] for line in run.stdout.splitlines() if line.startswith("mapped ")]
    assert mapped == [str(_mindspore_lib() / "libdnnl.so.3")], run.stdout
    major, minor, _ = (int(x) for x in next(line for line in run.stdout.splitlines()
                                            if line.startswith("version")).split()[1:])
    assert (major, minor) >= (3, 10), run.stdout  # MindSpore 2.10 ships oneDNN 3.10


@pytest.fixture(scope="module")
def gemm_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    inc = _dist_dir("onednn-devel-cpu-gomp", "dnnl.h", parent="include")
    standin = _dist_dir("onednn-cpu-gomp", "libdnnl.so.3")
    exe = tmp_path_factory.mktemp("gemm") / "test_gemm"
    subprocess.run(["g++", "-O2", "-fopenmp", "-D_GLIBCXX_USE_CXX11_ABI=0", "-std=c++17", f"-I{inc}", f"-I{ROOT}",
                    str(CPP / "test_gemm.cc"), str(ROOT / "cpu/gemm.cc"), "-o", str(exe), f"-L{standin}",
                    "-l:libdnnl.so.3", f"-Wl,-rpath,{_mindspore_lib()}"], check=True)
    return exe


@pytest.mark.parametrize("isa", ["native", "avx2", "portable"])
def test_gemm_wrapper(gemm_binary: Path, isa: str) -> None:
    if isa == "native" and not (_cpu.has_bf16_instructions() or _cpu.bf16_matmul_native()):
        pytest.skip(_cpu.NO_BF16_MATMUL)  # native would repeat the widened path of the avx2/portable runs
    env = {k: v for k, v in os.environ.items() if k != "MGO_CPU_ISA"}
    if isa != "native":
        env["MGO_CPU_ISA"] = isa
    run = subprocess.run([str(gemm_binary)], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "OK: 0/" in run.stdout, run.stdout
    want = "matmul" if isa == "native" else "widened"
    assert f"bf16 path: {want}\n" in run.stdout, f"{isa} on a CPU with {_cpu.describe()}: {run.stdout[:200]}"
