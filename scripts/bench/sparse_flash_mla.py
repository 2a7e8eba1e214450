"""Benchmark of sparse_flash_mla (forward) and sparse_flash_mla_grad (backward) at DeepSeek-V4-Flash sizes.

One sequence (TND), N1 = 64 query heads, one 512-dim KV head (key is value), the sliding window 128
(ori_win_left 127), per-head sinks, bfloat16; two layer kinds: HCA (cmp_ratio 128, every causally complete
compressed entry) and CSA (cmp_ratio 4, the top-K = 512 of the visible entries, random here; rows with fewer
visible entries select them all, -1 in the spare slots). Reports per configuration, all measured in this run:
- time of the forward and of the backward (PyNative functional ops, warm median), GFLOP/s with FLOPs =
  2 * N1 * sum_rows(keys) * 2 * 512 (forward: S, PV) and 2 * N1 * sum_rows(keys) * 5 * 512 (backward: S, dP,
  dQ, dS^T Q, P^T dO), keys = the row's band + its visible/selected compressed entries;
- the GEMM ceiling: the rate of those per-row products at Kv = mean keys per row rounded up to 64, through the
  kernel library's GEMM wrapper on 2 threads (common.ceiling), and the kernel's ratio to it;
- peak memory: (input bytes + peak RSS growth during the first call) / (input + output bytes);
- the same attention through the package's sparse_flash_attention(_grad) over the concatenated keys
  (``cat([ori_kv, cmp_kv])``, indices ``[band ; cmp + S]`` of 128 + K slots per row, ``value=None``, sinks,
  sparse_mode 0): its time and peak memory, including building the concatenated KV and the index tensor.
Each measurement runs in its own subprocess. Rows are appended to benchmarks/results.jsonl;
benchmarks/sparse_flash_mla.md is rewritten from this run's rows.

Usage: python scripts/bench/sparse_flash_mla.py [--seq 4096 16384] [--kinds hca csa] [--reps 2] [--sfa-max-seq S]
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from common import Product, ceiling_cell, fmt, keys_per_row, spawn_json

D, N1, WINDOW, TOPK = 512, 64, 128, 512
RATIO = {"hca": 128, "csa": 4}
HERE = Path(__file__).resolve().parent
BENCH = "sparse_flash_mla"
KERNELS = "Kernels (V4-Flash: N1 64, D 512, window 128, sinks, bfloat16, one sequence)"
ROUTES = "sparse_flash_mla vs sparse_flash_attention over the concatenated keys (forward + backward)"


def layout(seq: int, kind: str, seed: int = 0) -> tuple[int, np.ndarray | None, int]:
    """(compressed entries, cmp_sparse_indices [seq, 1, K] for CSA else None, sum over rows of keys)."""
    ratio = RATIO[kind]
    s3 = seq // ratio
    rng = np.random.default_rng(seed)
    band = sum(min(WINDOW, t + 1) for t in range(seq))
    visible = [min((t + 1) // ratio, s3) for t in range(seq)]
    if kind == "hca":
        return s3, None, band + sum(visible)
    idx = np.full((seq, 1, TOPK), -1, np.int32)
    for t, v in enumerate(visible):
        n = min(v, TOPK)
        idx[t, 0, :n] = rng.permutation(v)[:n] if v > n else rng.permutation(n)
    return s3, idx, band + sum(min(v, TOPK) for v in visible)


def fwd_products(kv: int) -> list[Product]:
    return [Product("S", N1, kv, D, tb=True), Product("PV", N1, D, kv)]


def grad_products(kv: int) -> list[Product]:
    return [Product("S", N1, kv, D, tb=True), Product("dP", N1, kv, D, tb=True), Product("dQ", N1, D, kv),
            Product("dK", kv, D, N1, ta=True), Product("dV", kv, D, N1, ta=True)]


def _nbytes(*tensors: object) -> int:
    return int(sum(x.nbytes for x in tensors if x is not None))


def worker(route: str, seq: int, kind: str, reps: int) -> dict:
    """Times one route's forward and backward (PyNative; memory of the first, cold call of each)."""
    import mindspore as ms
    from common import PeakMemory, sync, timeit
    from mindspore import Tensor

    from ms_grad_ops import ops
    rng = np.random.default_rng(1)
    s3, idx, _ = layout(seq, kind)
    def bf(*shape: int) -> Tensor:
        return Tensor(rng.standard_normal(shape, dtype=np.float32) * 0.5, ms.bfloat16)
    q, ori, cmp, d_out = bf(seq, N1, D), bf(seq, 1, D), bf(s3, 1, D), bf(seq, N1, D)
    sinks = Tensor(rng.standard_normal(N1).astype(np.float32))
    scale = float(D ** -0.5)
    ratio = RATIO[kind]
    cu = [0, seq]
    if route == "mla":
        cidx = None if idx is None else Tensor(idx)
        kw = dict(cu_seqlens_q=cu, cu_seqlens_ori_kv=cu, cu_seqlens_cmp_kv=[0, s3], sinks=sinks, softmax_scale=scale,
                  cmp_ratio=ratio, ori_win_left=WINDOW - 1, layout="TND")

        def fwd() -> tuple:
            return ops.sparse_flash_mla(q, ori, cmp, None, cidx, **kw)

        def grad(out: Tensor, lse: Tensor) -> tuple:
            return ops.sparse_flash_mla_grad(q, d_out, out, lse, ori, cmp, None, cidx, **kw)
        inputs = _nbytes(q, ori, cmp, cidx, sinks)
    else:  # the concatenated route: the KV copy and the [seq, 1, 128 + K] index tensor are part of its cost
        def concat_inputs() -> tuple:
            kv = ms.ops.concat([ori, cmp], axis=0)
            width = WINDOW + (TOPK if idx is not None else s3)
            sel = np.full((seq, 1, width), -1, np.int32)
            t = np.arange(seq)
            for w in range(WINDOW):  # the band as index slots: t - w
                j = t - w
                sel[:, 0, w] = np.where(j >= 0, j, -1)
            if idx is not None:
                sel[:, 0, WINDOW:] = np.where(idx[:, 0] >= 0, idx[:, 0] + seq, -1)
            else:
                vis = np.minimum((t + 1) // ratio, s3)
                c = np.arange(s3)[None, :]
                sel[:, 0, WINDOW:] = np.where(c < vis[:, None], c + seq, -1)
            return kv, Tensor(sel)
        lens = dict(actual_seq_lengths_query=[seq], actual_seq_lengths_kv=[seq + s3])

        def fwd() -> tuple:
            kv, sel = concat_inputs()
            return ops.sparse_flash_attention(q, kv, None, sel, None, None, **lens, sinks=sinks, scale_value=scale,
                                              layout="TND", sparse_mode=0)

        def grad(out: Tensor, smax: Tensor, ssum: Tensor) -> tuple:
            kv, sel = concat_inputs()
            g = ops.sparse_flash_attention_grad(q, kv, None, sel, d_out, out, smax, ssum,
                                                lens["actual_seq_lengths_query"], lens["actual_seq_lengths_kv"], None,
                                                None, sinks, scale_value=scale, layout="TND", sparse_mode=0)
            return g[0], g[1][:seq], g[1][seq:], g[5]  # d_query, d_ori_kv, d_cmp_kv, d_sinks
        inputs = _nbytes(q, ori, cmp, sinks)
    with PeakMemory() as mem_f:
        res = fwd()
        sync(res)
    out_f = _nbytes(*res)
    with PeakMemory() as mem_g:
        g = grad(*res)
        sync(g)
    in_g, out_g = inputs + _nbytes(d_out, *res), _nbytes(*(x for x in g if x is not None))
    del g
    return dict(t_fwd=timeit(fwd, warmup=0, repeat=reps), t_grad=timeit(lambda: grad(*res), warmup=0, repeat=reps),
                mem_fwd=(inputs + mem_f.growth) / (inputs + out_f), mem_grad=(in_g + mem_g.growth) / (in_g + out_g),
                growth_fwd=mem_f.growth, growth_grad=mem_g.growth, io_fwd=inputs + out_f, io_grad=in_g + out_g)


def kernel_rows(seq: int, kind: str, r: dict, load: str) -> list[dict]:
    from common import ceiling
    s3, _, keys = layout(seq, kind)
    kv = keys_per_row(keys, seq)
    rows = []
    for op, key, gemms, prods in (("sparse_flash_mla", "fwd", 2, fwd_products(kv)),
                                  ("sparse_flash_mla_grad", "grad", 5, grad_products(kv))):
        flops = 2.0 * N1 * keys * gemms * D
        rate = flops / r[f"t_{key}"] / 1e9
        ceil = ceiling(prods, "bfloat16")
        rows.append({"section": KERNELS, "op": op, "kind": kind, "sizes": {"S": seq, "S3": s3, "N1": N1, "D": D,
                                                                          "keys": keys, "Kv": kv},
                     "dtype": "bfloat16", "mode": "PyNative", "time_s": r[f"t_{key}"], "gflop": flops / 1e9,
                     "gflops": rate, "ceiling": ceil, "ratio": rate / ceil["gflops"],
                     "peak_mem_io": r[f"mem_{key}"], "growth_gb": r[f"growth_{key}"] / 1e9, "load": load})
    return rows


def route_row(seq: int, kind: str, mla: dict, sfa: dict, load: str) -> dict:
    return {"section": ROUTES, "op": "fwd+grad", "kind": kind, "sizes": {"S": seq}, "dtype": "bfloat16",
            "time_mla_s": mla["t_fwd"] + mla["t_grad"], "time_sfa_s": sfa["t_fwd"] + sfa["t_grad"],
            "speedup": (sfa["t_fwd"] + sfa["t_grad"]) / (mla["t_fwd"] + mla["t_grad"]),
            "growth_mla_gb": max(mla["growth_fwd"], mla["growth_grad"]) / 1e9,
            "growth_sfa_gb": max(sfa["growth_fwd"], sfa["growth_grad"]) / 1e9, "load": load}


SECTIONS = [
    (KERNELS, [
        ("op", lambda r: r["op"]), ("kind", lambda r: r["kind"]),
        ("S / S3", lambda r: f"{r['sizes']['S']} / {r['sizes']['S3']}"), ("Kv", lambda r: str(r["sizes"]["Kv"])),
        ("ms", lambda r: fmt(r["time_s"] * 1e3)), ("GFLOP/s", lambda r: fmt(r["gflops"])),
        ("GEMM ceiling GFLOP/s (operand; per GEMM)", ceiling_cell), ("/ ceiling", lambda r: fmt(r["ratio"], ".2f")),
        ("peak mem / IO", lambda r: fmt(r["peak_mem_io"], ".2f")), ("load avg", lambda r: r["load"])]),
    (ROUTES, [
        ("kind", lambda r: r["kind"]), ("S", lambda r: str(r["sizes"]["S"])),
        ("sparse_flash_mla ms", lambda r: fmt(r["time_mla_s"] * 1e3)),
        ("concatenated SFA ms", lambda r: fmt(r["time_sfa_s"] * 1e3)),
        ("speed-up", lambda r: fmt(r["speedup"], ".2f", "x")),
        ("peak RSS growth GB (mla / SFA)", lambda r: f"{r['growth_mla_gb']:.2f} / {r['growth_sfa_gb']:.2f}"),
        ("load avg", lambda r: r["load"])]),
]

NOTES = [
    "FLOPs count the keys each row attends (its band of up to 128 original tokens plus its visible or selected "
    "compressed entries): forward 2*N1*keys*2*512, backward 2*N1*keys*5*512. Times: median of --reps warm "
    "PyNative calls (the first, cold call measures memory), each route in its own process.",
    "GEMM ceiling: the rate of the kernel's per-row products at Kv = mean keys per row rounded up to 64 through "
    "the kernel library's GEMM wrapper, 2 threads (common.ceiling); forward S=[64x512]x[Kvx512]^T, "
    "PV=[64xKv]x[Kvx512]; backward S, dP, dQ, dK=[Kvx64]x[64x512], dV likewise.",
    "The concatenated-SFA route's times include building cat([ori_kv, cmp_kv]) and the [S, 1, 128 + K] index "
    "tensor (NumPy) on every call, as a user of that route pays them; its backward splits d_key into the two "
    "sources. peak RSS growth: the larger of the forward's and the backward's first call.",
    "The machine is shared: 'load avg' is the 1-minute load average when the configuration started (2 cores).",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--kinds", nargs="+", default=["hca", "csa"], choices=list(RATIO))
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--sfa-max-seq", type=int, default=1 << 30,
                    help="time the concatenated-SFA route only up to this S (0: never)")
    ap.add_argument("--worker", choices=["mla", "sfa"])
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.seq[0], args.kinds[0], args.reps)))
        return
    from common import append_results, run_context, write_markdown
    start = time.time()
    ctx = run_context(BENCH)
    rows: list[dict] = []
    for seq in args.seq:
        for kind in args.kinds:
            load = f"{os.getloadavg()[0]:.1f}"
            base = ["--seq", str(seq), "--kinds", kind, "--reps", str(args.reps)]
            mla = spawn_json([str(HERE / "sparse_flash_mla.py"), "--worker", "mla", *base], cwd=HERE)
            if "error" in mla:
                continue
            rows += kernel_rows(seq, kind, mla, load)
            if seq <= args.sfa_max_seq:
                sfa = spawn_json([str(HERE / "sparse_flash_mla.py"), "--worker", "sfa", *base], cwd=HERE)
                if "error" not in sfa:
                    rows.append(route_row(seq, kind, mla, sfa, load))
            print(json.dumps(rows[-1]), flush=True)
    append_results(ctx, rows)
    write_markdown(BENCH, "sparse_flash_mla / sparse_flash_mla_grad (CPU)", SECTIONS,
                   [*NOTES, f"Benchmark wall time {time.time() - start:.0f} s."])


if __name__ == "__main__":
    main()
