"""Benchmark of sparse_flash_attention (forward) and sparse_flash_attention_grad (backward).

Issue sizes: B=1, S1=S2=2048, N1 in {16, 64}, D=512 + Dr=64, K in {1024, 2048}, bfloat16,
sparse_mode 3 (causal), indices = min(K, t+1) distinct random visible keys per row (a causal
top-K-like selection), -1 in the unused slots. Reports, all measured in this run:
- time in GRAPH (``ms.jit``) and PyNative, and GFLOP/s of the faster, with FLOPs =
  2 * N1 * sum_rows(visible selected keys) * (576 + 512) for the forward and
  2 * N1 * sum_rows(visible) * (2*512 + 3*576) for the backward;
- the ratio to NumPy float32 GEMM GFLOP/s (64x2048x576 and 2048^3);
- peak memory: (input bytes + peak RSS growth during the call) / (input + output bytes);
- speed-up over MindSpore autodiff of a float32 composite (gather the selected keys, dense
  softmax attention over them, ``ms.value_and_grad``) at the largest size where it fits, timed warm
  in PyNative and compiled with ``ms.jit`` (GRAPH); the speed-up is faster mode against faster mode.
Each configuration runs in its own subprocess so memory numbers do not mix.

Usage: python scripts/bench/sparse_flash_attention.py [--n1 16 64] [--k 1024 2048] [--seq 2048]
       [--composite SEQ N1 K] [--no-composite]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

D, DR = 512, 64
HERE = Path(__file__).resolve().parent


def causal_indices(seq: int, k: int, seed: int = 0) -> tuple[np.ndarray, int]:
    """[seq, 1, k] int32: row t selects min(k, t+1) distinct keys of 0..t in random order."""
    rng = np.random.default_rng(seed)
    idx = np.full((seq, 1, k), -1, np.int32)
    total = 0
    for t in range(seq):
        n = min(k, t + 1)
        idx[t, 0, :n] = rng.permutation(t + 1)[:n] if n < t + 1 else rng.permutation(n)
        total += n
    return idx, total


def fwd_flops(n1: int, vis: int) -> float:
    return 2.0 * n1 * vis * (D + DR + D)


def grad_flops(n1: int, vis: int) -> float:
    return 2.0 * n1 * vis * (2 * D + 3 * (D + DR))


def _inputs(seq: int, n1: int, k: int, dtype: str) -> dict:
    import mindspore as ms
    from mindspore import Tensor
    rng = np.random.default_rng(1)
    msd = {"bfloat16": ms.bfloat16, "float32": ms.float32}[dtype]
    idx, vis = causal_indices(seq, k)

    def t(*shape: int) -> Tensor:
        return Tensor(rng.standard_normal(shape, dtype=np.float32) * 0.5, msd)
    kv = t(seq, 1, D)
    return dict(query=t(seq, n1, D), key=kv, value=kv, query_rope=t(seq, n1, DR), key_rope=t(seq, 1, DR),
                idx=Tensor(idx), d_out=t(seq, n1, D), lens=[seq], vis=vis)


def _nbytes(*tensors: object) -> int:
    return int(sum(x.nbytes for x in tensors))


def worker_op(seq: int, n1: int, k: int, dtype: str, reps: int, graph: bool) -> dict:
    """Times our forward and backward warm, in PyNative (functional ops; also measures memory on
    the first, cold call of each) or in GRAPH (the same calls compiled with ``ms.jit``)."""
    import mindspore as ms
    from common import PeakMemory, sync, timeit

    from ms_grad_ops import ops
    x = _inputs(seq, n1, k, dtype)
    lens = x["lens"]
    attrs = dict(scale_value=float(1.0 / np.sqrt(D + DR)), layout="TND", sparse_mode=3)

    def fwd_fn(q: object, kv: object, idx: object, qr: object, kr: object) -> tuple:
        return ops.sparse_flash_attention(q, kv, kv, idx, qr, kr, lens, lens, **attrs)

    def grad_fn(q: object, kv: object, idx: object, qr: object, kr: object, do: object, o: object, sm: object,
                ss: object) -> tuple:
        return ops.sparse_flash_attention_grad(q, kv, kv, idx, do, o, sm, ss, lens, lens, qr, kr, **attrs)

    if graph:
        ms.set_context(mode=ms.GRAPH_MODE)
        fwd_fn, grad_fn = ms.jit(fwd_fn), ms.jit(grad_fn)
    fwd_args = (x["query"], x["key"], x["idx"], x["query_rope"], x["key_rope"])
    # key is value (MLA): counted once in the input bytes
    in_fwd = _nbytes(x["query"], x["key"], x["query_rope"], x["key_rope"], x["idx"])
    with PeakMemory() as mem_f:
        out, smax, ssum = fwd_fn(*fwd_args)
        sync((out, smax, ssum))
    out_fwd = _nbytes(out, smax, ssum)
    grad_args = (*fwd_args, x["d_out"], out, smax, ssum)
    in_grad = in_fwd + _nbytes(x["d_out"], out, smax, ssum)
    with PeakMemory() as mem_g:
        g = grad_fn(*grad_args)
        sync(g)
    out_grad = _nbytes(*g)
    del g
    return dict(vis=x["vis"], t_fwd=timeit(lambda: fwd_fn(*fwd_args), warmup=1, repeat=reps),
                t_grad=timeit(lambda: grad_fn(*grad_args), warmup=1, repeat=reps),
                mem_fwd=(in_fwd + mem_f.growth) / (in_fwd + out_fwd),
                mem_grad=(in_grad + mem_g.growth) / (in_grad + out_grad),
                io_fwd=in_fwd + out_fwd, io_grad=in_grad + out_grad, growth_fwd=mem_f.growth, growth_grad=mem_g.growth)


def run_op(seq: int, n1: int, k: int, reps: int, dtype: str = "bfloat16") -> dict | None:
    """Our op in both modes, each in its own process (GRAPH = GRAPH_MODE context + ``ms.jit``;
    in the PyNative context, ``ms.jit`` calls too go through the runtime queue whose thread
    busy-waits on one of the two cores). Memory is from the PyNative process, whose first call is
    not a compile."""
    base = ["--worker", "op", "--seq", str(seq), "--n1", str(n1), "--k", str(k), "--reps", str(reps),
            "--dtype", dtype]
    py, gr = _spawn(base), _spawn([*base, "--graph"])
    if py is None or gr is None:
        return None
    return dict(py, t_fwd_pynative=py["t_fwd"], t_grad_pynative=py["t_grad"], t_fwd_graph=gr["t_fwd"],
                t_grad_graph=gr["t_grad"], t_fwd=min(py["t_fwd"], gr["t_fwd"]),
                t_grad=min(py["t_grad"], gr["t_grad"]))


def worker_composite(seq: int, n1: int, k: int, reps: int, graph: bool = False) -> dict:
    """MindSpore autodiff of the float32 composite (gather selected keys, dense softmax), PyNative or
    compiled with ``ms.jit`` (GRAPH); timed warm (the first, compiling call is not timed)."""
    import mindspore as ms
    from common import PeakMemory, sync, timeit
    from mindspore import Tensor
    from mindspore import ops as msops
    x = _inputs(seq, n1, k, "float32")
    idx = x["idx"].asnumpy()[:, 0]
    bias = Tensor(np.where(idx >= 0, 0.0, -1e30).astype(np.float32)[:, None, :])   # [T, 1, K]
    gidx = Tensor(np.maximum(idx, 0).astype(np.int32))
    scale = float(1.0 / np.sqrt(D + DR))

    def forward(q: Tensor, kv: Tensor, qr: Tensor, kr: Tensor) -> Tensor:
        qf = msops.concat([q, qr], axis=-1)                            # [T, N1, 576]
        kf = msops.concat([kv, kr], axis=-1)[:, 0]                     # [T2, 576]
        kg = msops.gather(kf, gidx, 0)                                 # [T, K, 576]
        vg = msops.gather(kv[:, 0], gidx, 0)                           # [T, K, 512]
        s = msops.bmm(qf, kg.swapaxes(1, 2)) * scale + bias           # [T, N1, K]
        p = msops.softmax(s, axis=-1)
        o = msops.bmm(p, vg)                                           # [T, N1, 512]
        return (o * x["d_out"]).sum()

    step = ms.value_and_grad(forward, grad_position=(0, 1, 2, 3))
    if graph:
        ms.set_context(mode=ms.GRAPH_MODE)
        step = ms.jit(step)

    def run() -> object:
        return step(x["query"], x["key"], x["query_rope"], x["key_rope"])
    with PeakMemory() as mem:
        sync(run(), every_output=True)
    t = timeit(run, warmup=0, repeat=reps, every_output=True)
    return dict(t_total=t, growth=mem.growth, vis=x["vis"])


def _spawn(args: list[str]) -> dict | None:
    from common import child_env
    res = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, cwd=HERE, env=child_env())
    lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
    if res.returncode != 0 or not lines:
        print(f"worker {args} failed (rc {res.returncode}): {res.stderr[-800:]}", file=sys.stderr)
        return None
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n1", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--k", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--composite", type=int, nargs=3, default=[1024, 64, 1024], metavar=("SEQ", "N1", "K"))
    ap.add_argument("--no-composite", action="store_true")
    ap.add_argument("--worker", choices=["op", "composite"])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--graph", action="store_true", help="worker: compile with ms.jit")
    args = ap.parse_args()
    if args.worker == "op":
        print(json.dumps(worker_op(args.seq, args.n1[0], args.k[0], args.dtype, args.reps, args.graph)))
        return
    if args.worker == "composite":
        print(json.dumps(worker_composite(args.seq, args.n1[0], args.k[0], args.reps, args.graph)))
        return

    from common import numpy_gemm_gflops, write_report
    start = time.time()
    ceil_small = numpy_gemm_gflops(64, 2048, 576)
    ceil_big = numpy_gemm_gflops(2048, 2048, 2048)
    rows = []
    for n1 in args.n1:
        for k in args.k:
            r = run_op(args.seq, n1, k, args.reps)
            if r is None:
                continue
            gf_f = fwd_flops(n1, r["vis"]) / r["t_fwd"] / 1e9
            gf_g = grad_flops(n1, r["vis"]) / r["t_grad"] / 1e9
            rows.append({"S": args.seq, "N1": n1, "K": k, "visible keys (sum)": r["vis"],
                         "fwd ms GRAPH / PyNative": f"{r['t_fwd_graph'] * 1e3:.0f} / {r['t_fwd_pynative'] * 1e3:.0f}",
                         "fwd GFLOP/s": f"{gf_f:.0f}",
                         "fwd / NumPy 2048^3": f"{gf_f / ceil_big:.2f}",
                         "grad ms GRAPH / PyNative":
                             f"{r['t_grad_graph'] * 1e3:.0f} / {r['t_grad_pynative'] * 1e3:.0f}",
                         "grad GFLOP/s": f"{gf_g:.0f}",
                         "grad / NumPy 2048^3": f"{gf_g / ceil_big:.2f}",
                         "peak mem fwd / IO": f"{r['mem_fwd']:.2f}", "peak mem grad / IO": f"{r['mem_grad']:.2f}"})
            print(rows[-1], flush=True)
    sections = [("Kernels (bfloat16, causal, D=512+64, key is value)", rows)]
    notes = [f"NumPy float32 GEMM ceiling in this run: {ceil_big:.0f} GFLOP/s at 2048^3, "
             f"{ceil_small:.0f} GFLOP/s at 64x2048x576.",
             "FLOPs count only visible selected keys (sum over rows), forward 2*N1*vis*(576+512), "
             "grad 2*N1*vis*(2*512+3*576).",
             "peak mem / IO = (input bytes + peak RSS growth during the first call) / (input + output bytes).",
             "GFLOP/s and ratios use the faster of GRAPH (GRAPH_MODE + ms.jit) and PyNative, each in its own "
             "process; in PyNative MindSpore's runtime queue thread busy-waits on one of the two cores."]
    if not args.no_composite:
        cs, cn, ck = args.composite
        comp_args = ["--worker", "composite", "--seq", str(cs), "--n1", str(cn), "--k", str(ck), "--reps", "2"]
        comp_py = _spawn(comp_args)
        comp_gr = _spawn([*comp_args, "--graph"])
        # the baseline is the faster of the two execution modes a user could pick
        comp = min((c for c in (comp_py, comp_gr) if c), key=lambda c: c["t_total"], default=None)
        ours = run_op(cs, cn, ck, args.reps)
        ours32 = run_op(cs, cn, ck, args.reps, "float32")
        if comp and ours and ours32:
            t_ours = ours["t_fwd"] + ours["t_grad"]
            t_ours32 = ours32["t_fwd"] + ours32["t_grad"]
            sections.append(("Speed-up over MindSpore autodiff of the float32 composite (forward + backward)", [{
                "S": cs, "N1": cn, "K": ck,
                "composite PyNative ms": f"{comp_py['t_total'] * 1e3:.0f}" if comp_py else "failed",
                "composite GRAPH (ms.jit) ms": f"{comp_gr['t_total'] * 1e3:.0f}" if comp_gr else "failed",
                "composite peak RSS growth GB": f"{comp['growth'] / 1e9:.1f}",
                "ours bf16 ms": f"{t_ours * 1e3:.0f}",
                "speed-up bf16 (vs faster mode)": f"{comp['t_total'] / t_ours:.1f}x",
                "ours fp32 ms": f"{t_ours32 * 1e3:.0f}",
                "speed-up fp32 (vs faster mode)": f"{comp['t_total'] / t_ours32:.1f}x"}]))
        else:
            notes.append(f"composite at S={cs}, N1={cn}, K={ck} did not run (see stderr).")
    notes.append(f"Benchmark wall time {time.time() - start:.0f} s.")
    write_report("sparse_flash_attention", "sparse_flash_attention / sparse_flash_attention_grad (CPU)", sections,
                 notes)


if __name__ == "__main__":
    main()
