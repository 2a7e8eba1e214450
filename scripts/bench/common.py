"""Timing, ceilings and reporting shared by the benchmark modules.

Every number a module reports is measured in the same process and run: the op, the machine's
ceiling (NumPy copy bandwidth or NumPy float32 GEMM rate) and the baseline a user would
otherwise run (MindSpore autodiff of the composite forward).
"""
from __future__ import annotations

import datetime
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import mindspore as ms
import numpy as np
import psutil

RESULTS_DIR = Path(__file__).resolve().parents[2] / "benchmarks"


def child_env() -> dict[str, str]:
    """Environment for a benchmark subprocess. ``import mindspore`` calls setenv
    ("OMP_NUM_THREADS=1") in C, which Python's ``os.environ`` does not show but a child started
    without ``env=`` inherits, so its OpenMP kernels would run on one thread. The child gets the
    environment this process started with instead."""
    return dict(os.environ)


def _tensors(result: object) -> list[ms.Tensor]:
    if isinstance(result, ms.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for item in result for t in _tensors(item)]
    return []


def sync(result: object = None, every_output: bool = False) -> None:
    """Waits for MindSpore's asynchronous work to finish. ``ms.runtime.synchronize()`` busy-waits
    on a core, which on a 2-core machine takes half the machine from a running kernel, so the
    wait is first on outputs of ``result`` (``asnumpy`` blocks without spinning): the smallest
    one for a single-kernel op (all its outputs are ready together), every one for a graph of
    many kernels (``every_output``; the copies are counted in its time)."""
    outs = _tensors(result)
    for t in outs if every_output else sorted(outs, key=lambda t: t.size)[:1]:
        t.asnumpy()
    ms.runtime.synchronize()


def timeit(fn: Callable[[], object], *, warmup: int = 1, repeat: int = 5, every_output: bool = False) -> float:
    """Median wall time of ``fn()`` in seconds (MindSpore work synchronised, see ``sync``)."""
    for _ in range(warmup):
        sync(fn(), every_output)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        sync(fn(), every_output)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def numpy_copy_gbps(n_bytes: int = 256 << 20, repeat: int = 7) -> float:
    """NumPy copy bandwidth in GB/s, counting bytes read + written (best of ``repeat``)."""
    src = np.random.default_rng(0).integers(0, 255, n_bytes, dtype=np.uint8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * n_bytes / best / 1e9


def numpy_gemm_gflops(m: int, n: int, k: int, repeat: int = 5) -> float:
    """NumPy float32 GEMM rate in GFLOP/s (best of ``repeat``) for ``[m, k] x [k, n]``."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    a @ b
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * m * n * k / best / 1e9


class PeakMemory:
    """Peak resident-set growth (bytes) of this process inside a ``with`` block (1 ms sampling)."""

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self._stop = threading.Event()
        self.base = 0
        self.peak = 0

    def __enter__(self) -> PeakMemory:
        self.base = self.peak = self._proc.memory_info().rss
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            time.sleep(0.001)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)

    @property
    def growth(self) -> int:
        return self.peak - self.base


def cpu_isa() -> str:
    """The vector ISA level that decides the kernels' paths (AVX-512 / bf16 GEMM vs AVX2)."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return "ISA unknown"
    have = set(flags.split())
    return "+".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in have) or "no AVX2"


def machine_line() -> str:
    return (f"{platform.processor() or platform.machine()} ({cpu_isa()}), {os.cpu_count()} cores, "
            f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, MindSpore {ms.__version__}, "
            f"NumPy {np.__version__}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")


def markdown_table(rows: list[dict[str, object]]) -> str:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def write_report(name: str, title: str, sections: list[tuple[str, list[dict[str, object]]]],
                 notes: list[str]) -> Path:
    """Prints the tables and writes them to ``benchmarks/<name>.md``."""
    text = [f"# {title}", "", f"Measured: {machine_line()}", ""]
    for heading, rows in sections:
        text += [f"## {heading}", "", markdown_table(rows), ""]
    text += [f"- {n}" for n in notes]
    out = "\n".join(text) + "\n"
    print(out)
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}.md"
    path.write_text(out)
    return path
