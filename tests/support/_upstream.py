"""Gradients of the parameters upstream of a Cell: an ``nn.Dense`` in front of each float input,
``ms.grad`` of the Dense weights and biases against the chain rule through the Dense done in NumPy.
Shared by tests/all_ops/test_cells_upstream.py (every Cell) and the lightning_indexer_grad tests."""
from __future__ import annotations

from dataclasses import dataclass

import mindspore as ms
import numpy as np
from _util import MS_DTYPES, assert_close, quantize
from mindspore import Tensor, nn
from mindspore import ops as msops

FIN = 8  # input features of every upstream Dense


def weighted(out: Tensor, w: Tensor) -> Tensor:
    """``sum(out * w)`` in float32 (d/d out = w, rounded to out's dtype on the way back)."""
    return (msops.cast(out, ms.float32) * w).sum()


def geometry(layout: str, lens_q: list[int], lens_k: list[int]) -> tuple[list, tuple, tuple, tuple]:
    """(per-batch (S1, S2), query token dims, key token dims, cumulative lengths or Nones): TND
    packs batches of ``lens_q``/``lens_k`` tokens; BSND has len(lens_q) batches of max lengths."""
    if layout == "TND":
        cum = (list(np.cumsum(lens_q)), list(np.cumsum(lens_k)))
        return list(zip(lens_q, lens_k)), (sum(lens_q),), (sum(lens_k),), cum
    b, s1, s2 = len(lens_q), max(lens_q), max(lens_k)
    return [(s1, s2)] * b, (b, s1), (b, s2), (None, None)


def sfa_indices(rng: np.random.Generator, batches: list[tuple[int, int]], k: int) -> np.ndarray:
    """One row of K token indices per query (-1 slots anywhere, a few causally hidden keys)."""
    rows = []
    for s1, s2 in batches:
        for _ in range(s1):
            row = np.full(k, -1, np.int32)
            take = rng.permutation(s2)[:int(rng.integers(1, k + 1))]
            row[:take.size] = take
            rows.append(rng.permutation(row))
    return np.stack(rows)


@dataclass
class Upstream:
    """Inputs ``x_i = cast(Dense_i(h_i).reshape(shape_i), dtype)``: the float64 values the Cell sees
    (``x``), the Dense inputs ``h`` and parameters (``w``, ``b``)."""

    shapes: list[tuple[int, ...]]
    dtype: str
    h: list[np.ndarray]
    w: list[np.ndarray]
    b: list[np.ndarray]
    x: list[np.ndarray]

    @staticmethod
    def make(rng: np.random.Generator, shapes: list[tuple[int, ...]], dtype: str) -> Upstream:
        h, w, b, x = [], [], [], []
        for shape in shapes:
            rows, feats = shape[0], int(np.prod(shape[1:]))
            h.append(rng.standard_normal((rows, FIN)).astype(np.float32))
            w.append((rng.standard_normal((feats, FIN)) / np.sqrt(FIN)).astype(np.float32))
            b.append((0.1 * rng.standard_normal(feats)).astype(np.float32))
            x.append(quantize((h[-1].astype(np.float64) @ w[-1].T + b[-1]).reshape(shape), dtype))
        return Upstream(shapes, dtype, h, w, b, x)

    def param_grads(self, x_grads: list[np.ndarray]) -> list[np.ndarray]:
        """Chain rule through the Dense layers: (dW_0, db_0, dW_1, db_1, ...) from d loss / d x_i."""
        out = []
        for h, g in zip(self.h, x_grads):
            g2 = np.asarray(g, np.float64).reshape(h.shape[0], -1)
            out += [g2.T @ h.astype(np.float64), g2.sum(axis=0)]
        return out


class UpstreamNet(nn.Cell):
    """``construct(*hs, *rest) -> body(xs, rest)``: one float32 ``nn.Dense`` per float input makes
    ``x_i = cast(Dense_i(h_i), dtype)``, reshaped to ``shapes[i]`` but for its first dim, which
    follows h's (so one graph takes other token counts under ``set_inputs``)."""

    def __init__(self, up: Upstream, body: nn.Cell) -> None:
        super().__init__()
        self.denses = nn.CellList([nn.Dense(FIN, w.shape[0], weight_init=Tensor(w), bias_init=Tensor(b))
                                   for w, b in zip(up.w, up.b)])
        self.tails = tuple(shape[1:] for shape in up.shapes)
        self.dtype = MS_DTYPES[up.dtype]
        self.body = body

    def construct(self, *tensors: Tensor) -> object:
        n = len(self.tails)
        xs = ()
        for dense, h, tail in zip(self.denses, tensors[:n], self.tails):
            xs = xs + (msops.cast(dense(h).reshape((-1,) + tail), self.dtype),)
        return self.body(xs, tensors[n:])


def check_param_grads(up: Upstream, body: nn.Cell, out_weights: list[np.ndarray],
                      want_x_grads: list[np.ndarray], what: str) -> None:
    """ms.grad of the Dense parameters vs the chain rule applied to ``want_x_grads`` (float64).

    Each Dense's weight and bias gradients are compared together: a bias gradient alone can be
    zero in exact arithmetic (attention is invariant to adding one vector to every key, so the
    key-side bias gets only rounding noise) and has no meaningful relative error of its own."""
    net = UpstreamNet(up, body)
    params = net.denses.trainable_params()
    grads = ms.grad(net, grad_position=None, weights=params)(*(Tensor(h) for h in up.h),
                                                            *(Tensor(w) for w in out_weights))
    wants = up.param_grads(want_x_grads)
    for i in range(0, len(params), 2):
        got = np.concatenate([g.asnumpy().astype(np.float64).ravel() for g in grads[i:i + 2]])
        want = np.concatenate([w.ravel() for w in wants[i:i + 2]])
        name = params[i].name.rsplit(".", 1)[0]
        if not want.any():
            assert not got.any(), f"{what}: {name} must get zero gradients"
            continue
        assert_close(got, want, up.dtype, "attention", f"{what}: {name} weight and bias")
