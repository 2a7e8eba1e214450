"""Measure GEMM candidates for the CPU kernels: NumPy float32 ceiling + scripts/bench_gemm.cc.

Usage (from any directory outside the repo root):
    /work/venv/bin/python /work/main/scripts/bench_gemm.py [--dnnl-lib-dir DIR] [--mkl-dir DIR]
Builds bench_gemm.cc + cpu/gemm.cc against onednn-devel-cpu-gomp headers, runs it with
OpenBLAS (scipy-openblas32) and, if --mkl-dir is given, MKL (libmkl_rt.so.3, sequential).
--dnnl-lib-dir picks which libdnnl.so.3 is loaded (e.g. mindspore/lib).
"""
import argparse
import importlib.metadata as md
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent


def dist_dir(dist: str, filename: str) -> pathlib.Path:
    for f in md.distribution(dist).files:
        if f.name == filename and (filename != "dnnl.h" or f.parent.name == "include"):
            return pathlib.Path(f.locate()).resolve().parent
    raise RuntimeError(f"{filename} not found in {dist}")


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
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnl-lib-dir")
    ap.add_argument("--mkl-dir")
    args = ap.parse_args()
    for m, n, k in [(2048, 2048, 2048), (64, 2048, 576)]:
        print(f"numpy f32 (all threads) {m}x{n}x{k}: {numpy_gflops(m, n, k):.1f} GF/s", flush=True)
    inc = dist_dir("onednn-devel-cpu-gomp", "dnnl.h")  # <prefix>/include (holds oneapi/)
    lib = dist_dir("onednn-cpu-gomp", "libdnnl.so.3")
    exe = pathlib.Path(tempfile.mkdtemp()) / "bench_gemm"
    subprocess.check_call([
        "g++", "-O3", "-fopenmp", "-D_GLIBCXX_USE_CXX11_ABI=0", "-std=c++17", "-fPIC",
        f"-I{inc}", str(ROOT / "scripts/bench_gemm.cc"), str(ROOT / "cpu/gemm.cc"), "-o", str(exe),
        f"-L{lib}", "-ldnnl", "-ldl", f"-Wl,-rpath,{lib}"])
    env = dict(os.environ, MGO_OPENBLAS=str(dist_dir("scipy-openblas32", "libscipy_openblas.so")
                                            / "libscipy_openblas.so"))
    if args.dnnl_lib_dir:
        env["LD_LIBRARY_PATH"] = args.dnnl_lib_dir
    if args.mkl_dir:
        env["MGO_MKL_RT"] = str(pathlib.Path(args.mkl_dir) / "libmkl_rt.so.3")
        env["MKL_THREADING_LAYER"] = "SEQUENTIAL"
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [env.get("LD_LIBRARY_PATH"), args.mkl_dir]))
    sys.exit(subprocess.call([str(exe)], env=env))


if __name__ == "__main__":
    main()
