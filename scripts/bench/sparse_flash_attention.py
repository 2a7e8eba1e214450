"""Benchmark of sparse_flash_attention (forward) and sparse_flash_attention_grad (backward).

Issue sizes: B=1, S1=S2=2048, N1 in {16, 64}, D=512 + Dr=64, K in {1024, 2048}, bfloat16,
sparse_mode 3 (causal), indices = min(K, t+1) distinct random visible keys per row (a causal
top-K-like selection), -1 in the unused slots; key is value (``value=None``, as DeepSeek's MLA
calls it). Reports per configuration, all measured in this run:
- time in GRAPH (``ms.jit`` in GRAPH_MODE) and PyNative, each in its own process, and GFLOP/s of
  the faster, with FLOPs = 2 * N1 * sum_rows(visible selected keys) * (576 + 512) for the forward
  and 2 * N1 * sum_rows(visible) * (2*512 + 3*576) for the backward;
- the ceiling: the rate of the kernel's per-query-row GEMMs at Kv = mean visible keys per row
  rounded up to 64, through the kernel library's GEMM wrapper on 2 threads (common.ceiling), and
  the kernel's ratio to it; the ratio to NumPy float32 GEMM at 2048^3 for continuity;
- peak memory: (input bytes + peak RSS growth during the first call) / (input + output bytes);
- speed-ups of forward + backward over PyTorch CPU eager autograd in bf16 (when torch is
  installed; at every size on a CPU with a bf16 matmul, else at the composite's size) and over
  MindSpore autodiff of a float32 composite (gather the selected keys, dense softmax attention
  over them, ``ms.value_and_grad``; at one size where it fits, the faster of PyNative and GRAPH).
Each measurement runs in its own subprocess so memory numbers do not mix. Rows are appended to
benchmarks/results.jsonl; benchmarks/sparse_flash_attention.md is rewritten from this run's rows.

Usage: python scripts/bench/sparse_flash_attention.py [--quick] [--seq 2048] [--n1 16 64] [--k 1024 2048]
       [--composite SEQ N1 K | --no-composite] [--torch-sizes auto|all|composite|none] [--reps 3]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from common import Product, ceiling_cell, fmt, keys_per_row, spawn_json

D, DR = 512, 64
HERE = Path(__file__).resolve().parent
BENCH = "sparse_flash_attention"
KERNELS = "Kernels (causal, D=512+64, key is value)"
SPEEDUP = "Speed-up of forward + backward over the baselines"


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


def visible_keys(seq: int, k: int) -> int:
    """sum over rows of min(k, t+1): the visible selected keys of ``causal_indices``."""
    return sum(min(k, t + 1) for t in range(seq))


def fwd_products(n1: int, kv: int) -> list[Product]:
    """The forward's GEMMs per query row over kv selected keys: S = Qf Kf^T, O = P V."""
    return [Product("S", n1, kv, D + DR, tb=True), Product("PV", n1, D, kv)]


def grad_products(n1: int, kv: int) -> list[Product]:
    """The backward's GEMMs per query row (P is recomputed from the statistics, O is not)."""
    return [Product("S", n1, kv, D + DR, tb=True), Product("dP", n1, kv, D, tb=True), Product("dQ", n1, D + DR, kv),
            Product("dK", kv, D + DR, n1, ta=True), Product("dV", kv, D, n1, ta=True)]


def fwd_flops(n1: int, vis: int) -> float:
    return 2.0 * n1 * vis * (D + DR + D)


def grad_flops(n1: int, vis: int) -> float:
    return 2.0 * n1 * vis * (2 * D + 3 * (D + DR))


def numpy_inputs(seq: int, n1: int, k: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    t = lambda *shape: rng.standard_normal(shape, dtype=np.float32) * 0.5  # noqa: E731
    idx, _ = causal_indices(seq, k)
    return dict(query=t(seq, n1, D), kv=t(seq, 1, D), query_rope=t(seq, n1, DR), key_rope=t(seq, 1, DR),
                idx=idx, d_out=t(seq, n1, D))


def _nbytes(*tensors: object) -> int:
    return int(sum(x.nbytes for x in tensors if x is not None))


def worker_op(seq: int, n1: int, k: int, dtype: str, reps: int, graph: bool) -> dict:
    """Times our forward and backward warm, in PyNative (functional ops; also measures memory on
    the first, cold call of each) or in GRAPH (the same calls compiled with ``ms.jit``)."""
    import mindspore as ms
    from common import PeakMemory, sync, timeit
    from mindspore import Tensor

    from ms_grad_ops import ops
    msd = {"bfloat16": ms.bfloat16, "float32": ms.float32}[dtype]
    x = {n: Tensor(v) if n == "idx" else Tensor(v, msd) for n, v in numpy_inputs(seq, n1, k).items()}
    lens = [seq]
    attrs = dict(scale_value=float(1.0 / np.sqrt(D + DR)), layout="TND", sparse_mode=3)

    def fwd_fn(q: Tensor, kv: Tensor, idx: Tensor, qr: Tensor, kr: Tensor) -> tuple:
        return ops.sparse_flash_attention(q, kv, None, idx, qr, kr, lens, lens, **attrs)

    def grad_fn(q: Tensor, kv: Tensor, idx: Tensor, qr: Tensor, kr: Tensor, do: Tensor, o: Tensor, sm: Tensor,
                ss: Tensor) -> tuple:
        return ops.sparse_flash_attention_grad(q, kv, None, idx, do, o, sm, ss, lens, lens, qr, kr, **attrs)

    if graph:
        ms.set_context(mode=ms.GRAPH_MODE)
        fwd_fn, grad_fn = ms.jit(fwd_fn), ms.jit(grad_fn)
    fwd_args = (x["query"], x["kv"], x["idx"], x["query_rope"], x["key_rope"])
    in_fwd = _nbytes(*fwd_args)
    with PeakMemory() as mem_f:
        out, smax, ssum = fwd_fn(*fwd_args)
        sync((out, smax, ssum))
    out_fwd = _nbytes(out, smax, ssum)
    grad_args = (*fwd_args, x["d_out"], out, smax, ssum)
    in_grad = in_fwd + _nbytes(x["d_out"], out, smax, ssum)
    with PeakMemory() as mem_g:
        g = grad_fn(*grad_args)
        sync(g)
    out_grad = _nbytes(*g)   # d_value is None: key is value, d_key carries dK + dV
    del g
    return dict(t_fwd=timeit(lambda: fwd_fn(*fwd_args), warmup=1, repeat=reps),
                t_grad=timeit(lambda: grad_fn(*grad_args), warmup=1, repeat=reps),
                mem_fwd=(in_fwd + mem_f.growth) / (in_fwd + out_fwd),
                mem_grad=(in_grad + mem_g.growth) / (in_grad + out_grad),
                io_fwd=in_fwd + out_fwd, io_grad=in_grad + out_grad)


def worker_composite(seq: int, n1: int, k: int, reps: int, graph: bool = False) -> dict:
    """MindSpore autodiff of the float32 composite (gather selected keys, dense softmax), PyNative or
    compiled with ``ms.jit`` (GRAPH); timed warm (the first, compiling call is not timed)."""
    import mindspore as ms
    from common import PeakMemory, sync, timeit
    from mindspore import Tensor
    from mindspore import ops as msops
    x = {n: Tensor(v) for n, v in numpy_inputs(seq, n1, k).items()}
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
        return step(x["query"], x["kv"], x["query_rope"], x["key_rope"])
    with PeakMemory() as mem:
        sync(run(), every_output=True)
    return dict(t_total=timeit(run, warmup=0, repeat=reps, every_output=True), growth=mem.growth)


def worker_torch(seq: int, n1: int, k: int, reps: int) -> dict:
    """PyTorch bf16 eager autograd of the same attention (MindSpore is not imported here)."""
    import torch_baseline
    x = numpy_inputs(seq, n1, k)
    return torch_baseline.sparse_attention(x["query"], x["kv"][:, 0], x["query_rope"], x["key_rope"][:, 0],
                                           x["idx"][:, 0], x["d_out"], float(1.0 / np.sqrt(D + DR)), reps)


class Runner:
    """Spawns the workers of one run; each (kind, sizes, dtype) is measured once."""

    def __init__(self, args: argparse.Namespace) -> None:
        from common import torch_version
        self.reps, self.torch_reps, self.torch_timeout = args.reps, args.torch_reps, args.torch_timeout
        self.torch_missing = "skipped (--torch-sizes none)" if args.torch_sizes == "none" else (
            "" if torch_version() else "torch not installed")
        self._done: dict[tuple, dict] = {}

    def _spawn(self, *args: object, timeout: float | None = None) -> dict:
        key = tuple(str(a) for a in args)
        if key not in self._done:
            self._done[key] = spawn_json([str(HERE / "sparse_flash_attention.py"), *key], cwd=HERE, timeout=timeout)
        return self._done[key]

    def op(self, seq: int, n1: int, k: int, dtype: str) -> dict | None:
        """Our op in both modes, each in its own process (in the PyNative context, ``ms.jit`` calls
        too go through the runtime queue whose thread busy-waits on one of the two cores). Memory
        is from the PyNative process, whose first call is not a compile."""
        base = ("--worker", "op", "--seq", seq, "--n1", n1, "--k", k, "--reps", self.reps, "--dtype", dtype)
        py, gr = self._spawn(*base), self._spawn(*base, "--graph")
        if "error" in py or "error" in gr:
            return None
        return dict(py, t_fwd_pynative=py["t_fwd"], t_grad_pynative=py["t_grad"], t_fwd_graph=gr["t_fwd"],
                    t_grad_graph=gr["t_grad"], t_fwd=min(py["t_fwd"], gr["t_fwd"]),
                    t_grad=min(py["t_grad"], gr["t_grad"]))

    def torch_time(self, seq: int, n1: int, k: int) -> dict:
        if self.torch_missing:
            return {"error": self.torch_missing}
        return self._spawn("--worker", "torch", "--seq", seq, "--n1", n1, "--k", k, "--reps", self.torch_reps,
                           timeout=self.torch_timeout)

    def composite(self, seq: int, n1: int, k: int) -> dict | None:
        base = ("--worker", "composite", "--seq", seq, "--n1", n1, "--k", k, "--reps", 2)
        py, gr = self._spawn(*base), self._spawn(*base, "--graph")
        runs = [c for c in (py, gr) if "error" not in c]
        if not runs:
            return None
        best = min(runs, key=lambda c: c["t_total"])   # the faster mode a user could pick
        return {"t_pynative": py.get("t_total"), "t_graph": gr.get("t_total"), "t_total": best["t_total"],
                "growth": best["growth"]}


def kernel_rows(seq: int, n1: int, k: int, dtype: str, r: dict, numpy_big: float) -> list[dict]:
    """The forward and backward rows of one configuration, with the same-run ceilings."""
    from common import ceiling
    vis = visible_keys(seq, k)
    kv = keys_per_row(vis, seq)
    rows = []
    for op, t_key, flops, prods, mem in (
            ("sparse_flash_attention", "fwd", fwd_flops(n1, vis), fwd_products(n1, kv), "mem_fwd"),
            ("sparse_flash_attention_grad", "grad", grad_flops(n1, vis), grad_products(n1, kv), "mem_grad")):
        t_py, t_gr = r[f"t_{t_key}_pynative"], r[f"t_{t_key}_graph"]
        rate = flops / min(t_py, t_gr) / 1e9
        ceil = ceiling(prods, dtype)
        rows.append({"section": KERNELS, "op": op, "sizes": {"S": seq, "N1": n1, "K": k, "D": D, "Dr": DR,
                                                           "visible": vis, "Kv": kv},
                     "dtype": dtype, "mode": "GRAPH" if t_gr <= t_py else "PyNative", "time_s": min(t_py, t_gr),
                     "time_graph_s": t_gr, "time_pynative_s": t_py, "gflop": flops / 1e9, "gflops": rate,
                     "ceiling": ceil, "ratio": rate / ceil["gflops"], "numpy_2048_gflops": numpy_big,
                     "numpy_ratio": rate / numpy_big, "peak_mem_io": r[mem], "io_bytes": r[f"io_{t_key}"]})
    return rows


def speedup_row(seq: int, n1: int, k: int, ours: dict, ours32: dict | None, torch_r: dict,
                comp: dict | None) -> dict:
    t_ours = ours["t_fwd"] + ours["t_grad"]
    row = {"section": SPEEDUP, "op": "sparse_flash_attention fwd+grad", "sizes": {"S": seq, "N1": n1, "K": k},
           "dtype": "bfloat16", "mode": "best of GRAPH/PyNative", "time_s": t_ours,
           "torch_time_s": torch_r.get("time"), "torch": torch_r.get("error") or torch_r.get("torch"),
           "torch_rss_gib": torch_r.get("rss_gib"), "speedup_torch": torch_r["time"] / t_ours if "time" in torch_r
           else None}
    if comp:
        row.update(composite_time_s=comp["t_total"], composite_pynative_s=comp["t_pynative"],
                   composite_graph_s=comp["t_graph"], composite_growth_gb=comp["growth"] / 1e9,
                   speedup_composite=comp["t_total"] / t_ours)
        if ours32:
            t32 = ours32["t_fwd"] + ours32["t_grad"]
            row.update(time_float32_s=t32, speedup_composite_float32=comp["t_total"] / t32)
    return row


def _ms(v: object) -> str:
    return fmt(None if v is None else v * 1e3)


SECTIONS = [
    (KERNELS, [
        ("op", lambda r: r["op"]), ("dtype", lambda r: r["dtype"]),
        ("S / N1 / K", lambda r: f"{r['sizes']['S']} / {r['sizes']['N1']} / {r['sizes']['K']}"),
        ("Kv", lambda r: str(r["sizes"]["Kv"])),
        ("ms GRAPH / PyNative", lambda r: f"{_ms(r['time_graph_s'])} / {_ms(r['time_pynative_s'])}"),
        ("GFLOP/s", lambda r: fmt(r["gflops"])),
        ("GEMM ceiling GFLOP/s (operand; per GEMM)", ceiling_cell),
        ("/ ceiling", lambda r: fmt(r["ratio"], ".2f")),
        ("/ NumPy f32 2048^3", lambda r: fmt(r["numpy_ratio"], ".2f")),
        ("peak mem / IO", lambda r: fmt(r["peak_mem_io"], ".2f"))]),
    (SPEEDUP, [
        ("S / N1 / K", lambda r: f"{r['sizes']['S']} / {r['sizes']['N1']} / {r['sizes']['K']}"),
        ("ours bf16 ms", lambda r: _ms(r["time_s"])),
        ("PyTorch bf16 eager ms", lambda r: _ms(r["torch_time_s"]) if r["torch_time_s"] else r["torch"]),
        ("speed-up vs PyTorch", lambda r: fmt(r["speedup_torch"], ".1f", "x")),
        ("MindSpore f32 composite ms (PyNative / GRAPH)",
         lambda r: f"{_ms(r.get('composite_pynative_s'))} / {_ms(r.get('composite_graph_s'))}"),
        ("speed-up vs composite bf16 / fp32 (faster mode)",
         lambda r: f"{fmt(r.get('speedup_composite'), '.1f', 'x')} / "
                   f"{fmt(r.get('speedup_composite_float32'), '.1f', 'x')}")]),
]

NOTES = [
    "FLOPs count only visible selected keys (sum over rows): forward 2*N1*vis*(576+512), backward "
    "2*N1*vis*(2*512+3*576). Times: median warm call; GFLOP/s and ratios use the faster of GRAPH "
    "(GRAPH_MODE + ms.jit) and PyNative, each in its own process.",
    "GEMM ceiling: the rate of the kernel's per-query-row GEMMs at Kv = mean visible selected keys per row "
    "rounded up to 64, each timed through the kernel library's own GEMM wrapper (cpu/gemm_rate.cc, the oneDNN "
    "named above) with 2 threads running independent calls, in the benchmark's main process after "
    "`import mindspore`; ceiling = total FLOPs / sum(FLOPs_i / rate_i). Forward: S=[N1x576]x[Kvx576]^T, "
    "PV=[N1xKv]x[Kvx512]; backward: S, dP=[N1x512]x[Kvx512]^T, dQ=[N1xKv]x[Kvx576], dK=[N1xKv]^Tx[N1x576], "
    "dV=[N1xKv]^Tx[N1x512] (the backward does not recompute O, so no PV). The operand is bf16 only when "
    "the inputs are bf16 and this CPU has oneDNN's bf16 matmul (MgoBf16Native), as in the kernels; "
    "per-product rates are in benchmarks/results.jsonl.",
    "peak mem / IO = (input bytes + peak RSS growth during the first call) / (input + output bytes).",
    "PyTorch: bf16 eager autograd (gather selected keys, matmul, masked softmax, matmul; backward of q, kv, "
    "q_rope, k_rope), 2 threads, in its own process, rows in chunks of <= 1 GiB of gathered keys with one "
    "backward per chunk; median of --torch-reps calls after a warm-up over the first 32 rows. MindSpore "
    "composite: float32 (its CPU bf16 ops fail), ms.value_and_grad.",
    "Where the time goes (perf record -g on the functional ops, bf16, S=2048, N1=64, K=2048, AMD EPYC AVX2-only, "
    "2026-12-03; share of kernel CPU samples, before -> after the row grouping and vector exp of issue 12): "
    "oneDNN GEMM 71% -> 89%, exp 11% -> 1.6%, bf16 gather 8.7% -> 1.3%, dK/dV scatter-add 7.3% -> 0.8%, "
    "row max 0.9% -> 2.2%, key union + sort (new) 2.5%. The exp had never vectorised (35 ns -> 2 ns per "
    "element); the K-dim-64 dK/dV GEMMs were the slowest per FLOP, which the grouping (K-dim R*N1) addresses.",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n1", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--k", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--torch-reps", type=int, default=1)
    ap.add_argument("--composite", type=int, nargs=3, default=[1024, 64, 1024], metavar=("SEQ", "N1", "K"))
    ap.add_argument("--no-composite", action="store_true")
    ap.add_argument("--torch-sizes", choices=["auto", "all", "composite", "none"], default="auto",
                    help="where to time PyTorch: every size, the composite's only, or nowhere; auto = every size "
                         "when the CPU has a bf16 matmul (avx512_bf16/amx_bf16), else the composite's")
    ap.add_argument("--torch-timeout", type=float, default=1200, help="seconds before a PyTorch run is abandoned")
    ap.add_argument("--quick", action="store_true",
                    help="S=1024, N1=64, K=1024, composite and PyTorch at S=512, N1=64, K=512, 2 reps")
    ap.add_argument("--worker", choices=["op", "composite", "torch"])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--graph", action="store_true", help="worker: compile with ms.jit")
    args = ap.parse_args()
    if args.worker:
        n1, k = args.n1[0], args.k[0]
        work = {"op": lambda: worker_op(args.seq, n1, k, args.dtype, args.reps, args.graph),
                "composite": lambda: worker_composite(args.seq, n1, k, args.reps, args.graph),
                "torch": lambda: worker_torch(args.seq, n1, k, args.reps)}[args.worker]
        print(json.dumps(work()))
        return
    if args.quick:
        args.seq, args.n1, args.k, args.reps, args.composite = 1024, [64], [1024], 2, [512, 64, 512]

    from common import append_results, cpu_bf16_matmul, numpy_gemm_gflops, run_context, write_markdown
    start = time.time()
    ctx = run_context(BENCH)
    runner = Runner(args)
    torch_everywhere = args.torch_sizes == "all" or (args.torch_sizes == "auto" and cpu_bf16_matmul())
    numpy_big = numpy_gemm_gflops(2048, 2048, 2048)
    rows: list[dict] = []
    configs = list(dict.fromkeys((args.seq, n1, k) for n1 in args.n1 for k in args.k))
    comp_cfg = None if args.no_composite else tuple(args.composite)
    for cfg in configs + ([comp_cfg] if comp_cfg and comp_cfg not in configs else []):
        ours = runner.op(*cfg, "bfloat16")
        if ours is None:
            continue
        if cfg in configs:
            rows += kernel_rows(*cfg, "bfloat16", ours, numpy_big)
        comp = runner.composite(*cfg) if cfg == comp_cfg else None
        ours32 = runner.op(*cfg, "float32") if comp else None
        torch_r = runner.torch_time(*cfg) if torch_everywhere or cfg == comp_cfg else {"error": "not run at this size"}
        rows.append(speedup_row(*cfg, ours, ours32, torch_r, comp))
        print(json.dumps(rows[-1]), flush=True)
    notes = [*NOTES, f"Benchmark wall time {time.time() - start:.0f} s."]
    if runner.torch_missing:
        notes.append(f"PyTorch baseline: {runner.torch_missing}.")
    elif not torch_everywhere:
        notes.append("PyTorch was timed at the composite's size only: this CPU has no bf16 matmul (no avx512_bf16 "
                     "or amx_bf16), where PyTorch's bf16 matmul runs at about 1 GFLOP/s and a benchmark-size "
                     "run takes tens of minutes (--torch-sizes all forces it).")
    append_results(ctx, rows)
    write_markdown(BENCH, "sparse_flash_attention / sparse_flash_attention_grad (CPU)", SECTIONS, notes)


if __name__ == "__main__":
    main()
