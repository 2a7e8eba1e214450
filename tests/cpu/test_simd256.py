"""Compiles and runs the C++ check of cpu/simd256.h (tests/cpu/cpp/test_simd256.cc): the AVX2 loads and
round-to-nearest-even stores of float16/bfloat16 must match the scalar conversions of
cpu/convert.cc bit for bit (ties, denormals, infinities, NaNs), and the lane sum must keep its
fixed order."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from _paths import CPP, ROOT


def test_simd256_matches_scalar_conversions(tmp_path: Path) -> None:
    exe = tmp_path / "test_simd256"
    subprocess.run(["g++", "-O2", "-std=c++17", f"-I{ROOT}", str(CPP / "test_simd256.cc"),
                    str(ROOT / "cpu/convert.cc"), "-o", str(exe)], check=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    if run.stdout.startswith("SKIP"):
        # Without AVX2/FMA/F16C, cpu_isa() never selects the AVX2 path, so there is nothing to
        # check, and executing its instructions would fault.
        pytest.skip(run.stdout.strip())
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("OK: 0 mismatches"), run.stdout
