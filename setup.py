"""Builds the CPU AOT kernel library and the pybind11 validation module.

- ``ms_grad_ops/_cpu_kernels*.so``: every ``cpu/*.cc`` in one shared library that MindSpore
  loads by absolute path (``ops.Custom(func="<path>:<OpType>", func_type="aot")``). It is built
  as an extension module only so that setuptools compiles and installs it; Python never imports it.
- ``ms_grad_ops._validate``: the ``infer_shape/`` rules for eager Python errors.

The attention kernels multiply through oneDNN's C API (``cpu/gemm.cc``) and run on the
``libdnnl.so.3`` that MindSpore ships in ``mindspore/lib`` (oneDNN 3.10.1 for MindSpore 2.10),
on purpose: MindSpore's CPU backend loads that copy, and a second copy of the same soname would
never be the one that runs in a MindSpore process. The rpath points at it, so the C++ tests and any
process that loads the kernels without MindSpore get the same library. PyPI has no 3.10 header
package: the headers are ``onednn-devel-cpu-gomp`` 2023.2 (oneDNN 3.2), used at build time only,
together with its ``libdnnl.so.3`` as the link-time stand-in (oneDNN exports unversioned symbols
and keeps its C ABI within major version 3; ``cpu/gemm.cc`` checks the loaded version against the
headers' at first use).

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
DNNL_LINK_STANDIN = dist_file_dir("onednn-cpu-gomp", "libdnnl.so.3")


def mindspore_lib_rpaths() -> list[str]:
    """rpaths of MindSpore's ``lib`` folder: next to the installed package, and the absolute one of
    the building interpreter's MindSpore when it has one (in-place and editable builds)."""
    paths = ["$ORIGIN/../mindspore/lib"]
    try:
        paths.append(str(dist_file_dir("mindspore", "libdnnl.so.3", parent="lib")))
    except (importlib.metadata.PackageNotFoundError, RuntimeError):
        pass  # an isolated build environment has no MindSpore; the $ORIGIN path serves the install
    return paths


def sources(folder: str) -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / folder).glob("*.cc"))


def headers(*folders: str) -> list[str]:
    """The headers an extension's sources include: setuptools rebuilds an extension only when one
    of its sources or ``depends`` is newer than it, and a changed header (the generated
    infer_shape/op_table.h, say) must rebuild it too, or an in-tree build links stale objects."""
    return sorted(str(p.relative_to(ROOT)) for folder in folders for p in (ROOT / folder).glob("*.h"))


cpu_kernels = Extension(
    "ms_grad_ops._cpu_kernels",
    sources=sources("cpu"),
    depends=headers("cpu", "infer_shape"),
    include_dirs=[str(ROOT), str(DNNL_INCLUDE)],
    language="c++",
    extra_compile_args=[*CXXFLAGS, "-fvisibility=default"],
    extra_link_args=["-fopenmp", f"-L{DNNL_LINK_STANDIN}", "-l:libdnnl.so.3",
                     *(f"-Wl,-rpath,{p}" for p in mindspore_lib_rpaths())],
)

validate = Pybind11Extension(
    "ms_grad_ops._validate",
    sources=["infer_shape/python_module.cc"],
    depends=headers("infer_shape"),
    include_dirs=[str(ROOT)],
    cxx_std=17,
    extra_compile_args=CXXFLAGS,
)

setup(ext_modules=[cpu_kernels, validate])
