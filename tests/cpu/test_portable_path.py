"""Paths chosen by the CPU at run time, re-checked in a subprocess with MGO_CPU_ISA capping them:
- the element-wise kernels have fused AVX-512 and AVX2 paths and a portable one (float32 tiles,
  compiler-vectorised); MGO_CPU_ISA=avx2 caps them at AVX2, =portable forces the portable one;
- the attention kernels multiply bfloat16 as raw bf16 tiles where oneDNN has a bf16 matmul
  (AVX-512: AVX512-BF16, AMX) and as float32 tiles elsewhere (=avx2 and =portable force that).
The avx2 runs also set ONEDNN_MAX_CPU_ISA=AVX2, so oneDNN's own GEMM kernels are those an AVX2-only
CPU runs: an AVX-512 machine then repeats the AVX2 machine's arithmetic. The default run of the
test suite covers the best path of the machine it runs on; the tests compare with the float64
reference at bounds that hold on every path, so each path must pass the same tests."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import _cpu
import pytest
from _paths import SUPPORT, TESTS

ELEMENTWISE = ["rope/test_rope.py", "cla_gate/test_cla_gate.py"]
ATTENTION = ["sparse_flash_attention/test_sparse_flash_attention.py", "lightning_indexer/test_lightning_indexer.py",
             "lightning_indexer/test_sparse_lightning_indexer_grad_kl_loss.py"]
CASES = {
    "elementwise_avx2": ("avx2", ELEMENTWISE, "not graph"),
    "elementwise_portable": ("portable", ELEMENTWISE, "not graph"),
    "attention_bf16_portable": ("portable", ATTENTION, "bfloat16 and not graph"),
    # every dtype: with oneDNN capped too, float16/float32 GEMMs change kernels on an AVX-512 CPU
    "attention_avx2": ("avx2", ATTENTION, "not graph"),
}


def _env(isa: str) -> dict[str, str]:
    env = dict(os.environ, MGO_CPU_ISA=isa)
    if isa == "avx2":
        env["ONEDNN_MAX_CPU_ISA"] = "AVX2"
    return env


@pytest.mark.parametrize("case", sorted(CASES))
def test_portable_path_matches_reference(tmp_path: Path, case: str) -> None:
    isa, files, select = CASES[case]
    if case == "attention_avx2" and "avx512f" not in _cpu.cpu_flags():
        pytest.skip(f"this CPU has no AVX-512 ({_cpu.describe()}): the default run already takes the AVX2 path")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", select,
                          *(str(TESTS / f) for f in files)],
                         cwd=tmp_path, env=_env(isa), capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed" in run.stdout and "failed" not in run.stdout


_BF16_NATIVE = "import _cpu; print(int(_cpu.bf16_matmul_native()))"


@pytest.mark.parametrize("isa", ["", "avx2", "portable"])
def test_bf16_matmul_is_taken_exactly_where_the_cpu_has_it(isa: str) -> None:
    """Unset: the kernels multiply bf16 on oneDNN's bf16 matmul on a CPU with AVX512-BF16 or
    AMX-BF16 (a regression to float32 tiles there would pass every accuracy test unseen); capped
    at avx2 or portable: float32 tiles on every CPU. Without AVX-512 there is no bf16 matmul."""
    if not isa and not _cpu.has_bf16_instructions():
        pytest.skip(_cpu.NO_BF16_MATMUL)
    env = _env(isa) if isa else {k: v for k, v in os.environ.items() if k != "MGO_CPU_ISA"}
    run = subprocess.run([sys.executable, "-c", _BF16_NATIVE], cwd=SUPPORT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    native = run.stdout.strip().splitlines()[-1] == "1"
    assert native == (not isa), f"MGO_CPU_ISA={isa!r} on a CPU with {_cpu.describe()}: bf16 matmul {native}"
