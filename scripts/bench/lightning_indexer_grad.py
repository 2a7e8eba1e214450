"""Benchmark of ``lightning_indexer_grad``, the gradient of the indexer's selected scores.

Usage (from any directory):
    python scripts/bench/lightning_indexer_grad.py [--quick] [--s1 4096 --s2 4096 --k 2048 ...]
        [--composite-s1 1024 --composite-k 512] [--torch-sizes auto|all|composite|none]

Measures in one run, DeepSeek-V3.2's indexer (Nidx=64, Didx=128, K=2048 selected keys), bf16 inputs,
float32 d_values, BSND, B=1, causal (sparse_mode=3), each measurement in its own subprocess: the op in
GRAPH (GRAPH_MODE + ``ms.jit``) and PyNative, its GFLOP/s, the GEMM ceiling of its per-query-row
products (common.ceiling) and the ratio to it, NumPy float32 GEMM at 2048^3 for continuity, peak
memory / IO, and its speed-up over the baselines a user would otherwise run to get these gradients:
MindSpore autodiff of the float32 composite forward (gather the selected key_index rows,
``sparse_values = sum_g weights * relu(query_index . key_index)``, loss = sum(sparse_values *
d_values), ``ms.value_and_grad`` w.r.t. query_index, key_index, weights; PyNative and GRAPH) and
PyTorch bf16 eager autograd of the same (torch_baseline.py) when torch is importable.

FLOP count, per query row over its n visible selected keys (the kernel's three GEMMs):
    Sx 2*Nidx*n*Didx + d_query_index 2*Nidx*n*Didx + d_key_index 2*Nidx*n*Didx = 6*Nidx*Didx*n,
summed over rows; the element-wise ReLU step, d_weights and the key scatter are not counted.
Selected keys: row s1 takes min(K, visible) distinct random visible keys, -1 elsewhere (as
lightning_indexer.py), so every selected key is visible and the -1 slots are the only mask.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from common import Product, ceiling_cell, fmt, keys_per_row, spawn_json

HERE = Path(__file__).resolve().parent
BENCH = "lightning_indexer_grad"
KERNELS = "Kernel (bfloat16 inputs, float32 d_values, BSND, causal)"
SPEEDUP = "Speed-up of lightning_indexer_grad over the baselines"
SIZE_ARGS = ("s1", "s2", "k", "nidx", "didx")


def visible(a: argparse.Namespace) -> np.ndarray:
    """Keys each query row sees (causal, right-down aligned)."""
    return np.minimum(a.s2, np.arange(a.s1) + a.s2 - a.s1 + 1)


def selected(a: argparse.Namespace) -> np.ndarray:
    """Visible selected keys per row (n of the FLOP count)."""
    return np.minimum(visible(a), a.k)


def make_inputs(a: argparse.Namespace, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """BSND float32 arrays (the kernel child casts the indexer tensors to bf16)."""
    f = lambda *s: rng.standard_normal(s, dtype=np.float32) * 0.5  # noqa: E731
    x = {"query_index": f(1, a.s1, a.nidx, a.didx), "key_index": f(1, a.s2, 1, a.didx), "weights": f(1, a.s1, a.nidx)}
    idx = np.full((1, a.s1, 1, a.k), -1, np.int32)
    for r, (lim, n) in enumerate(zip(visible(a).tolist(), selected(a).tolist())):
        idx[0, r, 0, :n] = rng.choice(lim, n, replace=False) if lim > n else np.arange(n)
    x["sparse_indices"] = idx
    x["d_values"] = f(1, a.s1, 1, a.k)
    return x


def grad_products(a: argparse.Namespace, kv: int) -> list[Product]:
    """The kernel's GEMMs per query row over kv selected keys, in its own operand layouts
    (cpu/indexer_score_backward.h keeps the scores key-major, [Kv x Nidx])."""
    return [Product("Sx", kv, a.nidx, a.didx, tb=True), Product("dQidx", a.nidx, a.didx, kv, ta=True),
            Product("dKidx", kv, a.didx, a.nidx)]


def grad_flops(a: argparse.Namespace, n: np.ndarray) -> float:
    return float(n.sum()) * 3 * 2 * a.nidx * a.didx


def _nbytes(*tensors: object) -> int:
    return int(sum(x.nbytes for x in tensors if x is not None))


def child_kernel(a: argparse.Namespace) -> dict:
    import mindspore as ms
    from common import PeakMemory, sync, timeit
    ms.set_device("CPU")
    import ms_grad_ops as mgo
    x = make_inputs(a, np.random.default_rng(0))
    args = tuple(ms.Tensor(x[n], ms.bfloat16) for n in ("query_index", "key_index", "weights")) + (
        ms.Tensor(x["sparse_indices"]), ms.Tensor(x["d_values"]))

    def grad(*xs: ms.Tensor) -> tuple:
        return mgo.ops.lightning_indexer_grad(*xs, layout="BSND", sparse_mode=3)

    if a.graph:  # GRAPH_MODE context: in PyNative even ms.jit calls wait by busy-waiting on a core
        ms.set_context(mode=ms.GRAPH_MODE)
        grad = ms.jit(grad)
    with PeakMemory() as mem:
        out = grad(*args)
        sync(out)
    io = _nbytes(*args) + _nbytes(*out)
    del out
    return {"t_grad": timeit(lambda: grad(*args), repeat=a.reps), "mem_grad": (_nbytes(*args) + mem.growth) / io,
            "io_grad": io}


def composite_step(x: dict[str, np.ndarray], graph: bool = False) -> tuple:
    """MindSpore autodiff of the composite forward on ``x`` (make_inputs' arrays, float32): the
    ``ms.value_and_grad`` step and its arguments (query_index, key_index, weights without B)."""
    import mindspore as ms
    from mindspore import ops as O
    idx = x["sparse_indices"][0, :, 0]                                             # [S1, K]
    s1, k = idx.shape
    safe = ms.Tensor(np.maximum(idx, 0).reshape(-1))
    # Every selected key is visible (causal selection), so the -1 slots are the only mask: folded into
    # the upstream gradient once, as a user with these indices would.
    dv = ms.Tensor(np.where(idx >= 0, x["d_values"][0, :, 0], 0).astype(np.float32))

    def loss(qi: ms.Tensor, ki: ms.Tensor, w: ms.Tensor) -> ms.Tensor:
        kg = O.gather(ki[:, 0], safe, 0).reshape(s1, k, -1)                        # [S1, K, Didx]
        sx = O.bmm(qi, kg.transpose(0, 2, 1))                                       # [S1, Nidx, K]
        values = (w[..., None] * O.relu(sx)).sum(1)                                 # [S1, K]
        return (values * dv).sum()

    step = ms.value_and_grad(loss, grad_position=(0, 1, 2))
    if graph:
        ms.set_context(mode=ms.GRAPH_MODE)
        step = ms.jit(step)
    return step, tuple(ms.Tensor(x[n][0]) for n in ("query_index", "key_index", "weights"))


def child_composite(a: argparse.Namespace) -> dict:
    import mindspore as ms
    from common import PeakMemory, sync, timeit
    ms.set_device("CPU")
    step, args = composite_step(make_inputs(a, np.random.default_rng(0)), a.graph)
    with PeakMemory() as mem:   # the first call compiles in GRAPH: not timed
        sync(step(*args), every_output=True)
    return {"time": timeit(lambda: step(*args), warmup=0, repeat=a.reps, every_output=True),
            "growth_gb": mem.growth / 1e9}


def child_torch(a: argparse.Namespace) -> dict:
    """PyTorch bf16 eager autograd of the same values (MindSpore is not imported here)."""
    import torch_baseline
    return torch_baseline.indexer_values(make_inputs(a, np.random.default_rng(0)), a.reps)


def run_child(kind: str, a: argparse.Namespace, timeout: float | None = None, **over: int) -> dict:
    graph = ["--graph"] if over.pop("graph", 0) else []
    argv = [str(HERE / "lightning_indexer_grad.py"), "--child", kind, "--reps", str(over.pop("reps", a.reps)),
            *graph]
    for name in SIZE_ARGS:
        argv += [f"--{name}", str(over.get(name, getattr(a, name)))]
    return spawn_json(argv, cwd=HERE, timeout=timeout)


def kernel_row(a: argparse.Namespace, py: dict, gr: dict, numpy_big: float) -> dict:
    from common import ceiling
    n = selected(a)
    kv = keys_per_row(n.sum(), a.s1)
    flops = grad_flops(a, n)
    t_py, t_gr = py["t_grad"], gr["t_grad"]
    rate = flops / min(t_py, t_gr) / 1e9
    ceil = ceiling(grad_products(a, kv), "bfloat16")
    return {"section": KERNELS, "op": "lightning_indexer_grad", "sizes": {**{s: getattr(a, s) for s in SIZE_ARGS},
                                                                         "visible_selected": int(n.sum()), "Kv": kv},
            "dtype": "bfloat16", "mode": "GRAPH" if t_gr <= t_py else "PyNative", "time_s": min(t_py, t_gr),
            "time_graph_s": t_gr, "time_pynative_s": t_py, "gflop": flops / 1e9, "gflops": rate, "ceiling": ceil,
            "ratio": rate / ceil["gflops"], "numpy_2048_gflops": numpy_big, "numpy_ratio": rate / numpy_big,
            "peak_mem_io": py["mem_grad"], "io_bytes": py["io_grad"]}


def speedup_row(a: argparse.Namespace, sizes: dict, ours_py: dict, ours_gr: dict, comp: dict[str, dict],
                torch_r: dict) -> dict:
    """``comp``: composite results by mode ("pynative", "graph"); empty when not run at this size."""
    t_best = min(ours_py["t_grad"], ours_gr["t_grad"])
    row = {"section": SPEEDUP, "op": "lightning_indexer_grad", "sizes": {n: sizes.get(n, getattr(a, n))
                                                                         for n in SIZE_ARGS},
           "dtype": "bfloat16", "mode": "best of GRAPH/PyNative", "time_s": t_best,
           "time_graph_s": ours_gr["t_grad"], "time_pynative_s": ours_py["t_grad"],
           "torch_time_s": torch_r.get("time"), "torch": torch_r.get("error") or torch_r.get("torch"),
           "torch_rss_gib": torch_r.get("rss_gib"),
           "speedup_torch": torch_r["time"] / t_best if "time" in torch_r else None}
    runs = {mode: r for mode, r in comp.items() if "error" not in r}
    for mode, r in comp.items():
        row[f"composite_{mode}_s"] = r.get("time")
        row[f"composite_{mode}_error"] = r.get("error")
    if runs:
        best = min(runs.values(), key=lambda r: r["time"])   # the faster mode a user could pick
        row.update(composite_time_s=best["time"], composite_growth_gb=best["growth_gb"],
                   speedup_composite=best["time"] / t_best)
    return row


def _ms(v: object) -> str:
    return fmt(None if v is None else v * 1e3)


def _sizes(r: dict) -> str:
    z = r["sizes"]
    return f"{z['s1']} / {z['s2']} / {z['k']}"


SECTIONS = [
    (KERNELS, [
        ("op", lambda r: r["op"]), ("S1 / S2 / K", _sizes), ("Kv", lambda r: str(r["sizes"]["Kv"])),
        ("ms GRAPH / PyNative", lambda r: f"{_ms(r['time_graph_s'])} / {_ms(r['time_pynative_s'])}"),
        ("GFLOP", lambda r: fmt(r["gflop"], ".1f")), ("GFLOP/s", lambda r: fmt(r["gflops"])),
        ("GEMM ceiling GFLOP/s (operand; per GEMM)", ceiling_cell),
        ("/ ceiling", lambda r: fmt(r["ratio"], ".2f")),
        ("/ NumPy f32 2048^3", lambda r: fmt(r["numpy_ratio"], ".2f")),
        ("peak mem / IO", lambda r: fmt(r["peak_mem_io"], ".2f"))]),
    (SPEEDUP, [
        ("S1 / S2 / K", _sizes),
        ("ours ms (GRAPH / PyNative)", lambda r: f"{_ms(r['time_graph_s'])} / {_ms(r['time_pynative_s'])}"),
        ("PyTorch bf16 eager ms", lambda r: _ms(r["torch_time_s"]) if r["torch_time_s"] else r["torch"]),
        ("speed-up vs PyTorch", lambda r: fmt(r["speedup_torch"], ".1f", "x")),
        ("MindSpore f32 composite ms (PyNative / GRAPH)",
         lambda r: f"{_ms(r.get('composite_pynative_s'))} / {_ms(r.get('composite_graph_s'))}"),
        ("speed-up vs composite (faster modes)", lambda r: fmt(r.get("speedup_composite"), ".1f", "x"))]),
]


def notes(a: argparse.Namespace) -> list[str]:
    return [
        f"Sizes: Nidx={a.nidx}, Didx={a.didx} (DeepSeek-V3.2's indexer), B=1. Times: median warm call of "
        f"--reps {a.reps}; GFLOP/s and ratios use the faster of GRAPH (GRAPH_MODE + ms.jit) and PyNative, each in its "
        "own process.",
        "FLOPs: 6*Nidx*Didx*n per query row over its n visible selected keys (Sx, d_query_index and d_key_index "
        "GEMMs, 2*Nidx*n*Didx each); the ReLU step, d_weights and the key scatter are not counted.",
        "GEMM ceiling: the rate of the kernel's per-query-row GEMMs, in its own operand layouts "
        "(cpu/indexer_score_backward.h), through the kernel library's own GEMM wrapper (cpu/gemm_rate.cc, the "
        "oneDNN named above), 2 threads running independent calls, in the benchmark's main process after "
        "`import mindspore`, at Kv = mean visible selected keys per row rounded up to 64: Sx=[KvxDidx]x[NidxxDidx]^T, "
        "dQidx=[KvxNidx]^Tx[KvxDidx], dKidx=[KvxNidx]x[NidxxDidx]; ceiling = total FLOPs / sum(FLOPs_i / rate_i). "
        "Operand bf16 only when this CPU has oneDNN's bf16 matmul (MgoBf16Native), as in the kernel; per-product "
        "rates are in benchmarks/results.jsonl.",
        "peak mem / IO = (input bytes + peak RSS growth during the first call, PyNative) / (input + output bytes).",
        "Baselines compute the values and their gradients (autodiff needs the forward); ours is the gradient "
        "alone, its forward being lightning_indexer (benchmarked in lightning_indexer.md). MindSpore composite: "
        "float32 (MindSpore's CPU Gather has no bf16 kernel), gather the selected key_index rows, "
        "sum_g weights * relu(query_index . key_index), loss = sum(values * d_values) with the -1 slots' d_values "
        "zeroed, ms.value_and_grad w.r.t. query_index, key_index, weights; median of 2 calls after the first, "
        "PyNative and GRAPH (GRAPH_MODE + ms.jit) each in its own process; speed-up = faster composite mode / "
        "faster mode of ours. It runs at --composite-s1/--composite-k, not the kernel's size: at S1=S2=2048, K=1024 "
        "its GRAPH process already peaked at 12 GB RSS (6.5 GB PyNative) on this 23 GB machine (2026-12-05).",
        "PyTorch: bf16 eager autograd of the same values (backward with d_values), 2 threads, its own process, rows "
        "in chunks of <= 1 GiB of gathered keys with one backward per chunk; median of --torch-reps calls after a "
        "warm-up over the first 32 rows.",
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    for name, v in (("s1", 4096), ("s2", 4096), ("k", 2048), ("nidx", 64), ("didx", 128), ("composite_s1", 1024),
                    ("composite_k", 512), ("reps", 3), ("torch_reps", 1)):
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=v)
    ap.add_argument("--torch-sizes", choices=["auto", "all", "composite", "none"], default="auto",
                    help="where to time PyTorch: the benchmark size and the composite's, the composite's only, "
                         "or nowhere; auto = both when the CPU has a bf16 matmul (avx512_bf16/amx_bf16)")
    ap.add_argument("--torch-timeout", type=float, default=1200, help="seconds before a PyTorch run is abandoned")
    ap.add_argument("--quick", action="store_true", help="S1=S2=2048, K=1024; composite and PyTorch at S1=512, K=256")
    ap.add_argument("--child", choices=["kernel", "composite", "torch"])
    ap.add_argument("--graph", action="store_true", help="kernel/composite child: GRAPH_MODE + ms.jit")
    a = ap.parse_args()
    if a.child:
        print(json.dumps({"kernel": child_kernel, "composite": child_composite, "torch": child_torch}[a.child](a)))
        return
    if a.quick:
        a.s1, a.s2, a.k, a.composite_s1, a.composite_k = 2048, 2048, 1024, 512, 256

    from common import append_results, cpu_bf16_matmul, numpy_gemm_gflops, run_context, torch_version, write_markdown
    start, load_start = time.time(), os.getloadavg()
    ctx = run_context(BENCH)
    numpy_big = numpy_gemm_gflops(2048, 2048, 2048)
    rows: list[dict] = []
    full_py, full_gr = run_child("kernel", a), run_child("kernel", a, graph=1)
    if "error" not in full_py and "error" not in full_gr:
        rows.append(kernel_row(a, full_py, full_gr, numpy_big))
    torch_missing = ("skipped (--torch-sizes none)" if a.torch_sizes == "none" else
                     "" if torch_version() else "torch not installed")
    everywhere = a.torch_sizes == "all" or (a.torch_sizes == "auto" and cpu_bf16_matmul())

    def torch_at(**over: int) -> dict:
        return {"error": torch_missing} if torch_missing else run_child(
            "torch", a, timeout=a.torch_timeout, reps=a.torch_reps, **over)

    if everywhere and rows:
        rows.append(speedup_row(a, {}, full_py, full_gr, {}, torch_at()))
    small = {"s1": a.composite_s1, "s2": a.composite_s1, "k": a.composite_k}
    ours_py, ours_gr = run_child("kernel", a, **small), run_child("kernel", a, graph=1, **small)
    comp = {"pynative": run_child("composite", a, reps=2, **small),
            "graph": run_child("composite", a, reps=2, graph=1, **small)}
    if "error" not in ours_py and "error" not in ours_gr:
        rows.append(speedup_row(a, small, ours_py, ours_gr, comp, torch_at(**small)))
    load_end = os.getloadavg()
    for row in rows:
        row["load_avg"] = {"start": load_start, "end": load_end}
    extra = [f"Benchmark wall time {time.time() - start:.0f} s; load average (1/5/15 min) "
             f"{' / '.join(f'{v:.2f}' for v in load_start)} at the start, "
             f"{' / '.join(f'{v:.2f}' for v in load_end)} at the end (2 cores shared with other jobs)."]
    if torch_missing:
        extra.append(f"PyTorch baseline: {torch_missing}.")
    elif not everywhere:
        extra.append("PyTorch was timed at the composite's size only: this CPU has no bf16 matmul (no avx512_bf16 "
                     "or amx_bf16), where PyTorch's bf16 matmul runs at about 1 GFLOP/s (--torch-sizes all forces "
                     "the benchmark size).")
    for name, r in (("kernel PyNative", full_py), ("kernel GRAPH", full_gr), ("composite PyNative", comp["pynative"]),
                    ("composite GRAPH", comp["graph"])):
        if "error" in r:
            extra.append(f"{name} failed: {r['error']}")
    append_results(ctx, rows)
    write_markdown(BENCH, "lightning_indexer_grad (CPU)", SECTIONS, [*notes(a), *extra])


if __name__ == "__main__":
    main()
