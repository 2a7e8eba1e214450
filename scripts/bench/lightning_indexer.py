"""Benchmark of ``sparse_lightning_indexer_grad_kl_loss`` and the ``lightning_indexer`` forward.

Usage (from a directory outside the repo root):
    python scripts/bench/lightning_indexer.py [--quick] [--s1 4096 --s2 4096 --k 2048 ...]
        [--composite-s1 1024 --composite-k 512] [--torch-sizes auto|all|composite|none]

Measures in one run, bf16, BSND, B=1, causal (sparse_mode=3), each measurement in its own
subprocess: both ops in GRAPH (GRAPH_MODE + ``ms.jit``) and PyNative, their GFLOP/s, the GEMM
ceiling of their per-query-row products (common.ceiling) and the ratio to it, NumPy float32 GEMM at
2048^3 for continuity, peak memory / IO, and the speed-up of the grad kernel over a MindSpore
float32 composite (gather + dense math from mindspore.ops, gradients by ``ms.value_and_grad``)
and over PyTorch bf16 eager autograd (torch_baseline.py) at a size where they fit.

FLOP counts, per query row over its n visible selected keys (grad) or its m visible keys (forward):
    grad: teacher scores 2*N1*n*(D+Dr) + index scores 2*Nidx*n*Didx + two gradient GEMMs 2*2*Nidx*n*Didx;
    forward: index scores 2*Nidx*m*Didx.
Statistics are synthetic (softmax_max = 4, softmax_sum = n): timing does not depend on them.
Selected keys: row s1 takes min(K, visible) distinct random visible keys, -1 elsewhere.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from common import Product, ceiling_cell, fmt, keys_per_row, spawn_json

HERE = Path(__file__).resolve().parent
BENCH = "lightning_indexer"
KERNELS = "Kernels (bfloat16, BSND, causal)"
SPEEDUP = "Speed-up of sparse_lightning_indexer_grad_kl_loss over the baselines"
SIZE_ARGS = ("s1", "s2", "k", "n1", "d", "dr", "nidx", "didx")


def visible(a: argparse.Namespace) -> np.ndarray:
    """Keys each query row sees (causal, right-down aligned)."""
    return np.minimum(a.s2, np.arange(a.s1) + a.s2 - a.s1 + 1)


def make_inputs(a: argparse.Namespace, rng: np.random.Generator) -> tuple[dict, np.ndarray]:
    s1, s2, k = a.s1, a.s2, a.k
    f = lambda *s: (rng.standard_normal(s, dtype=np.float32) * 0.5)  # noqa: E731
    x = {"query": f(1, s1, a.n1, a.d), "key": f(1, s2, 1, a.d), "query_rope": f(1, s1, a.n1, a.dr),
         "key_rope": f(1, s2, 1, a.dr), "query_index": f(1, s1, a.nidx, a.didx), "key_index": f(1, s2, 1, a.didx),
         "weights": f(1, s1, a.nidx)}
    idx = np.full((1, s1, 1, k), -1, np.int32)
    lims = visible(a)
    selected = np.minimum(lims, k)
    for r in range(s1):
        lim, n = int(lims[r]), int(selected[r])
        idx[0, r, 0, :n] = rng.choice(lim, n, replace=False) if lim > n else np.arange(n)
    x["sparse_indices"] = idx
    x["softmax_max"] = np.full((1, 1, s1, a.n1), 4.0, np.float32)
    x["softmax_sum"] = np.broadcast_to(np.maximum(selected, 1)[None, None, :, None], (1, 1, s1, a.n1)).astype(
        np.float32)
    return x, selected


def grad_products(a: argparse.Namespace, kv: int) -> list[Product]:
    """The grad kernel's GEMMs per query row over kv selected keys (see its header comment)."""
    return [Product("teacher S", a.n1, kv, a.d + a.dr, tb=True), Product("Sx", a.nidx, kv, a.didx, tb=True),
            Product("dQidx", a.nidx, a.didx, kv), Product("dKidx", kv, a.didx, a.nidx, ta=True)]


def fwd_products(a: argparse.Namespace, kv: int) -> list[Product]:
    return [Product("I", a.nidx, kv, a.didx, tb=True)]


def grad_flops(a: argparse.Namespace, selected: np.ndarray) -> float:
    return float(selected.sum()) * (2 * a.n1 * (a.d + a.dr) + 3 * 2 * a.nidx * a.didx)


def fwd_flops(a: argparse.Namespace) -> float:
    return float(visible(a).sum()) * 2 * a.nidx * a.didx


def _nbytes(*tensors: object) -> int:
    return int(sum(x.nbytes for x in tensors if x is not None))


def child_kernel(a: argparse.Namespace) -> dict:
    import mindspore as ms
    from common import PeakMemory, sync, timeit
    ms.set_device("CPU")
    import ms_grad_ops as mgo
    x, _ = make_inputs(a, np.random.default_rng(0))
    dt = ms.bfloat16
    t = {n: ms.Tensor(v, dt if v.dtype == np.float32 and "softmax" not in n else None) for n, v in x.items()}
    args = (t["query"], t["key"], t["query_index"], t["key_index"], t["weights"], t["sparse_indices"],
            t["softmax_max"], t["softmax_sum"], t["query_rope"], t["key_rope"])
    fwd_args = (t["query_index"], t["key_index"], t["weights"])
    scale = float(1 / np.sqrt(a.d + a.dr))

    def grad(*xs: ms.Tensor) -> tuple:
        return mgo.ops.sparse_lightning_indexer_grad_kl_loss(*xs, scale_value=scale, layout="BSND")

    def fwd(qi: ms.Tensor, ki: ms.Tensor, w: ms.Tensor) -> tuple:
        return mgo.ops.lightning_indexer(qi, ki, w, sparse_count=a.k, layout="BSND")

    if a.graph:  # GRAPH_MODE context: in PyNative even ms.jit calls wait by busy-waiting on a core
        ms.set_context(mode=ms.GRAPH_MODE)
        grad, fwd = ms.jit(grad), ms.jit(fwd)
    with PeakMemory() as mem_g:
        out_g = grad(*args)
        sync(out_g)
    with PeakMemory() as mem_f:
        out_f = fwd(*fwd_args)
        sync(out_f)
    io_g, io_f = _nbytes(*args) + _nbytes(*out_g), _nbytes(*fwd_args) + _nbytes(*out_f)
    del out_g, out_f
    return {"t_grad": timeit(lambda: grad(*args), repeat=a.reps), "t_fwd": timeit(lambda: fwd(*fwd_args), repeat=1),
            "mem_grad": (_nbytes(*args) + mem_g.growth) / io_g, "mem_fwd": (_nbytes(*fwd_args) + mem_f.growth) / io_f,
            "io_grad": io_g, "io_fwd": io_f}


def child_composite(a: argparse.Namespace) -> dict:
    import resource

    import mindspore as ms
    from common import timeit
    from mindspore import ops as O
    ms.set_device("CPU")
    x, _ = make_inputs(a, np.random.default_rng(0))
    t = {n: ms.Tensor(v) for n, v in x.items()}
    scale = float(1 / np.sqrt(a.d + a.dr))
    s1 = a.s1
    qf = O.concat((t["query"][0], t["query_rope"][0]), -1)                    # [S1, N1, Dq]
    kf = O.concat((t["key"][0, :, 0], t["key_rope"][0, :, 0]), -1)            # [S2, Dq]
    idx = t["sparse_indices"][0, :, 0]                                         # [S1, K]
    valid = idx >= 0
    safe = O.maximum(idx, 0)
    mx, sm = t["softmax_max"][0, 0], t["softmax_sum"][0, 0]                   # [S1, N1]

    def loss_fn(qi: ms.Tensor, ki: ms.Tensor, w: ms.Tensor) -> ms.Tensor:
        kg = O.gather(kf, safe.reshape(-1), 0).reshape(s1, a.k, -1)            # [S1, K, Dq]
        s = O.bmm(qf, kg.transpose(0, 2, 1)) * scale                          # [S1, N1, K]
        p = (O.exp(s - mx[..., None]) / sm[..., None]).mean(1)
        p = O.where(valid, p, O.zeros_like(p))
        kig = O.gather(ki[:, 0], safe.reshape(-1), 0).reshape(s1, a.k, -1)    # [S1, K, Didx]
        sx = O.bmm(qi, kig.transpose(0, 2, 1))                                 # [S1, Nidx, K]
        i = (w[..., None] * O.relu(sx)).sum(1)
        i = O.where(valid, i, O.full_like(i, -1e30))
        logy = O.log_softmax(i, -1)
        lp = O.log(O.maximum(p, 1e-8))
        term = p * (lp - O.maximum(logy, float(np.log(1e-8))))
        return O.where(valid, term, O.zeros_like(term)).sum()

    fn = ms.value_and_grad(loss_fn, grad_position=(0, 1, 2))
    qi, ki, w = t["query_index"][0], t["key_index"][0], t["weights"][0]
    t_comp = timeit(lambda: fn(qi, ki, w), repeat=a.reps, every_output=True)
    return {"time": t_comp, "rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def child_torch(a: argparse.Namespace) -> dict:
    """PyTorch bf16 eager autograd of the same loss (MindSpore is not imported here)."""
    import torch_baseline
    x, _ = make_inputs(a, np.random.default_rng(0))
    return torch_baseline.indexer_loss(x, float(1 / np.sqrt(a.d + a.dr)), a.reps)


def run_child(kind: str, a: argparse.Namespace, timeout: float | None = None, **over: int) -> dict:
    graph = ["--graph"] if over.pop("graph", 0) else []
    argv = [str(HERE / "lightning_indexer.py"), "--child", kind, "--reps", str(over.pop("reps", a.reps)), *graph]
    for name in SIZE_ARGS:
        argv += [f"--{name}", str(over.get(name, getattr(a, name)))]
    return spawn_json(argv, cwd=HERE, timeout=timeout)


def kernel_rows(a: argparse.Namespace, py: dict, gr: dict, numpy_big: float) -> list[dict]:
    from common import ceiling
    selected = np.minimum(visible(a), a.k)
    sizes = {n: getattr(a, n) for n in SIZE_ARGS}
    rows = []
    for op, key, flops, kv in (
            ("sparse_lightning_indexer_grad_kl_loss", "grad", grad_flops(a, selected),
             keys_per_row(selected.sum(), a.s1)),
            ("lightning_indexer", "fwd", fwd_flops(a), keys_per_row(visible(a).sum(), a.s1))):
        t_py, t_gr = py[f"t_{key}"], gr[f"t_{key}"]
        rate = flops / min(t_py, t_gr) / 1e9
        ceil = ceiling((grad_products if key == "grad" else fwd_products)(a, kv), "bfloat16")
        rows.append({"section": KERNELS, "op": op, "sizes": {**sizes, "Kv": kv}, "dtype": "bfloat16",
                     "mode": "GRAPH" if t_gr <= t_py else "PyNative", "time_s": min(t_py, t_gr), "time_graph_s": t_gr,
                     "time_pynative_s": t_py, "gflop": flops / 1e9, "gflops": rate, "ceiling": ceil,
                     "ratio": rate / ceil["gflops"], "numpy_2048_gflops": numpy_big, "numpy_ratio": rate / numpy_big,
                     "peak_mem_io": py[f"mem_{key}"], "io_bytes": py[f"io_{key}"]})
    return rows


def speedup_row(a: argparse.Namespace, small: dict, ours_py: dict, ours_gr: dict, comp: dict | None,
                torch_r: dict) -> dict:
    t_best = min(ours_py["t_grad"], ours_gr["t_grad"])
    row = {"section": SPEEDUP, "op": "sparse_lightning_indexer_grad_kl_loss",
           "sizes": {n: small.get(n, getattr(a, n)) for n in SIZE_ARGS}, "dtype": "bfloat16",
           "mode": "best of GRAPH/PyNative", "time_s": t_best, "time_pynative_s": ours_py["t_grad"],
           "torch_time_s": torch_r.get("time"), "torch": torch_r.get("error") or torch_r.get("torch"),
           "torch_rss_gib": torch_r.get("rss_gib"),
           "speedup_torch": torch_r["time"] / t_best if "time" in torch_r else None}
    if comp:
        row.update(composite_time_s=comp["time"], composite_rss_gib=comp["rss_gib"],
                   speedup_composite=comp["time"] / ours_py["t_grad"])
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
        ("GFLOP", lambda r: fmt(r["gflop"])), ("GFLOP/s", lambda r: fmt(r["gflops"])),
        ("GEMM ceiling GFLOP/s (operand; per GEMM)", ceiling_cell),
        ("/ ceiling", lambda r: fmt(r["ratio"], ".2f")),
        ("/ NumPy f32 2048^3", lambda r: fmt(r["numpy_ratio"], ".2f")),
        ("peak mem / IO", lambda r: fmt(r["peak_mem_io"], ".2f"))]),
    (SPEEDUP, [
        ("S1 / S2 / K", _sizes),
        ("ours ms (best mode / PyNative)", lambda r: f"{_ms(r['time_s'])} / {_ms(r['time_pynative_s'])}"),
        ("PyTorch bf16 eager ms", lambda r: _ms(r["torch_time_s"]) if r["torch_time_s"] else r["torch"]),
        ("speed-up vs PyTorch", lambda r: fmt(r["speedup_torch"], ".1f", "x")),
        ("MindSpore f32 composite PyNative ms", lambda r: _ms(r.get("composite_time_s"))),
        ("speed-up vs composite (both PyNative)", lambda r: fmt(r.get("speedup_composite"), ".1f", "x"))]),
]


def notes(a: argparse.Namespace) -> list[str]:
    return [
        f"Sizes: N1={a.n1}, D={a.d}+{a.dr}, Nidx={a.nidx}, Didx={a.didx}. Times: median warm call (forward: one call); "
        "GFLOP/s and ratios use the faster of GRAPH (GRAPH_MODE + ms.jit) and PyNative, each in its own process.",
        "FLOPs: grad 2*N1*n*(D+Dr) + 3*2*Nidx*n*Didx per row over its n visible selected keys; forward "
        "2*Nidx*m*Didx per row over its m visible keys (the top-K selection is not counted).",
        "GEMM ceiling: the rate of the kernel's per-query-row GEMMs through the kernel library's own GEMM wrapper "
        "(cpu/gemm_rate.cc, the oneDNN named above), 2 threads running independent calls, in the benchmark's main "
        "process after `import mindspore`; ceiling = total FLOPs / sum(FLOPs_i / rate_i). Grad at Kv = mean visible "
        "selected keys per row rounded up to 64: teacher S=[N1x(D+Dr)]x[Kvx(D+Dr)]^T, Sx=[NidxxDidx]x[KvxDidx]^T, "
        "dQidx=[NidxxKv]x[KvxDidx], dKidx=[NidxxKv]^Tx[NidxxDidx]; forward I=[NidxxDidx]x[KvxDidx]^T at Kv = mean "
        "visible keys per row rounded up to 64. Operand bf16 only when this CPU has oneDNN's bf16 matmul "
        "(MgoBf16Native), as in the kernels; per-product rates are in benchmarks/results.jsonl.",
        "peak mem / IO = (input bytes + peak RSS growth during the first call, PyNative) / (input + output bytes).",
        "PyTorch: bf16 eager autograd (teacher p from the attention scores under no_grad, index scores, relu, "
        "weights, softmax, KL; backward of query_index, key_index, weights), 2 threads, its own process, rows in "
        "chunks of <= 1 GiB of gathered keys with one backward per chunk; median of --torch-reps calls after a "
        "warm-up over the first 32 rows. MindSpore composite: "
        "float32 (its CPU bf16 ops fail), ms.value_and_grad, PyNative.",
        "Where the time goes (perf record -g, grad bf16, S=2048, K=1024, GRAPH, AMD EPYC AVX2-only, 2026-12-03; "
        "share of kernel CPU samples before -> after issue 12): GEMM ~60% -> ~75%, bf16->f32 gathers ~13% -> ~9%, "
        "exp ~11% -> ~2%, index-score gradients ~11% -> ~1% (both ran scalar: GCC kept the float selects as "
        "branches under -ftrapping-math), dK scatter + reductions ~4% -> ~6%, malloc inside dnnl_sgemm ~4%. "
        "Forward: GEMM 25% -> ~82% of the kernel's samples after the heap top-k became nth_element + a sort "
        "of the K selected (~10%). The grad's dK GEMM runs untransposed ([KvxNidx] key-major scores), a faster "
        "form than the ceiling's transposed-A product, so its ratio can exceed 1.",
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    for name, v in (("s1", 4096), ("s2", 4096), ("k", 2048), ("n1", 64), ("d", 512), ("dr", 64), ("nidx", 64),
                    ("didx", 128), ("composite_s1", 1024), ("composite_k", 512), ("reps", 2), ("torch_reps", 1)):
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=v)
    ap.add_argument("--torch-sizes", choices=["auto", "all", "composite", "none"], default="auto",
                    help="where to time PyTorch: the benchmark size and the composite's, the composite's only, "
                         "or nowhere; auto = both when the CPU has a bf16 matmul (avx512_bf16/amx_bf16)")
    ap.add_argument("--torch-timeout", type=float, default=1200, help="seconds before a PyTorch run is abandoned")
    ap.add_argument("--quick", action="store_true", help="S1=S2=2048, K=1024; composite and PyTorch at S1=512, K=256")
    ap.add_argument("--child", choices=["kernel", "composite", "torch"])
    ap.add_argument("--graph", action="store_true", help="kernel child: GRAPH_MODE + ms.jit")
    a = ap.parse_args()
    if a.child:
        print(json.dumps({"kernel": child_kernel, "composite": child_composite, "torch": child_torch}[a.child](a)))
        return
    if a.quick:
        a.s1, a.s2, a.k, a.composite_s1, a.composite_k = 2048, 2048, 1024, 512, 256

    from common import append_results, cpu_bf16_matmul, numpy_gemm_gflops, run_context, torch_version, write_markdown
    start = time.time()
    ctx = run_context(BENCH)
    numpy_big = numpy_gemm_gflops(2048, 2048, 2048)
    rows: list[dict] = []
    full_py, full_gr = run_child("kernel", a), run_child("kernel", a, graph=1)
    if "error" not in full_py and "error" not in full_gr:
        rows += kernel_rows(a, full_py, full_gr, numpy_big)
    torch_missing = ("skipped (--torch-sizes none)" if a.torch_sizes == "none" else
                     "" if torch_version() else "torch not installed")
    everywhere = a.torch_sizes == "all" or (a.torch_sizes == "auto" and cpu_bf16_matmul())

    def torch_at(**over: int) -> dict:
        return {"error": torch_missing} if torch_missing else run_child(
            "torch", a, timeout=a.torch_timeout, reps=a.torch_reps, **over)

    if everywhere and rows:
        rows.append(speedup_row(a, {}, full_py, full_gr, None, torch_at()))
    small = {"s1": a.composite_s1, "s2": a.composite_s1, "k": a.composite_k}
    ours_py, ours_gr = run_child("kernel", a, **small), run_child("kernel", a, graph=1, **small)
    comp = run_child("composite", a, **small)
    if "error" not in ours_py and "error" not in ours_gr:
        rows.append(speedup_row(a, small, ours_py, ours_gr, None if "error" in comp else comp, torch_at(**small)))
    extra = [f"Benchmark wall time {time.time() - start:.0f} s."]
    if torch_missing:
        extra.append(f"PyTorch baseline: {torch_missing}.")
    elif not everywhere:
        extra.append("PyTorch was timed at the composite's size only: this CPU has no bf16 matmul (no avx512_bf16 "
                     "or amx_bf16), where PyTorch's bf16 matmul runs at about 1 GFLOP/s (--torch-sizes all forces "
                     "the benchmark size).")
    for name, r in (("grad kernel", full_py), ("grad kernel GRAPH", full_gr), ("composite", comp)):
        if "error" in r:
            extra.append(f"{name} failed: {r['error']}")
    append_results(ctx, rows)
    write_markdown(BENCH, "sparse_lightning_indexer_grad_kl_loss and lightning_indexer (CPU)", SECTIONS,
                   [*notes(a), *extra])


if __name__ == "__main__":
    main()
