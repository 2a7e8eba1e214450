"""Timing, ceilings and reporting shared by the benchmark modules.

Every number a module reports is measured in the same run: the op, the machine's ceiling (NumPy
copy bandwidth for the element-wise ops; for the attention ops the GEMM rate of the kernel's own
per-row products through the kernel library's GEMM wrapper, ``gemm_rate``), and the baselines a
user would otherwise run (MindSpore autodiff of the composite forward; PyTorch CPU autograd when
torch is importable, see ``torch_baseline.py``).

Each benchmark appends one JSON row per measured configuration to ``benchmarks/results.jsonl``
(``append_results``) and rewrites ``benchmarks/<name>.md`` from the rows of its latest run
(``write_markdown``). MindSpore is imported lazily, so a PyTorch worker can use this module
without loading MindSpore's oneDNN.
"""
from __future__ import annotations

import ctypes
import datetime
import functools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = ROOT / "benchmarks"
RESULTS_FILE = RESULTS_DIR / "results.jsonl"
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")
DNNL_RUNTIMES = {0: "none", 1: "sequential", 2: "OpenMP", 4: "TBB", 8: "threadpool", 256: "OpenCL", 512: "SYCL"}


def child_env() -> dict[str, str]:
    """Environment for a benchmark subprocess. ``import mindspore`` calls setenv
    ("OMP_NUM_THREADS=1") in C, which Python's ``os.environ`` does not show but a child started
    without ``env=`` inherits, so its OpenMP kernels would run on one thread. The child gets the
    environment this process started with instead."""
    return dict(os.environ)


def spawn_json(argv: list[str], cwd: Path | None = None, timeout: float | None = None) -> dict:
    """Runs ``python argv...`` and returns the last line of its stdout that is a JSON object, or
    ``{"error": reason}`` (also printed) when it fails or runs longer than ``timeout`` seconds."""
    try:
        res = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=cwd, env=child_env(),
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"worker {argv} timed out after {timeout:.0f} s", file=sys.stderr)
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
    if res.returncode != 0 or not lines:
        print(f"worker {argv} failed (rc {res.returncode}): {res.stderr[-800:]}", file=sys.stderr)
        last = res.stderr.strip().splitlines()[-1:] or [f"rc {res.returncode}"]
        return {"error": f"failed: {last[0][:200]}"}
    return json.loads(lines[-1])


# ---------------------------------------------------------------------------------------- timing

def _tensors(result: object) -> list:
    import mindspore as ms
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
    import mindspore as ms
    outs = _tensors(result)
    for t in outs if every_output else sorted(outs, key=lambda t: t.size)[:1]:
        t.asnumpy()
    ms.runtime.synchronize()


def wall_median(fn: Callable[[], object], *, warmup: int = 1, repeat: int = 5) -> float:
    """Median wall time of ``fn()`` in seconds, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def timeit(fn: Callable[[], object], *, warmup: int = 1, repeat: int = 5, every_output: bool = False) -> float:
    """Median wall time of ``fn()`` in seconds (MindSpore work synchronised, see ``sync``)."""
    return wall_median(lambda: sync(fn(), every_output), warmup=warmup, repeat=repeat)


class PeakMemory:
    """Peak resident-set growth (bytes) of this process inside a ``with`` block (1 ms sampling)."""

    def __init__(self) -> None:
        import psutil
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


# -------------------------------------------------------------------------------------- ceilings

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


@functools.cache
def kernel_library() -> ctypes.CDLL:
    """The kernel library MindSpore dlopens for our ops (``cpu/gemm_rate.cc``'s entry points),
    opened after ``import mindspore`` so its oneDNN resolves as it does for the kernels."""
    import mindspore  # noqa: F401  (loads MindSpore's libdnnl.so.3 first, as in a training process)

    from ms_grad_ops._custom import cpu_library
    lib = ctypes.CDLL(str(cpu_library()))
    i64, cint = ctypes.c_int64, ctypes.c_int
    lib.MgoGemmRate.argtypes = [cint, cint, cint, i64, i64, i64, cint, ctypes.c_double]
    lib.MgoGemmRate.restype = ctypes.c_double
    lib.MgoGemm.argtypes = [cint, cint, cint, i64, i64, i64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.MgoGemm.restype = cint
    lib.MgoBf16Native.restype = cint
    lib.MgoDnnlVersion.argtypes = [ctypes.POINTER(cint)] * 3 + [ctypes.POINTER(ctypes.c_uint)]
    lib.MgoDnnlVersion.restype = None
    lib.MgoDnnlHash.restype = ctypes.c_char_p
    lib.MgoDnnlPath.restype = ctypes.c_char_p
    return lib


def bf16_native() -> bool:
    """Whether the kernels multiply bf16 inputs as raw bf16 on this CPU (else float32 tiles)."""
    return kernel_library().MgoBf16Native() == 1


def dnnl_info() -> dict[str, str]:
    """The oneDNN running in this process: version, git hash, CPU runtime, path of the library."""
    lib = kernel_library()
    major, minor, patch, runtime = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_uint()
    lib.MgoDnnlVersion(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch), ctypes.byref(runtime))
    return {"version": f"{major.value}.{minor.value}.{patch.value}", "hash": (lib.MgoDnnlHash() or b"").decode(),
            "runtime": DNNL_RUNTIMES.get(runtime.value, str(runtime.value)),
            "path": (lib.MgoDnnlPath() or b"").decode()}


def gemm(a: np.ndarray, b: np.ndarray, ta: bool = False, tb: bool = False) -> np.ndarray:
    """``op(a) @ op(b)`` (float32) through the call ``gemm_rate`` times: float32 operands, or bf16
    raw bits (uint16) for its bf16 path. Dense row-major operands as stored (a is [k, m] when ta)."""
    if a.dtype != b.dtype or a.dtype not in (np.float32, np.uint16) or a.ndim != 2 or b.ndim != 2:
        raise TypeError(f"gemm: a and b must be 2-D, both float32 or both uint16; got {a.dtype}, {b.dtype}")
    m, k = a.shape[::-1] if ta else a.shape
    kb, n = b.shape[::-1] if tb else b.shape
    if kb != k:
        raise ValueError(f"gemm: op(a) {(m, k)} and op(b) {(kb, n)} do not chain")
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    c = np.full((m, n), np.nan, np.float32)  # unwritten elements show
    if kernel_library().MgoGemm(int(a.dtype == np.uint16), int(ta), int(tb), m, n, k, a.ctypes.data, b.ctypes.data,
                                c.ctypes.data) != 0:
        raise ValueError(f"gemm: the kernel library rejected m={m} n={n} k={k}")
    return c


@dataclass(frozen=True)
class Product:
    """One GEMM ``op(A)[m, k] x op(B)[k, n]`` of a kernel (ta/tb: operand stored transposed)."""
    name: str
    m: int
    n: int
    k: int
    ta: bool = False
    tb: bool = False

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    def __str__(self) -> str:
        a = f"[{self.k}x{self.m}]^T" if self.ta else f"[{self.m}x{self.k}]"
        b = f"[{self.n}x{self.k}]^T" if self.tb else f"[{self.k}x{self.n}]"
        return f"{self.name} {a}x{b}"


@functools.cache
def gemm_rate(bf16: bool, ta: bool, tb: bool, m: int, n: int, k: int, threads: int = 2,
              seconds: float = 0.5) -> float:
    """GFLOP/s of ``threads`` threads each running independent ``m x n x k`` GEMMs through the
    kernels' wrapper (``MgoGemmRate``) for about ``seconds``; cached per shape within a run."""
    rate = kernel_library().MgoGemmRate(int(bf16), int(ta), int(tb), m, n, k, threads, seconds)
    if not rate > 0:
        raise RuntimeError(f"MgoGemmRate failed for m={m} n={n} k={k} (bf16={bf16}, ta={ta}, tb={tb})")
    return rate


def keys_per_row(total_visible: float, rows: int) -> int:
    """Kv of the ceiling: mean visible selected keys per query row, rounded up to 64."""
    return max(64, math.ceil(total_visible / max(rows, 1) / 64) * 64)


def ceiling(products: Sequence[Product], dtype: str, threads: int = 2) -> dict:
    """The GEMM ceiling of a kernel whose work is ``products`` per query row: total FLOPs over the
    sum of each product's FLOPs / its measured rate, in the operand type the kernels use for
    ``dtype`` on this CPU (bf16 when bf16 inputs and a native bf16 GEMM, else float32)."""
    bf16 = dtype == "bfloat16" and bf16_native()
    rates = [gemm_rate(bf16, p.ta, p.tb, p.m, p.n, p.k, threads) for p in products]
    total = sum(p.flops for p in products)
    return {"gflops": total / sum(p.flops / r for p, r in zip(products, rates)),
            "operand": "bfloat16" if bf16 else "float32", "threads": threads,
            "products": [{"name": p.name, "gemm": str(p), "gflops": round(r, 1)} for p, r in zip(products, rates)]}


def ceiling_cell(row: dict) -> str:
    """Markdown cell of a row's ceiling: total and per-product GFLOP/s, operand type."""
    c = row["ceiling"]
    parts = ", ".join(f"{p['name']} {p['gflops']:.0f}" for p in c["products"])
    return f"{c['gflops']:.0f} ({c['operand']}; {parts})"


# --------------------------------------------------------------------------------------- machine

def cpu_info() -> dict[str, object]:
    """CPU model name and the ISA flags that decide the kernels' and oneDNN's paths."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    field = lambda key: next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith(key)), "")  # noqa: E731
    have = set(field("flags").split())
    return {"model": field("model name") or platform.machine(), "cores": os.cpu_count(),
            "flags": {f: f in have for f in CPU_FLAGS}}


def cpu_bf16_matmul() -> bool:
    """Whether the CPU multiplies bf16 natively (AVX512-BF16 or AMX), as PyTorch's bf16 matmul needs
    to be fast."""
    flags = cpu_info()["flags"]
    return bool(flags["avx512_bf16"] or flags["amx_bf16"])


def git_commit() -> str:
    """HEAD of the repository, with "-dirty" when tracked files differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def torch_version() -> str:
    """torch's version without importing it here (it would load a second oneDNN), or ""."""
    import importlib.metadata
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return ""


def machine_info() -> dict[str, object]:
    import mindspore as ms
    return {"cpu": cpu_info(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
            "onednn": dnnl_info(), "mindspore": ms.__version__, "numpy": np.__version__,
            "torch": torch_version() or "not installed", "git": git_commit()}


def run_context(bench: str) -> dict[str, object]:
    """Fields shared by every row of one benchmark run."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return {"bench": bench, "run_id": f"{bench}-{now:%Y%m%dT%H%M%SZ}-{os.getpid()}",
            "utc": now.isoformat(timespec="seconds"), "command": " ".join(["python", *sys.argv]),
            "machine": machine_info()}


# --------------------------------------------------------------------------------------- results

def append_results(ctx: dict[str, object], rows: list[dict[str, object]], path: Path = RESULTS_FILE) -> None:
    """Appends each row, with the run's shared fields, as one JSON line."""
    path.parent.mkdir(exist_ok=True)
    with path.open("a") as f:
        for row in rows:
            f.write(json.dumps({**ctx, **row}) + "\n")


def latest_run(bench: str, path: Path = RESULTS_FILE) -> list[dict[str, object]]:
    """Rows of the latest run of ``bench`` in ``path`` (file order)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    rows = [r for r in rows if r.get("bench") == bench]
    return [r for r in rows if r["run_id"] == rows[-1]["run_id"]] if rows else []


def machine_header(row: dict[str, object]) -> list[str]:
    m = row["machine"]
    cpu, dnnl = m["cpu"], m["onednn"]
    flags = ", ".join(f"{f} {'yes' if on else 'no'}" for f, on in cpu["flags"].items())
    return [f"- Machine: {cpu['model']}, {cpu['cores']} cores; {flags}; OMP_NUM_THREADS={m['omp_num_threads']}",
            f"- oneDNN running: {dnnl['version']} ({dnnl['runtime']} runtime, hash {dnnl['hash']}) from "
            f"`{dnnl['path']}`",
            f"- MindSpore {m['mindspore']}, NumPy {m['numpy']}, torch {m['torch']}; git {m['git']}",
            f"- Run {row['run_id']} at {row['utc']}: `{row['command']}`"]


Column = tuple[str, Callable[[dict], str]]


def markdown_table(columns: Sequence[Column], rows: list[dict[str, object]]) -> str:
    lines = ["| " + " | ".join(h for h, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r) for _, fmt in columns) + " |" for r in rows]
    return "\n".join(lines)


def write_markdown(bench: str, title: str, sections: Sequence[tuple[str, Sequence[Column]]], notes: Sequence[str],
                   path: Path = RESULTS_FILE) -> Path:
    """Rewrites ``benchmarks/<bench>.md`` from the latest run's rows of ``path``: a machine header
    and one table per section (rows whose "section" is its heading), then ``notes``."""
    rows = latest_run(bench, path)
    if not rows:
        raise ValueError(f"write_markdown: no rows of benchmark {bench!r} in {path}")
    text = [f"# {title}", "", *machine_header(rows[0]), ""]
    for heading, columns in sections:
        mine = [r for r in rows if r.get("section") == heading]
        if mine:
            text += [f"## {heading}", "", markdown_table(columns, mine), ""]
    text += [f"- {n}" for n in notes]
    out = "\n".join(text) + "\n"
    print(out)
    md = path.parent / f"{bench}.md"
    md.write_text(out)
    return md


def fmt(value: object, spec: str = ".0f", suffix: str = "") -> str:
    """``value`` formatted with ``spec``, or "-" when the row has none."""
    return "-" if value is None else f"{value:{spec}}{suffix}"
