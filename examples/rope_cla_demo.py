"""Second example: train a small network in GRAPH mode whose backward runs the fused rope and CLA kernels.

The network projects packed (unpadded) token features to q and k, rotates them with
``ms_grad_ops.nn.RotaryEmbedding`` (bprop: the fused ``rope_grad`` kernel, mode="vjp"), treats
them as two attention branches merged by ``ms_grad_ops.nn.ClaGateMerge`` (bprop: the fused
``cla_gate_backward`` kernel), and regresses a fixed random teacher. Before training, one
gradient of the whole network is checked against MindSpore autodiff of the same network built
from plain mindspore.ops.
"""
from __future__ import annotations

import argparse

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn

import ms_grad_ops as mgo
from ms_grad_ops.composite import CompositeClaGateMerge, CompositeRope

HEAD = 128


def rope_tables(max_seq_len: int, base: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin ``[max_seq_len, 128]`` in the rotate_half layout."""
    inv = base ** (-np.arange(0, HEAD, 2) / HEAD)
    ang = np.arange(max_seq_len)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], axis=1)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


class ToyBlock(nn.Cell):
    """x [T, hidden] -> rope(q, k) -> CLA gate merge of the two branches -> out [T, hidden]."""

    def __init__(self, hidden: int, fused: bool = True) -> None:
        super().__init__()
        self.heads = hidden // HEAD
        self.wq = nn.Dense(hidden, hidden, has_bias=False)
        self.wk = nn.Dense(hidden, hidden, has_bias=False)
        self.wg = nn.Dense(hidden, self.heads)
        self.wl = nn.Dense(hidden, self.heads)
        self.wo = nn.Dense(hidden, hidden)
        self.rope = mgo.nn.RotaryEmbedding() if fused else CompositeRope()
        self.merge = mgo.nn.ClaGateMerge() if fused else CompositeClaGateMerge()

    def construct(self, x: Tensor, cos: Tensor, sin: Tensor, lens_or_pos: Tensor) -> Tensor:
        t = x.shape[0]
        q, k = self.rope(self.wq(x), self.wk(x), cos, sin, lens_or_pos)
        merged = self.merge(q.reshape(t, self.heads, HEAD), k.reshape(t, self.heads, HEAD), self.wg(x), self.wl(x))
        return self.wo(merged.reshape(t, -1))


def copy_weights(src: nn.Cell, dst: nn.Cell) -> None:
    for (_, p), (_, q) in zip(src.parameters_and_names(), dst.parameters_and_names()):
        q.set_data(p.data.copy())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[5, 3, 8, 16, 1])
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    rng = np.random.default_rng(0)
    lens = np.array(args.seq_lens, np.int32)
    t = int(lens.sum())
    cos_np, sin_np = rope_tables(int(lens.max()))
    x = Tensor(rng.standard_normal((t, args.hidden)).astype(np.float32))
    cos, sin, lens_t = Tensor(cos_np), Tensor(sin_np), Tensor(lens)
    pos = Tensor(np.concatenate([np.arange(n) for n in lens]).astype(np.int32))

    teacher = ToyBlock(args.hidden)
    target = teacher(x, cos, sin, lens_t)
    net = ToyBlock(args.hidden)
    ref_net = ToyBlock(args.hidden, fused=False)
    copy_weights(net, ref_net)

    def fused_loss(side: Tensor) -> Tensor:
        return ((net(x, cos, sin, side) - target) ** 2).mean()

    def composite_loss(side: Tensor) -> Tensor:
        return ((ref_net(x, cos, sin, side) - target) ** 2).mean()

    fused_grads = ms.grad(fused_loss, None, net.trainable_params())(lens_t)
    auto_grads = ms.grad(composite_loss, None, ref_net.trainable_params())(pos)
    worst = max(float(np.linalg.norm(a.asnumpy() - b.asnumpy()) / max(np.linalg.norm(b.asnumpy()), 1e-30))
                for a, b in zip(fused_grads, auto_grads))
    print(f"gradient check vs MindSpore autodiff of the composite: max relative L2 error {worst:.2e}")
    if worst > 1e-5:
        raise SystemExit("fused backward disagrees with autodiff")

    optimizer = nn.Adam(net.trainable_params(), learning_rate=args.lr)
    grad_fn = ms.value_and_grad(fused_loss, None, optimizer.parameters)

    @ms.jit
    def train_step(side: Tensor) -> Tensor:
        loss, grads = grad_fn(side)
        optimizer(grads)
        return loss

    losses = []
    for step in range(args.steps):
        losses.append(float(train_step(lens_t).asnumpy()))
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {losses[-1]:.6f}")
    print(f"loss {losses[0]:.6f} -> {losses[-1]:.6f} over {args.steps} steps (GRAPH mode, fused CPU backward)")
    if not losses[-1] < 0.5 * losses[0]:
        raise SystemExit("loss did not go down")


if __name__ == "__main__":
    main()
