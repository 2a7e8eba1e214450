"""Benchmark of the dense warm-up pair: ``dense_lightning_indexer_softmax_lse`` +
``dense_lightning_indexer_grad_kl_loss``, and its peak memory against the sparse path at top-k = S.

Usage (from any directory):
    python scripts/bench/dense_lightning_indexer_grad_kl_loss.py [--quick] [--s 8192 --n1 16 ...]

Measures in one run, bf16 inputs, float32 weights and statistics, BSND, B=1, S1 = S2 = S, causal (sparse_mode=3),
DeepSeek-V3.2's indexer (Nidx=64, Didx=128) and an MLA-absorbed main attention with ``--n1`` heads over one
shared key (D=512, Dr=64), each measurement in its own subprocess:
- the dense pair in GRAPH (GRAPH_MODE + ``ms.jit``) and PyNative: time, GFLOP/s, the GEMM ceiling of its own
  per-block products (common.ceiling) in the same run and the ratio to it;
- the PEAK MEMORY (``ru_maxrss`` of the child, and its growth over the child's state once its inputs exist) of
  the dense pair and of the sparse path computing the same loss and gradients: ``lightning_indexer`` with
  ``sparse_count = S`` (its ``S x S`` int32 indices and float32 values) + ``sparse_lightning_indexer_grad_kl_loss``.

The main-attention statistics are inputs of both paths (from the main attention's forward in training); here they
are drawn at random, which changes neither path's work nor its memory.

FLOP count, per query row over its n visible keys: softmax_lse 2*Nidx*Didx*n (the index scores); grad
2*N1*(D+Dr)*n (teacher logits) + 3 * 2*Nidx*Didx*n (index scores, d_query_index, d_key_index). The sparse path
does the same GEMMs (lightning_indexer's index scores instead of softmax_lse's), plus its top-k selection.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

import numpy as np
from common import Product, ceiling_cell, fmt, spawn_json

HERE = Path(__file__).resolve().parent
BENCH = "dense_lightning_indexer_grad_kl_loss"
KERNELS = "The dense pair (bfloat16 inputs, BSND, causal)"
MEMORY = "Peak memory: the dense pair vs the sparse path at top-k = S"
SIZE_ARGS = ("s", "n1", "d", "dr", "nidx", "didx")
# The kernels' key blocks (IndexScorer::kBlock of cpu/lightning_indexer_common.h; kBlock of
# cpu/dense_lightning_indexer_grad_kl_loss.cc).
LSE_BLOCK, GRAD_BLOCK = 512, 256


def visible(a: argparse.Namespace) -> np.ndarray:
    return np.arange(a.s) + 1


def flops(a: argparse.Namespace) -> dict[str, float]:
    n = float(visible(a).sum())
    index = 2.0 * a.nidx * a.didx * n
    return {"lse": index, "grad": 2.0 * a.n1 * (a.d + a.dr) * n + 3 * index}


def products(a: argparse.Namespace) -> list[Product]:
    """The pair's GEMMs per 512 keys of a row, in the kernels' operand layouts: softmax_lse's index scores over one
    512-key block, and two 256-key blocks of the grad (teacher logits [N1 x Dq] x [256 x Dq]^T, then the score
    backward of cpu/indexer_score_backward.h: Sx, dQidx, dKidx)."""
    dq = a.d + a.dr
    grad = [Product("S", a.n1, GRAD_BLOCK, dq, tb=True), Product("Sx", GRAD_BLOCK, a.nidx, a.didx, tb=True),
            Product("dQidx", a.nidx, a.didx, GRAD_BLOCK, ta=True), Product("dKidx", GRAD_BLOCK, a.didx, a.nidx)]
    return [Product("I", a.nidx, LSE_BLOCK, a.didx, tb=True), *grad, *grad]


def input_shapes(a: argparse.Namespace) -> dict[str, tuple]:
    return {"query": (1, a.s, a.n1, a.d), "key": (1, a.s, 1, a.d), "query_rope": (1, a.s, a.n1, a.dr),
            "key_rope": (1, a.s, 1, a.dr), "query_index": (1, a.s, a.nidx, a.didx), "key_index": (1, a.s, 1, a.didx),
            "weights": (1, a.s, a.nidx), "softmax_max": (1, 1, a.s, a.n1), "softmax_sum": (1, 1, a.s, a.n1)}


def make_input(a: argparse.Namespace, name: str, rng: np.random.Generator) -> np.ndarray:
    """One float32 input. The statistics are random of the right shape [B, N2=1, S1, N1]: the work does not
    depend on their values."""
    x = rng.standard_normal(input_shapes(a)[name], dtype=np.float32) * 0.5
    if name == "weights":
        return x / np.sqrt(a.nidx * a.didx)
    if name == "softmax_max":
        return np.abs(x) * 4
    return 1.0 + np.abs(x) * a.s if name == "softmax_sum" else x


def _maxrss() -> int:
    """Peak resident set of this process so far, bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(a: argparse.Namespace) -> dict:
    import mindspore as ms
    from common import PeakMemory, sync, timeit
    ms.set_device("CPU")
    import ms_grad_ops as mgo
    rng = np.random.default_rng(0)
    # One tensor at a time, so no float32 copy of all the inputs sets the process's peak.
    bf = {n: ms.Tensor(make_input(a, n, rng), ms.bfloat16) for n in ("query", "key", "query_rope", "key_rope",
                                                                     "query_index", "key_index")}
    f32 = {n: ms.Tensor(make_input(a, n, rng)) for n in ("weights", "softmax_max", "softmax_sum")}
    scale = (a.d + a.dr) ** -0.5

    def dense() -> tuple:
        mxi, smi = mgo.ops.dense_lightning_indexer_softmax_lse(bf["query_index"], bf["key_index"], f32["weights"])
        return mgo.ops.dense_lightning_indexer_grad_kl_loss(
            bf["query"], bf["key"], bf["query_index"], bf["key_index"], f32["weights"], f32["softmax_max"],
            f32["softmax_sum"], mxi, smi, bf["query_rope"], bf["key_rope"], scale_value=scale)

    def sparse() -> tuple:
        idx, _ = mgo.ops.lightning_indexer(bf["query_index"], bf["key_index"], f32["weights"], sparse_count=a.s)
        return mgo.ops.sparse_lightning_indexer_grad_kl_loss(
            bf["query"], bf["key"], bf["query_index"], bf["key_index"], f32["weights"], idx, f32["softmax_max"],
            f32["softmax_sum"], bf["query_rope"], bf["key_rope"], scale_value=scale)

    fn = {"dense": dense, "sparse": sparse}[a.path]
    if a.graph:  # GRAPH_MODE context: in PyNative even ms.jit calls wait by busy-waiting on a core
        ms.set_context(mode=ms.GRAPH_MODE)
        fn = ms.jit(fn)
    with PeakMemory() as mem:
        start = time.perf_counter()
        out = fn()
        sync(out, every_output=True)
        first = time.perf_counter() - start
    peak = _maxrss()
    loss = float(out[3].asnumpy()[0])
    del out
    t = timeit(fn, warmup=0, repeat=a.reps, every_output=True) if a.reps else first
    return {"time": t, "first_call_s": first, "maxrss": peak, "base_rss": mem.base, "growth": mem.growth, "loss": loss}


def run_child(a: argparse.Namespace, path: str, graph: bool, reps: int) -> dict:
    argv = [str(HERE / f"{BENCH}.py"), "--child", "--path", path, "--reps", str(reps), *(["--graph"] if graph else [])]
    for name in SIZE_ARGS:
        argv += [f"--{name}", str(getattr(a, name))]
    return spawn_json(argv, cwd=HERE, timeout=a.timeout)


def _sizes(a: argparse.Namespace) -> dict:
    return {s: getattr(a, s) for s in SIZE_ARGS}


def kernel_row(a: argparse.Namespace, py: dict, gr: dict) -> dict:
    from common import ceiling
    f = flops(a)
    total = f["lse"] + f["grad"]
    t = min(py["time"], gr["time"])
    rate = total / t / 1e9
    ceil = ceiling(products(a), "bfloat16")
    return {"section": KERNELS, "op": "softmax_lse + grad_kl_loss", "sizes": _sizes(a), "dtype": "bfloat16",
            "mode": "GRAPH" if gr["time"] <= py["time"] else "PyNative", "time_s": t, "time_graph_s": gr["time"],
            "time_pynative_s": py["time"], "gflop": total / 1e9, "gflops": rate, "ceiling": ceil,
            "ratio": rate / ceil["gflops"]}


def memory_row(a: argparse.Namespace, dense: dict, sparse: dict) -> dict:
    return {"section": MEMORY, "op": "dense pair vs sparse path", "sizes": _sizes(a), "dtype": "bfloat16",
            "mode": "PyNative", "dense": dense, "sparse": sparse,
            "index_bytes": 8 * a.s * a.s, "loss_rel_diff": abs(dense["loss"] - sparse["loss"]) / abs(sparse["loss"])}


def _ms(v: object) -> str:
    return fmt(None if v is None else v * 1e3)


def _gib(v: object) -> str:
    return fmt(None if v is None else v / 2**30, ".2f")


SECTIONS = [
    (KERNELS, [
        ("ops", lambda r: r["op"]), ("S / N1 / Nidx", lambda r: f"{r['sizes']['s']} / {r['sizes']['n1']} / "
                                                                  f"{r['sizes']['nidx']}"),
        ("ms GRAPH / PyNative", lambda r: f"{_ms(r['time_graph_s'])} / {_ms(r['time_pynative_s'])}"),
        ("GFLOP", lambda r: fmt(r["gflop"], ".1f")), ("GFLOP/s", lambda r: fmt(r["gflops"])),
        ("GEMM ceiling GFLOP/s (operand; per GEMM)", ceiling_cell), ("/ ceiling", lambda r: fmt(r["ratio"], ".2f"))]),
    (MEMORY, [
        ("S", lambda r: str(r["sizes"]["s"])),
        ("dense pair: peak RSS / growth GiB", lambda r: f"{_gib(r['dense']['maxrss'])} / {_gib(r['dense']['growth'])}"),
        ("sparse path: peak RSS / growth GiB",
         lambda r: f"{_gib(r['sparse']['maxrss'])} / {_gib(r['sparse']['growth'])}"),
        ("growth sparse / dense", lambda r: fmt(r["sparse"]["growth"] / max(r["dense"]["growth"], 1), ".1f", "x")),
        ("S x S indices + values GiB", lambda r: _gib(r["index_bytes"])),
        ("ms dense / sparse (PyNative, first call)",
         lambda r: f"{_ms(r['dense']['first_call_s'])} / {_ms(r['sparse']['first_call_s'])}"),
        ("loss rel. diff", lambda r: fmt(r["loss_rel_diff"], ".1e"))]),
]


def notes(a: argparse.Namespace) -> list[str]:
    return [
        f"Sizes: B=1, S1=S2=S, N1={a.n1} main-attention heads over one shared key (MLA-absorbed, D={a.d}, "
        f"Dr={a.dr}), Nidx={a.nidx}, Didx={a.didx} (DeepSeek-V3.2's indexer), bf16 tensors, float32 weights and "
        f"statistics. Times: median warm call of --reps {a.reps}; GFLOP/s and the ratio use the faster of GRAPH "
        "(GRAPH_MODE + ms.jit) and PyNative, each in its own process.",
        "FLOPs per query row over its n visible keys: softmax_lse 2*Nidx*Didx*n; grad 2*N1*(D+Dr)*n + 6*Nidx*Didx*n.",
        "GEMM ceiling: the rate of the pair's own GEMMs through the kernel library's GEMM wrapper (cpu/gemm_rate.cc), "
        "2 threads running independent calls, at the kernels' block shapes: softmax_lse I=[NidxxDidx]x[512xDidx]^T "
        "per 512 keys; the grad per 256-key block S=[N1xDq]x[256xDq]^T, Sx=[256xDidx]x[NidxxDidx]^T, "
        "dQidx=[256xNidx]^Tx[256xDidx], dKidx=[256xNidx]x[NidxxDidx]; ceiling = total FLOPs / sum(FLOPs_i / rate_i).",
        "Peak memory: ru_maxrss of a fresh process running one path once (PyNative; the same inputs in both), and "
        "the growth of its resident set during that call over the set before it (psutil, sampled every ms). "
        "The sparse path is lightning_indexer with sparse_count = S (int32 indices and float32 values, S x S each: "
        "the column 'S x S indices + values') + sparse_lightning_indexer_grad_kl_loss; the dense pair needs neither. "
        "'loss rel. diff': the two paths' losses on the same inputs (the same loss, float32 rounding apart).",
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    for name, v in (("s", 8192), ("n1", 16), ("d", 512), ("dr", 64), ("nidx", 64), ("didx", 128), ("reps", 1)):
        ap.add_argument(f"--{name}", type=int, default=v)
    ap.add_argument("--timeout", type=float, default=3600, help="seconds before a measurement is abandoned")
    ap.add_argument("--quick", action="store_true", help="S=2048")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--path", choices=["dense", "sparse"], default="dense")
    ap.add_argument("--graph", action="store_true", help="child: GRAPH_MODE + ms.jit")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a)))
        return
    if a.quick:
        a.s = 2048

    from common import append_results, run_context, write_markdown
    start, load_start = time.time(), os.getloadavg()
    ctx = run_context(BENCH)
    rows: list[dict] = []
    dense_mem, sparse_mem = run_child(a, "dense", False, 0), run_child(a, "sparse", False, 0)
    py, gr = run_child(a, "dense", False, a.reps), run_child(a, "dense", True, a.reps)
    if "error" not in py and "error" not in gr:
        rows.append(kernel_row(a, py, gr))
    if "error" not in dense_mem and "error" not in sparse_mem:
        rows.append(memory_row(a, dense_mem, sparse_mem))
    load_end = os.getloadavg()
    for row in rows:
        row["load_avg"] = {"start": load_start, "end": load_end}
    extra = [f"Benchmark wall time {time.time() - start:.0f} s; load average (1/5/15 min) "
             f"{' / '.join(f'{v:.2f}' for v in load_start)} at the start, "
             f"{' / '.join(f'{v:.2f}' for v in load_end)} at the end (2 cores shared with other jobs)."]
    for name, r in (("dense PyNative", py), ("dense GRAPH", gr), ("dense memory", dense_mem),
                    ("sparse memory", sparse_mem)):
        if "error" in r:
            extra.append(f"{name} failed: {r['error']}")
    append_results(ctx, rows)
    write_markdown(BENCH, "dense_lightning_indexer_softmax_lse + dense_lightning_indexer_grad_kl_loss (CPU)",
                   SECTIONS, [*notes(a), *extra])


if __name__ == "__main__":
    main()
