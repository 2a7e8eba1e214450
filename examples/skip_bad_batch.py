"""A GRAPH-mode training loop that skips a bad batch and trains on (docs/troubleshooting.md).

In GRAPH mode one kernel-time error (a sparse index out of range, lengths that do not add up) ends
its step with a ``RuntimeError`` and leaves the compiled network refusing every later call, valid
batches included ("An error occurred in the previous step of this model execution ..."). The loop
below checks each batch's indices and lengths first with ``ms_grad_ops.preflight`` (host-side, the
kernels' own rules on a one-channel proxy of the batch): a bad batch is a ``ValueError`` with the
kernel's message before any graph runs, so it is skipped and the graph stays usable.

The model: packed sequences (TND, cumulative lengths), a query and a key projection of the tokens,
``nn.SparseFlashAttention`` over indices that come with each batch (e.g. from a retrieval step), a
regression loss. Batches 3 and 6 are bad on purpose: an index beyond its sequence's keys, and
lengths whose last entry is not the token count.

``--no-preflight`` runs the same loop without the check, to show what it prevents: the bad batch's
step fails and every later step fails too.
"""
from __future__ import annotations

import argparse

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn

import ms_grad_ops as mgo

DIM, HEADS, TOPK = 16, 2, 4


class Net(nn.Cell):
    """tokens ``[T, DIM]`` -> sparse attention of HEADS query heads over one shared key/value -> loss."""

    def __init__(self) -> None:
        super().__init__()
        self.wq = nn.Dense(DIM, HEADS * DIM, has_bias=False)
        self.wk = nn.Dense(DIM, DIM, has_bias=False)
        self.attention = mgo.nn.SparseFlashAttention(DIM ** -0.5, layout="TND")

    def construct(self, x: Tensor, indices: Tensor, lengths: Tensor, target: Tensor) -> Tensor:
        t = x.shape[0]
        q = self.wq(x).reshape(t, HEADS, DIM)
        k = self.wk(x).reshape(t, 1, DIM)
        out = self.attention(q, k, None, indices, None, None, lengths, lengths)[0]
        return ((out - target) ** 2).mean()


def batch(rng: np.random.Generator, bad: str | None = None) -> dict[str, np.ndarray]:
    """Two packed sequences; per query token TOPK causal key indices of its own sequence (-1 where it
    has fewer keys). ``bad``: "index" puts an index beyond the first sequence's keys, "lengths" makes
    the last cumulative length differ from the token count."""
    lens = rng.integers(4, 9, 2)
    cum = np.cumsum(lens)
    t = int(cum[-1])
    idx = np.full((t, 1, TOPK), -1, np.int32)
    for start, n in zip([0, cum[0]], lens):
        for i in range(n):
            keys = rng.permutation(i + 1)[:TOPK]
            idx[start + i, 0, :keys.size] = keys
    if bad == "index":
        idx[1, 0, 0] = lens[0] + 3          # the first sequence has lens[0] keys
    if bad == "lengths":
        cum = cum - np.array([0, 1])
    return {"x": rng.standard_normal((t, DIM)).astype(np.float32), "indices": idx,
            "lengths": cum.astype(np.int32), "target": rng.standard_normal((t, HEADS, DIM)).astype(np.float32)}


def _reason(e: Exception) -> str:
    """The line of MindSpore's error text that says what happened (the kernel's message, or why the
    graph refuses the step)."""
    lines = [ln.strip() for ln in str(e).splitlines()]
    found = [ln.split("Error message is ", 1)[1] for ln in lines if "Error message is " in ln]
    return (found or [ln for ln in lines if ln and not ln.startswith("-")] or [repr(e)])[0][:300]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--no-preflight", action="store_true", help="skip the check (shows the poisoned graph)")
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    rng = np.random.default_rng(0)
    net = Net()
    step = nn.TrainOneStepCell(net, nn.SGD(net.trainable_params(), learning_rate=0.1))
    # dynamic T: one compiled graph for every batch
    step.set_inputs(Tensor(shape=[None, DIM], dtype=ms.float32), Tensor(shape=[None, 1, TOPK], dtype=ms.int32),
                    Tensor(shape=[2], dtype=ms.int32), Tensor(shape=[None, HEADS, DIM], dtype=ms.float32))
    bad = {3: "index", 6: "lengths"}
    trained = skipped = failed = 0
    for i in range(args.steps):
        b = batch(rng, bad.get(i))
        if not args.no_preflight:
            try:
                mgo.preflight.check_indices(b["indices"], b["lengths"], b["lengths"], key_tokens=b["x"].shape[0],
                                            layout="TND")
            except ValueError as e:
                skipped += 1
                print(f"step {i}: batch skipped: {e}")
                continue
        try:
            loss = step(*(Tensor(b[k]) for k in ("x", "indices", "lengths", "target")))
            trained += 1
            print(f"step {i}: loss {float(loss.asnumpy()):.4f}")
        except RuntimeError as e:
            failed += 1
            print(f"step {i}: step failed: {_reason(e)}")
    print(f"trained {trained} steps, skipped {skipped} bad batches, {failed} steps failed")


if __name__ == "__main__":
    main()
