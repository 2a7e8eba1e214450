"""Benchmark of rope_grad and cla_gate_backward (issue sizes: 4096 tokens, 32 heads, head 128).

Reports time, achieved GB/s (bytes read + written by the op), the ratio to the NumPy copy
bandwidth measured in the same run, and the speed-up over MindSpore autodiff of the float32
composite forward (the fastest of PyNative and GRAPH mode), also measured in this run.
"""
from __future__ import annotations

import argparse

import mindspore as ms
import numpy as np
from common import numpy_copy_gbps, timeit, write_report
from mindspore import Tensor, nn
from mindspore import ops as msops

import ms_grad_ops as mgo

HEAD = 128


class CompositeRope(nn.Cell):
    """The rope forward from mindspore.ops; autodiff of it is the user's alternative to rope_grad."""

    def construct(self, q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, pos: Tensor) -> tuple[Tensor, Tensor]:
        c, s = msops.gather(cos, pos, 0).expand_dims(1), msops.gather(sin, pos, 0).expand_dims(1)
        t = q.shape[0]
        qh, kh = q.reshape(t, -1, HEAD), k.reshape(t, -1, HEAD)
        q_rot = msops.concat([-qh[..., 64:], qh[..., :64]], axis=-1)
        k_rot = msops.concat([-kh[..., 64:], kh[..., :64]], axis=-1)
        return (qh * c + q_rot * s).reshape(t, -1), (kh * c + k_rot * s).reshape(t, -1)


class CompositeClaGate(nn.Cell):
    def construct(self, og: Tensor, ol: Tensor, zg: Tensor, zl: Tensor) -> Tensor:
        return msops.sigmoid(zg).expand_dims(-1) * og + msops.sigmoid(zl).expand_dims(-1) * ol


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
        out.append(timeit(lambda c=cell: c(*args), repeat=repeat))
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
    base = min(base_py, base_graph)
    rows = []
    for dtype in dtypes:
        ms_dtype = getattr(ms, dtype)
        g = [Tensor(x, ms_dtype) for x in g32]
        tab = [Tensor(x, ms_dtype) for x in tab32]
        for mode in ("atb", "vjp"):
            sec = timeit(lambda m=mode, g=g, tab=tab: mgo.ops.rope_grad(g[0], g[1], tab[0], tab[1], lens_t, mode=m),
                         repeat=repeat)
            n_bytes = 4 * tokens * hidden * g[0].itemsize + 2 * max(lens) * HEAD * tab[0].itemsize
            rows.append(_row(f"rope_grad {mode}", dtype, sec, n_bytes, copy_gbps, base, base_py, base_graph))
    return rows


def bench_cla_gate_backward(tokens: int, heads: int, dtypes: list[str], copy_gbps: float, repeat: int) -> list[dict]:
    rng = np.random.default_rng(1)
    big32 = [rng.standard_normal((tokens, heads, HEAD), dtype=np.float32) for _ in range(3)]
    small32 = [rng.standard_normal((tokens, heads), dtype=np.float32) for _ in range(2)]
    base_py, base_graph = autodiff_seconds(
        CompositeClaGate(), 4, [Tensor(big32[1]), Tensor(big32[2]), Tensor(small32[0]), Tensor(small32[1]),
                                Tensor(big32[0])], repeat)
    base = min(base_py, base_graph)
    rows = []
    for dtype in dtypes:
        ms_dtype = getattr(ms, dtype)
        args = [Tensor(x, ms_dtype) for x in big32 + small32]
        sec = timeit(lambda a=args: mgo.ops.cla_gate_backward(*a), repeat=repeat)
        item = args[0].itemsize
        n_bytes = (5 * tokens * heads * HEAD + 4 * tokens * heads) * item
        rows.append(_row("cla_gate_backward", dtype, sec, n_bytes, copy_gbps, base, base_py, base_graph))
    return rows


def _row(op: str, dtype: str, sec: float, n_bytes: int, copy_gbps: float, base: float, base_py: float,
         base_graph: float) -> dict:
    gbps = n_bytes / sec / 1e9
    return {"op": op, "dtype": dtype, "time (ms)": f"{sec * 1e3:.2f}", "GB/s": f"{gbps:.1f}",
            "vs copy bandwidth": f"{gbps / copy_gbps:.0%}",
            "autodiff fp32 PyNative / GRAPH (ms)": f"{base_py * 1e3:.0f} / {base_graph * 1e3:.0f}",
            "speed-up vs best autodiff": f"{base / sec:.0f}x"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    ms.set_device("CPU")
    copy_gbps = numpy_copy_gbps()
    rows = bench_rope_grad(args.tokens, args.heads, args.dtypes, copy_gbps, args.repeat)
    rows += bench_cla_gate_backward(args.tokens, args.heads, args.dtypes, copy_gbps, args.repeat)
    write_report("elementwise", "rope_grad and cla_gate_backward on CPU",
                 [(f"{args.tokens} tokens, {args.heads} heads, head size {HEAD}", rows)],
                 [f"NumPy copy bandwidth in this run: {copy_gbps:.1f} GB/s (bytes read + written).",
                  "GB/s counts the bytes the op must read and write once; time is the median of the "
                  "functional op call in PyNative mode (Python checks and dispatch included).",
                  "Baseline: MindSpore autodiff (GradOperation with the upstream gradient) of the float32 "
                  "composite forward built from mindspore.ops; built-in bf16 ops fail on CPU, so it runs fp32.",
                  "rope_grad 'atb' is ATB's formula (not a true gradient); the autodiff baseline is the true "
                  "gradient, the same work as 'vjp'."])


if __name__ == "__main__":
    main()
