"""Builds the CPU AOT kernel library and the pybind11 validation module.

- ``ms_grad_ops/_cpu_kernels*.so``: every ``cpu/*.cc`` in one shared library that MindSpore
  loads by absolute path (``ops.Custom(func="<path>:<OpType>", func_type="aot")``). It is built
  as an extension module only so that setuptools compiles and installs it; Python never imports it.
- ``ms_grad_ops._validate``: the ``infer_shape/`` rules for eager Python errors.

The attention kernels multiply through oneDNN's C API (``cpu/gemm.cc``): headers from
``onednn-devel-cpu-gomp`` at build time, ``libdnnl.so.3`` from ``onednn-cpu-gomp`` (installed in
``<prefix>/lib``) at run time. MindSpore itself loads a ``libdnnl.so.3`` of the same soname, and
inside a MindSpore process the dynamic linker reuses that copy; only the C API is used, which is
stable across oneDNN 3.x, so both copies work (the tests run against MindSpore's).

Both use MindSpore's old C++ string ABI (the new one segfaults inside MindSpore), C++17, -O3
and OpenMP; no -march=native (hot loops dispatch on the CPU at run time).
"""
import importlib.metadata
from pathlib import Path

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension
from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent
CXXFLAGS = ["-std=c++17", "-O3", "-fopenmp", "-D_GLIBCXX_USE_CXX11_ABI=0", "-fvisibility=hidden",
            "-Wall", "-Wextra", "-Wno-unused-parameter"]

ParallelCompile("NPY_NUM_BUILD_JOBS", default=2).install()


def dist_file_dir(dist: str, name: str, parent: str = "") -> Path:
    """Folder of file ``name`` installed by distribution ``dist`` (works in pip's isolated build
    environment too, where the files are not under this interpreter's prefix)."""
    for f in importlib.metadata.distribution(dist).files or []:
        if f.name == name and (not parent or f.parent.name == parent):
            return Path(f.locate()).resolve().parent
    raise RuntimeError(f"{name} not found in the files of {dist}")


DNNL_INCLUDE = dist_file_dir("onednn-devel-cpu-gomp", "dnnl.h", parent="include")
DNNL_LIB = dist_file_dir("onednn-cpu-gomp", "libdnnl.so.3")


def sources(folder: str) -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / folder).glob("*.cc"))


cpu_kernels = Extension(
    "ms_grad_ops._cpu_kernels",
    sources=sources("cpu"),
    include_dirs=[str(ROOT), str(DNNL_INCLUDE)],
    language="c++",
    extra_compile_args=[*CXXFLAGS, "-fvisibility=default"],
    # $ORIGIN/../../.. is <prefix>/lib for site-packages/ms_grad_ops; DNNL_LIB covers in-place builds.
    extra_link_args=["-fopenmp", f"-L{DNNL_LIB}", "-l:libdnnl.so.3",
                     "-Wl,-rpath,$ORIGIN/../../..", f"-Wl,-rpath,{DNNL_LIB}"],
)

validate = Pybind11Extension(
    "ms_grad_ops._validate",
    sources=["infer_shape/python_module.cc"],
    include_dirs=[str(ROOT)],
    cxx_std=17,
    extra_compile_args=CXXFLAGS,
)

setup(ext_modules=[cpu_kernels, validate])
