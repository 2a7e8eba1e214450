"""Builds the CPU AOT kernel library and the pybind11 validation module.

- ``ms_grad_ops/_cpu_kernels*.so``: every ``cpu/*.cc`` in one shared library that MindSpore
  loads by absolute path (``ops.Custom(func="<path>:<OpType>", func_type="aot")``). It is built
  as an extension module only so that setuptools compiles and installs it; Python never imports it.
- ``ms_grad_ops._validate``: the ``infer_shape/`` rules for eager Python errors.

Both use MindSpore's old C++ string ABI (the new one segfaults inside MindSpore), C++17, -O3
and OpenMP; no -march=native (hot loops dispatch on the CPU at run time).
"""
from pathlib import Path

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension
from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent
CXXFLAGS = ["-std=c++17", "-O3", "-fopenmp", "-D_GLIBCXX_USE_CXX11_ABI=0", "-fvisibility=hidden",
            "-Wall", "-Wextra", "-Wno-unused-parameter"]

ParallelCompile("NPY_NUM_BUILD_JOBS", default=2).install()


def sources(folder: str) -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / folder).glob("*.cc"))


cpu_kernels = Extension(
    "ms_grad_ops._cpu_kernels",
    sources=sources("cpu"),
    include_dirs=[str(ROOT)],
    language="c++",
    extra_compile_args=[*CXXFLAGS, "-fvisibility=default"],
    extra_link_args=["-fopenmp"],
)

validate = Pybind11Extension(
    "ms_grad_ops._validate",
    sources=["infer_shape/python_module.cc"],
    include_dirs=[str(ROOT)],
    cxx_std=17,
    extra_compile_args=CXXFLAGS,
)

setup(ext_modules=[cpu_kernels, validate])
