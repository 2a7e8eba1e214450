"""Paths chosen by the CPU at run time, re-checked in a subprocess with MGO_CPU_ISA capping them:
- the element-wise kernels have fused AVX-512 and AVX2 paths and a portable one (float32 tiles,
  compiler-vectorised); MGO_CPU_ISA=avx2 caps them at AVX2, =portable forces the portable one;
- the attention kernels multiply bfloat16 as raw bf16 tiles where oneDNN has a bf16 matmul
  (AVX-512) and as float32 tiles elsewhere (=portable forces that).
The default run of the test suite covers the best path of the machine it runs on."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

ELEMENTWISE = ["test_rope_grad.py", "test_cla_gate.py"]
CASES = {
    "elementwise_avx2": ("avx2", ELEMENTWISE, "not graph"),
    "elementwise_portable": ("portable", ELEMENTWISE, "not graph"),
    "attention_bf16_portable": ("portable", ["test_sparse_flash_attention.py", "test_lightning_indexer.py",
                                             "test_sparse_lightning_indexer_grad_kl_loss.py"],
                                "bfloat16 and not graph"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_portable_path_matches_reference(tmp_path: Path, case: str) -> None:
    isa, files, select = CASES[case]
    env = dict(os.environ, MGO_CPU_ISA=isa)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", select,
                          *(str(TESTS / f) for f in files)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed" in run.stdout and "failed" not in run.stdout
