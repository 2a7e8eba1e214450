"""A larger run of the sparse_flash_attention(_grad) Ascend C kernels on the CPU twin (not in CI).

Usage (from any directory):
    /work/venvs/<env>/bin/python /work/main/scripts/twin_sfa_large.py [--dtype bfloat16] [--cores 24]

Runs the forward and the grad kernel on DeepSeek-like shapes (D = 512, Dr = 64, N1 = 64 or 128,
K = 2048 slots of blocks of 1 or 16 keys, causal, TND with uneven sequences) as a mixed
AIC + AIV launch on the twin, compares every output with the float64 reference at the CPU
tolerances (fp16 2e-3, bf16 1e-2 relative L2), and checks that the grad's bits do not change
with the core count or the core execution order. Takes minutes (the twin is a scalar model and
the reference plain NumPy loops). Nothing here ran on an NPU.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "support"), str(ROOT / "tests" / "ascend"), str(ROOT)]

from _sfa_data import make_case  # noqa: E402
from _util import TOLERANCES, quantize, rel_l2  # noqa: E402
from ascendc_harness import twin_sfa as sfa  # noqa: E402

from ms_grad_ops import reference as ref  # noqa: E402

SHAPES = {
    "tnd_n64_bs1": dict(layout="TND", lens_q=[40, 9, 64], lens_kv=[600, 9, 2100], n1=64, d=512, dr=64, k=2048,
                        pattern="mixed"),
    "tnd_n128_bs16": dict(layout="TND", lens_q=[24, 40], lens_kv=[1500, 700], n1=128, d=512, dr=64, k=128, bs=16),
    "bsnd_n16_mode0": dict(layout="BSND", batch=2, s1=48, s2=900, n1=16, d=512, dr=64, k=1024, bs=1, mode=0),
}


def problem(name: str, dtype: str) -> sfa.SfaProblem:
    case = make_case(np.random.default_rng(2026), **SHAPES[name])
    qz = {n: None if getattr(case, n) is None else quantize(getattr(case, n), dtype)
          for n in ("query", "key", "value", "query_rope", "key_rope")}
    lens_q = None if case.lens_q is None else np.asarray(case.lens_q)
    lens_kv = None if case.lens_kv is None else np.asarray(case.lens_kv)
    attrs = dict(scale_value=case.scale_value, sparse_block_size=case.sparse_block_size, layout=case.layout,
                 sparse_mode=case.sparse_mode)
    return sfa.SfaProblem(dtype, qz["query"], qz["key"], qz["value"], case.sparse_indices, qz["query_rope"],
                          qz["key_rope"], lens_q, lens_kv, attrs)


def report(what: str, got: np.ndarray, want: np.ndarray, tol: float) -> bool:
    err = rel_l2(got, want)
    ok = bool(np.isfinite(got).all()) and err <= tol
    print(f"    {what:14s} rel L2 {err:.3e}  {'ok' if ok else 'FAIL'}")
    return ok


def run(name: str, dtype: str, cores: int) -> bool:
    p = problem(name, dtype)
    tol = TOLERANCES["attention"][dtype]
    attrs = p.attrs
    print(f"{name} ({dtype}, {cores} cores): query {p.query.shape}, key {p.key.shape}, K {p.sparse_indices.shape[-1]}")
    t0 = time.perf_counter()
    fwd = sfa.sparse_flash_attention(p, core_num=cores)
    t1 = time.perf_counter()
    out, smax, ssum = ref.sparse_flash_attention(p.query, p.key, p.value, p.sparse_indices, p.query_rope,
                                                 p.key_rope, p.lens_q, p.lens_kv, **attrs)
    print(f"  forward: twin {t1 - t0:.1f} s, reference {time.perf_counter() - t1:.1f} s")
    ok = report("out", fwd.outputs[0], out, tol)
    live = ssum > 0
    ok &= report("softmax_max", fwd.outputs[1].reshape(smax.shape)[live], smax[live], 1e-5)
    ok &= report("softmax_sum", fwd.outputs[2].reshape(ssum.shape)[live], ssum[live], 1e-5)

    d_out = quantize(np.random.default_rng(7).standard_normal(out.shape), dtype)
    out_q, smax32, ssum32 = quantize(out, dtype), smax.astype(np.float32), ssum.astype(np.float32)
    t0 = time.perf_counter()
    grad = sfa.sparse_flash_attention_grad(p, d_out, out_q, smax32, ssum32, core_num=cores)
    t1 = time.perf_counter()
    want = ref.sparse_flash_attention_grad(p.query, p.key, p.value, p.sparse_indices, d_out, out_q, smax32, ssum32,
                                           p.lens_q, p.lens_kv, p.query_rope, p.key_rope, **attrs)
    print(f"  grad: twin {t1 - t0:.1f} s, reference {time.perf_counter() - t1:.1f} s")
    for what, got, w in zip(("d_query", "d_key", "d_value", "d_query_rope", "d_key_rope"), grad.outputs, want):
        ok &= report(what, got, w, tol)
    other = sfa.sparse_flash_attention_grad(p, d_out, out_q, smax32, ssum32, core_num=max(1, cores // 3), seed=99)
    same = all(np.array_equal(a, b) for a, b in zip(grad.outputs, other.outputs))
    print(f"    same bits with {max(1, cores // 3)} cores and a shuffled order: {same}")
    return ok and same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=("float16", "bfloat16"), default="bfloat16")
    parser.add_argument("--cores", type=int, default=24)
    parser.add_argument("--only", choices=sorted(SHAPES))
    args = parser.parse_args()
    names = [args.only] if args.only else sorted(SHAPES)
    results = [run(n, args.dtype, args.cores) for n in names]
    print("all ok" if all(results) else "FAILURES")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
