"""Benchmark of ``sparse_lightning_indexer_grad_kl_loss`` (and the ``lightning_indexer`` forward).

Usage (from a directory outside the repo root):
    python scripts/bench/lightning_indexer.py [--s1 4096 --s2 4096 --k 2048 ...] [--composite-s1 1024 ...]

Measures in one run: the NumPy float32 GEMM ceiling (at 64x2048x576, the per-row P-recompute
shape, and at 2048^3), the fused bf16 grad kernel (BSND, B=1, causal sparse_mode=3) with
GFLOP/s, ratio to the NumPy rate and peak RSS (each measurement in its own subprocess,
``ru_maxrss``: inputs included), and the speed-up over a MindSpore float32 composite (gather +
dense math from mindspore.ops, gradients by ``ms.value_and_grad``) at a size where it fits.

FLOP count (per query row, over its n visible selected keys):
    P recompute 2*N1*n*(D+Dr) + index scores 2*Nidx*n*Didx + two gradient GEMMs 2*2*Nidx*n*Didx.
Statistics are synthetic (softmax_max = 4, softmax_sum = n): timing does not depend on them.
Selected keys: row s1 takes min(K, s1+1) distinct random visible keys, -1 elsewhere.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
from common import child_env, machine_line, numpy_gemm_gflops, timeit

ROOT = Path(__file__).resolve().parents[2]


def make_inputs(a: argparse.Namespace, rng: np.random.Generator) -> tuple[dict, np.ndarray]:
    s1, s2, k = a.s1, a.s2, a.k
    f = lambda *s: (rng.standard_normal(s, dtype=np.float32) * 0.5)  # noqa: E731
    x = {"query": f(1, s1, a.n1, a.d), "key": f(1, s2, 1, a.d), "query_rope": f(1, s1, a.n1, a.dr),
         "key_rope": f(1, s2, 1, a.dr), "query_index": f(1, s1, a.nidx, a.didx), "key_index": f(1, s2, 1, a.didx),
         "weights": f(1, s1, a.nidx)}
    idx = np.full((1, s1, 1, k), -1, np.int32)
    visible = np.zeros(s1, np.int64)
    for r in range(s1):
        lim = min(s2, r + s2 - s1 + 1)
        n = min(k, lim)
        idx[0, r, 0, :n] = rng.choice(lim, n, replace=False) if lim > n else np.arange(n)
        visible[r] = n
    x["sparse_indices"] = idx
    x["softmax_max"] = np.full((1, 1, s1, a.n1), 4.0, np.float32)
    x["softmax_sum"] = np.broadcast_to(np.maximum(visible, 1)[None, None, :, None], (1, 1, s1, a.n1)).astype(
        np.float32)
    return x, visible


def flops(a: argparse.Namespace, visible: np.ndarray) -> float:
    return float(visible.sum()) * (2 * a.n1 * (a.d + a.dr) + 3 * 2 * a.nidx * a.didx)


def child_kernel(a: argparse.Namespace) -> dict:
    import mindspore as ms
    ms.set_device("CPU")
    import ms_grad_ops as mgo
    x, visible = make_inputs(a, np.random.default_rng(0))
    dt = ms.bfloat16
    t = {n: ms.Tensor(v, dt if v.dtype == np.float32 and "softmax" not in n else None) for n, v in x.items()}
    args = (t["query"], t["key"], t["query_index"], t["key_index"], t["weights"], t["sparse_indices"],
            t["softmax_max"], t["softmax_sum"], t["query_rope"], t["key_rope"])
    scale = float(1 / np.sqrt(a.d + a.dr))

    def grad(*xs: ms.Tensor) -> tuple:
        return mgo.ops.sparse_lightning_indexer_grad_kl_loss(*xs, scale_value=scale, layout="BSND")

    def fwd(qi: ms.Tensor, ki: ms.Tensor, w: ms.Tensor) -> tuple:
        return mgo.ops.lightning_indexer(qi, ki, w, sparse_count=a.k, layout="BSND")

    if a.graph:  # GRAPH_MODE context: in PyNative even ms.jit calls wait by busy-waiting on a core
        ms.set_context(mode=ms.GRAPH_MODE)
        grad, fwd = ms.jit(grad), ms.jit(fwd)
    t_grad = timeit(lambda: grad(*args), repeat=a.reps)
    t_fwd = timeit(lambda: fwd(t["query_index"], t["key_index"], t["weights"]), repeat=1)
    return {"time": t_grad, "gflop": flops(a, visible) / 1e9, "fwd_time": t_fwd,
            "rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def child_composite(a: argparse.Namespace) -> dict:
    import mindspore as ms
    from mindspore import mint
    from mindspore import ops as O
    ms.set_device("CPU")
    x, visible = make_inputs(a, np.random.default_rng(0))
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

    del mint
    fn = ms.value_and_grad(loss_fn, grad_position=(0, 1, 2))
    qi, ki, w = t["query_index"][0], t["key_index"][0], t["weights"][0]
    t_comp = timeit(lambda: fn(qi, ki, w), repeat=a.reps, every_output=True)
    return {"time": t_comp, "rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def run_child(kind: str, a: argparse.Namespace, **over: int) -> dict:
    graph = ["--graph"] if over.pop("graph", 0) else []
    argv = [sys.executable, __file__, "--child", kind, "--reps", str(a.reps), *graph]
    for name in ("s1", "s2", "k", "n1", "d", "dr", "nidx", "didx"):
        argv += [f"--{name}", str(over.get(name, getattr(a, name)))]
    res = subprocess.run(argv, capture_output=True, text=True, env=child_env())
    if res.returncode != 0:
        return {"error": res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"rc {res.returncode}"}
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    for name, v in (("s1", 4096), ("s2", 4096), ("k", 2048), ("n1", 64), ("d", 512), ("dr", 64), ("nidx", 64),
                    ("didx", 128), ("composite_s1", 1024), ("composite_k", 512), ("reps", 2)):
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=v)
    ap.add_argument("--child", choices=["kernel", "composite"])
    ap.add_argument("--graph", action="store_true", help="kernel child: GRAPH_MODE + ms.jit")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child_kernel(a) if a.child == "kernel" else child_composite(a)))
        return
    np_rep = numpy_gemm_gflops(a.n1, a.k, a.d + a.dr)
    np_big = numpy_gemm_gflops(2048, 2048, 2048)
    full_py, full = run_child("kernel", a), run_child("kernel", a, graph=1)
    small = {"s1": a.composite_s1, "s2": a.composite_s1, "k": a.composite_k}
    ours_small = run_child("kernel", a, **small)
    comp = run_child("composite", a, **small)
    rows = [
        "| measurement | value |", "|---|---|",
        f"| NumPy f32 GEMM {a.n1}x{a.k}x{a.d + a.dr} | {np_rep:.0f} GFLOP/s |",
        f"| NumPy f32 GEMM 2048^3 | {np_big:.0f} GFLOP/s |",
    ]
    shape = f"S1=S2={a.s1}/{a.s2}, K={a.k}, N1={a.n1}, D={a.d}+{a.dr}, Nidx={a.nidx}, Didx={a.didx}, bf16, BSND, mode 3"
    if "error" in full:
        rows.append(f"| grad kernel ({shape}) | failed: {full['error']} |")
    else:
        rate = full["gflop"] / full["time"]
        rows += [f"| grad kernel ({shape}), GRAPH | {full['time']:.3f} s, {full['gflop']:.0f} GFLOP, "
                 f"{rate:.0f} GFLOP/s |",
                 f"| same, PyNative | {full_py.get('time', float('nan')):.3f} s |",
                 f"| ratio to NumPy f32 GEMM {a.n1}x{a.k}x{a.d + a.dr} / 2048^3 | {rate / np_rep:.2f} / "
                 f"{rate / np_big:.2f} |",
                 f"| peak RSS (grad kernel process, inputs included) | {full['rss_gib']:.2f} GiB |",
                 f"| lightning_indexer forward (top-{a.k}) same size, GRAPH | {full['fwd_time']:.3f} s |"]
    cs = f"S1=S2={a.composite_s1}, K={a.composite_k}"
    if "error" in comp or "error" in ours_small:
        rows.append(f"| MindSpore f32 composite ({cs}) | failed: {comp.get('error', ours_small.get('error'))} |")
    else:
        rows += [f"| MindSpore f32 composite value_and_grad ({cs}) | {comp['time']:.3f} s, peak RSS "
                 f"{comp['rss_gib']:.2f} GiB |",
                 f"| grad kernel bf16 ({cs}), PyNative | {ours_small['time']:.3f} s, peak RSS "
                 f"{ours_small['rss_gib']:.2f} GiB |",
                 f"| speed-up over composite (both PyNative) | {comp['time'] / ours_small['time']:.1f}x |"]
    table = "\n".join(rows)
    print(table)
    out = ROOT / "benchmarks" / "lightning_indexer.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text("# sparse_lightning_indexer_grad_kl_loss benchmark\n\n"
                   f"Measured: {machine_line()}\n\n"
                   f"Command: `python scripts/bench/lightning_indexer.py {' '.join(sys.argv[1:])}`\n\n{table}\n")


if __name__ == "__main__":
    main()
