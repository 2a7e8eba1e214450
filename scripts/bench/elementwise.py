"""Benchmark of rope_grad and cla_gate_backward (issue sizes: 4096 tokens, 32 heads, head 128).

Reports time in GRAPH mode (a compiled Cell calling the op: how the users train) and PyNative
mode (the functional op, Python checks included), achieved GB/s (bytes the op must read + write
once) from the GRAPH time, the ratio to the NumPy copy bandwidth measured in the same run, and the
speed-up over MindSpore autodiff of the float32 composite forward in the same mode, also measured
in this run. Rows are appended to benchmarks/results.jsonl; benchmarks/elementwise.md is
rewritten from this run's rows.
"""
from __future__ import annotations

import argparse

import mindspore as ms
import numpy as np
from common import append_results, fmt, numpy_copy_gbps, run_context, timeit, write_markdown
from mindspore import Tensor, nn
from mindspore import ops as msops

import ms_grad_ops as mgo
from ms_grad_ops.composite import CompositeClaGateMerge, CompositeRope

HEAD = 128
SECTION = "rope_grad and cla_gate_backward"


class OpCell(nn.Cell):
    """Calls ``fn`` inside a compiled graph (GRAPH mode)."""

    def __init__(self, fn: object) -> None:
        super().__init__()
        self.fn = fn

    def construct(self, *args: Tensor) -> tuple:
        return self.fn(*args)


def op_seconds(fn: object, args: list[Tensor], repeat: int) -> tuple[float, float]:
    """(PyNative, GRAPH) time of ``fn(*args)``."""
    py = timeit(lambda: fn(*args), repeat=repeat)
    ms.set_context(mode=ms.GRAPH_MODE)
    cell = OpCell(fn)
    graph = timeit(lambda: cell(*args), repeat=repeat)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    return py, graph


def _rope_grad_atb(g: Tensor, k: Tensor, c: Tensor, s: Tensor, lens: Tensor) -> tuple:
    return mgo.ops.rope_grad(g, k, c, s, lens, mode="atb")


def _rope_grad_vjp(g: Tensor, k: Tensor, c: Tensor, s: Tensor, lens: Tensor) -> tuple:
    return mgo.ops.rope_grad(g, k, c, s, lens, mode="vjp")


class Backward(nn.Cell):
    """Gradient of ``net`` w.r.t. its first ``n_grads`` inputs for a given upstream gradient."""

    def __init__(self, net: nn.Cell, n_grads: int) -> None:
        super().__init__()
        self.net = net
        self.grad = msops.GradOperation(get_all=True, sens_param=True)
        self.n_grads = n_grads

    def construct(self, *args: Tensor) -> tuple:
        return self.grad(self.net)(*args)[: self.n_grads]


def autodiff_seconds(net: nn.Cell, n_grads: int, args: list[Tensor], repeat: int) -> tuple[float, float]:
    """(PyNative, GRAPH) time of autodiff of ``net`` (args end with the upstream gradient)."""
    out = []
    for mode in (ms.PYNATIVE_MODE, ms.GRAPH_MODE):
        ms.set_context(mode=mode)
        cell = Backward(net, n_grads)
        out.append(timeit(lambda c=cell: c(*args), repeat=repeat, every_output=True))
    ms.set_context(mode=ms.PYNATIVE_MODE)
    return out[0], out[1]


def bench_rope_grad(tokens: int, heads: int, dtypes: list[str], copy_gbps: float, repeat: int) -> list[dict]:
    rng = np.random.default_rng(0)
    lens = [tokens // 4] * 4
    hidden = heads * HEAD
    g32 = [rng.standard_normal((tokens, hidden), dtype=np.float32) for _ in range(2)]
    tab32 = [rng.standard_normal((max(lens), HEAD), dtype=np.float32) for _ in range(2)]
    lens_t = Tensor(np.array(lens, np.int32))
    pos = Tensor(np.concatenate([np.arange(n) for n in lens]).astype(np.int32))
    base_py, base_graph = autodiff_seconds(
        CompositeRope(), 2, [Tensor(g32[0]), Tensor(g32[1]), Tensor(tab32[0]), Tensor(tab32[1]), pos,
                             (Tensor(g32[0]), Tensor(g32[1]))], repeat)
    rows = []
    for dtype in dtypes:
        ms_dtype = getattr(ms, dtype)
        g = [Tensor(x, ms_dtype) for x in g32]
        tab = [Tensor(x, ms_dtype) for x in tab32]
        for mode, fn in (("atb", _rope_grad_atb), ("vjp", _rope_grad_vjp)):
            py, graph = op_seconds(fn, [g[0], g[1], tab[0], tab[1], lens_t], repeat)
            n_bytes = 4 * tokens * hidden * g[0].itemsize + 2 * max(lens) * HEAD * tab[0].itemsize
            rows.append(_row(f"rope_grad {mode}", dtype, {"tokens": tokens, "heads": heads, "head": HEAD}, py, graph,
                             n_bytes, copy_gbps, base_py, base_graph))
    return rows


def bench_cla_gate_backward(tokens: int, heads: int, dtypes: list[str], copy_gbps: float, repeat: int) -> list[dict]:
    rng = np.random.default_rng(1)
    big32 = [rng.standard_normal((tokens, heads, HEAD), dtype=np.float32) for _ in range(3)]
    small32 = [rng.standard_normal((tokens, heads), dtype=np.float32) for _ in range(2)]
    base_py, base_graph = autodiff_seconds(
        CompositeClaGateMerge(), 4, [Tensor(big32[1]), Tensor(big32[2]), Tensor(small32[0]), Tensor(small32[1]),
                                Tensor(big32[0])], repeat)
    rows = []
    for dtype in dtypes:
        ms_dtype = getattr(ms, dtype)
        args = [Tensor(x, ms_dtype) for x in big32 + small32]
        py, graph = op_seconds(mgo.ops.cla_gate_backward, args, repeat)
        n_bytes = (5 * tokens * heads * HEAD + 4 * tokens * heads) * args[0].itemsize
        rows.append(_row("cla_gate_backward", dtype, {"tokens": tokens, "heads": heads, "head": HEAD}, py, graph,
                         n_bytes, copy_gbps, base_py, base_graph))
    return rows


def _row(op: str, dtype: str, sizes: dict[str, int], py: float, graph: float, n_bytes: int, copy_gbps: float,
         base_py: float, base_graph: float) -> dict:
    gbps = n_bytes / graph / 1e9
    return {"section": SECTION, "op": op, "sizes": sizes, "dtype": dtype, "mode": "GRAPH", "time_s": graph,
            "time_graph_s": graph, "time_pynative_s": py, "io_bytes": n_bytes, "gbps": gbps, "ceiling_gbps": copy_gbps,
            "ratio": gbps / copy_gbps, "composite_graph_s": base_graph, "composite_pynative_s": base_py,
            "speedup_composite_graph": base_graph / graph, "speedup_composite_pynative": base_py / py}


COLUMNS = [
    ("op", lambda r: r["op"]), ("dtype", lambda r: r["dtype"]),
    ("GRAPH / PyNative (ms)", lambda r: f"{r['time_graph_s'] * 1e3:.1f} / {r['time_pynative_s'] * 1e3:.1f}"),
    ("GB/s (GRAPH)", lambda r: fmt(r["gbps"], ".1f")), ("vs copy bandwidth", lambda r: fmt(r["ratio"], ".0%")),
    ("autodiff fp32 GRAPH / PyNative (ms)",
     lambda r: f"{r['composite_graph_s'] * 1e3:.0f} / {r['composite_pynative_s'] * 1e3:.0f}"),
    ("speed-up GRAPH / PyNative",
     lambda r: f"{r['speedup_composite_graph']:.0f}x / {r['speedup_composite_pynative']:.0f}x"),
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="1024 tokens, 3 repeats")
    args = parser.parse_args(argv)
    if args.quick:
        args.tokens, args.repeat = 1024, 3
    ms.set_device("CPU")
    ctx = run_context("elementwise")
    copy_gbps = numpy_copy_gbps()
    rows = bench_rope_grad(args.tokens, args.heads, args.dtypes, copy_gbps, args.repeat)
    rows += bench_cla_gate_backward(args.tokens, args.heads, args.dtypes, copy_gbps, args.repeat)
    append_results(ctx, rows)
    write_markdown("elementwise", "rope_grad and cla_gate_backward on CPU", [(SECTION, COLUMNS)], [
        f"{args.tokens} tokens, {args.heads} heads, head size {HEAD}; NumPy copy bandwidth in this run: "
        f"{copy_gbps:.1f} GB/s (bytes read + written).",
        "GB/s counts the bytes the op must read and write once, over the GRAPH-mode time (median "
        "of a compiled Cell calling the op; MindSpore's launch included). PyNative times the "
        "functional op call, Python checks and dispatch included.",
        "Baseline: MindSpore autodiff (GradOperation with the upstream gradient) of the float32 "
        "composite forward built from mindspore.ops, in the same mode as the op it is compared "
        "with; built-in bf16 ops fail on CPU, so it runs fp32.",
        "rope_grad 'atb' is ATB's formula (not a true gradient); the autodiff baseline is the true "
        "gradient, the same work as 'vjp'."])


if __name__ == "__main__":
    main()
