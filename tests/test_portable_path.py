"""The element-wise kernels have a fused AVX-512 path and a portable path (float32 tiles,
compiler-vectorised). This machine takes the AVX-512 one, so the portable path is checked by
re-running the PyNative kernel tests in a subprocess with MGO_CPU_ISA=portable."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_portable_path_matches_reference(tmp_path: Path) -> None:
    env = dict(os.environ, MGO_CPU_ISA="portable")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "not graph",
                          str(TESTS / "test_rope_grad.py"), str(TESTS / "test_cla_gate.py")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed" in run.stdout and "failed" not in run.stdout
