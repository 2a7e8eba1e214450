"""GEMM candidates for the CPU attention kernels: oneDNN through cpu/gemm.cc vs OpenBLAS vs MKL.

Usage (from any directory outside the repo root):
    python scripts/bench/gemm.py [--dnnl-lib-dir DIR] [--mkl-dir DIR]

Prints the NumPy float32 rate, then builds ``scripts/bench/gemm.cc`` + ``cpu/gemm.cc`` (the
wrapper the kernels use) against the ``onednn-devel-cpu-gomp`` headers and runs it: per library
and shape, the GFLOP/s of 1 and 2 OpenMP threads each running its own independent calls.
``libdnnl.so.3`` is loaded from ``--dnnl-lib-dir``, by default ``mindspore/lib``: the copy the
kernels run on inside a MindSpore process (``dnnl_version()`` of the loaded copy is printed).
OpenBLAS comes from ``scipy-openblas32`` when installed; MKL (``libmkl_rt.so.3``, sequential)
from ``--mkl-dir`` when given. This chose the GEMM library; the per-row ceiling of each attention
benchmark is measured in-process by ``common.gemm_rate`` instead.
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def dist_dir(dist: str, filename: str, parent: str = "") -> pathlib.Path | None:
    """Folder of ``filename`` installed by distribution ``dist`` (None when absent)."""
    try:
        files = md.distribution(dist).files or []
    except md.PackageNotFoundError:
        return None
    for f in files:
        if f.name == filename and (not parent or f.parent.name == parent):
            return pathlib.Path(f.locate()).resolve().parent
    return None


def numpy_gflops(m: int, n: int, k: int) -> float:
    a = np.random.rand(m, k).astype(np.float32)
    b = np.random.rand(k, n).astype(np.float32)
    a @ b
    reps = max(3, int(3e9 / (2 * m * n * k)))
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * m * n * k * reps / (time.perf_counter() - t) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dnnl-lib-dir", type=pathlib.Path, default=dist_dir("mindspore", "libdnnl.so.3", "lib"),
                    help="folder of the libdnnl.so.3 to run (default: MindSpore's)")
    ap.add_argument("--mkl-dir", type=pathlib.Path, help="folder of libmkl_rt.so.3")
    args = ap.parse_args()
    inc = dist_dir("onednn-devel-cpu-gomp", "dnnl.h", "include")  # <prefix>/include (holds oneapi/)
    if inc is None or args.dnnl_lib_dir is None:
        sys.exit("gemm.py: needs onednn-devel-cpu-gomp (headers) and a libdnnl.so.3 (--dnnl-lib-dir)")
    for m, n, k in [(2048, 2048, 2048), (64, 2048, 576)]:
        print(f"numpy f32 (all threads) {m}x{n}x{k}: {numpy_gflops(m, n, k):.1f} GF/s", flush=True)
    exe = pathlib.Path(tempfile.mkdtemp()) / "bench_gemm"
    lib = args.dnnl_lib_dir.resolve()
    subprocess.check_call([
        "g++", "-O3", "-fopenmp", "-D_GLIBCXX_USE_CXX11_ABI=0", "-std=c++17", "-fPIC", f"-I{ROOT}", f"-I{inc}",
        str(HERE / "gemm.cc"), str(ROOT / "cpu/gemm.cc"), "-o", str(exe),
        f"-L{lib}", "-l:libdnnl.so.3", "-ldl", f"-Wl,-rpath,{lib}"])
    env = dict(os.environ)
    openblas = dist_dir("scipy-openblas32", "libscipy_openblas.so")
    if openblas:
        env["MGO_OPENBLAS"] = str(openblas / "libscipy_openblas.so")
    if args.mkl_dir:
        env["MGO_MKL_RT"] = str(args.mkl_dir / "libmkl_rt.so.3")
        env["MKL_THREADING_LAYER"] = "SEQUENTIAL"
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [env.get("LD_LIBRARY_PATH"), str(args.mkl_dir)]))
    sys.exit(subprocess.call([str(exe)], env=env))


if __name__ == "__main__":
    main()
