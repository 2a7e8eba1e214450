"""Compiles the twin harness libraries with g++ (cached by a hash of every source).

Each harness_*.cpp includes the kernel sources verbatim, so what runs is the real kernel code.
A failed compile raises (tests then error): the twin suite never skips silently.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
ASCENDC = REPO / "ascendc"
UNITS = ("harness_twin", "harness_cla_gate", "harness_rope", "harness_mix", "harness_sfa", "harness_sli",
         "harness_li", "harness_lig", "harness_slkg", "harness_dli", "harness_dlig", "harness_smla",
         "harness_smla_grad")
CXXFLAGS = ("-std=c++17", "-O2", "-fPIC", "-pthread", "-Wall", "-Wextra", "-Werror", f"-I{ASCENDC / 'twin'}")


def _sources() -> list[Path]:
    found = [*ASCENDC.rglob("*.h"), *ASCENDC.rglob("*.cpp"), *(REPO / "infer_shape").glob("*.h"), *HERE.glob("*.h"),
             *HERE.glob("*.cpp")]
    # op_host files need CANN and are not part of the twin build.
    return sorted(p for p in found if "op_host" not in p.parts)


def _digest() -> str:
    h = hashlib.sha256(" ".join(CXXFLAGS).encode())
    for p in _sources():
        h.update(str(p.relative_to(REPO)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _cache_root() -> Path:
    return Path(os.environ.get("MGO_TWIN_CACHE", Path(tempfile.gettempdir()) / "ms_grad_ops_twin"))


def _run(cmd: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def build() -> Path:
    """Returns the path of the harness shared library, compiling it if its sources changed."""
    out_dir = _cache_root() / _digest()
    lib = out_dir / "libmgo_twin.so"
    if lib.exists():
        return lib
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None:
        raise RuntimeError("no C++ compiler (g++) found: the Ascend C twin tests need one")
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=out_dir))
    # One translation unit per compile job, run in parallel (CI has 2 cores).
    jobs = [(u, _run([cxx, *CXXFLAGS, "-c", str(HERE / f"{u}.cpp"), "-o", str(work / f"{u}.o")])) for u in UNITS]
    failures = []
    for unit, proc in jobs:
        log, _ = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"--- {unit}.cpp ---\n{log}")
    if failures:
        raise RuntimeError("compiling the Ascend C kernels against the twin failed:\n" + "\n".join(failures))
    tmp_lib = work / lib.name
    link = subprocess.run([cxx, "-shared", "-pthread", "-o", str(tmp_lib), *(str(work / f"{u}.o") for u in UNITS)],
                          capture_output=True, text=True, check=False)
    if link.returncode != 0:
        raise RuntimeError(f"linking the twin harness failed:\n{link.stdout}{link.stderr}")
    os.replace(tmp_lib, lib)  # atomic: a concurrent session sees either nothing or a whole library
    shutil.rmtree(work, ignore_errors=True)
    return lib
