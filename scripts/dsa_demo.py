"""Main job: train a small model built on ``ms_grad_ops.nn.DSAttention`` in GRAPH mode on a
long-context task whose answer depends on a few distant tokens, in DeepSeek-V3.2's two stages.

Task (``Task``): each sequence of ``--seq-len`` tokens is noise except up to ``--needles``
marker tokens at random positions of its first half; marker i carries a value in
``[0, --values)``. Every one of the last ``--queries`` positions must name every marker's value
(or its absence), so it needs every marker present. The attention of a query row has to land on
the markers: with top-k sparse attention, the lightning indexer has to put them inside its top
``--topk`` keys, or the answer is lost.

Stages (DeepSeek-V3.2 paper): (1) dense warm-up: the attention sees every visible key (K = S);
the model learns the task and the indexer learns the attention distribution through its KL loss
(DeepSeek starts from a trained dense model and freezes it here; this model starts from scratch,
so both train, each from its own loss: the indexer's input is detached). (2) sparse training: the
attention sees only the indexer's top-k keys; the task loss trains the model, the KL loss over
the selected keys trains the indexer. The same model trained dense for the same number of steps
is the baseline. Recall = fraction of (query row, present marker) pairs whose marker is in
the top-k.
"""
from __future__ import annotations

import argparse
import time

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn
from mindspore import ops as msops

import ms_grad_ops as mgo


class Task:
    """Batches: tokens ``[B, S]`` int32, labels ``[B]`` int32, marker positions ``[B, M]`` (-1 = absent).

    Slot i of ``needles`` holds a marker with probability ``present`` (token = slot and value), at a
    random position of the first half; the answer names every slot's value or its absence
    (``(values + 1) ** needles`` classes). Absence is an answer of its own, so no value can be
    inferred from not seeing a marker: every marker present is needed.
    """

    def __init__(self, seq_len: int, needles: int, values: int, noise: int, queries: int, seed: int,
                 present: float = 0.8) -> None:
        self.seq_len, self.needles, self.values, self.noise, self.queries = seq_len, needles, values, noise, queries
        self.present = present
        self.rng = np.random.default_rng(seed)

    @property
    def vocab(self) -> int:
        return self.noise + self.needles * self.values

    @property
    def classes(self) -> int:
        return (self.values + 1) ** self.needles

    def batch(self, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tokens = self.rng.integers(0, self.noise, (b, self.seq_len)).astype(np.int32)
        where = np.stack([self.rng.choice(self.seq_len // 2, self.needles, replace=False) for _ in range(b)])
        vals = self.rng.integers(0, self.values, (b, self.needles))
        here = self.rng.random((b, self.needles)) < self.present
        marker = self.noise + np.arange(self.needles) * self.values + vals
        rows, slots = np.nonzero(here)
        tokens[rows, where[rows, slots]] = marker[rows, slots]
        label = (np.where(here, vals + 1, 0) * (self.values + 1) ** np.arange(self.needles)).sum(1)
        return tokens, label.astype(np.int32), np.where(here, where, -1)


class Model(nn.Cell):
    """Embedding -> DSAttention (residual) -> RMS-normed MLP -> class logits at every position."""

    def __init__(self, vocab: int, classes: int, dim: int, seq_len: int, topk: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.attn = mgo.nn.DSAttention(dim, n_heads=4, q_lora_rank=dim // 2, kv_lora_rank=dim // 2,
                                       qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, index_n_heads=4,
                                       index_head_dim=16, index_topk=topk, max_seq_len=seq_len)
        self.norm = nn.LayerNorm((dim,))
        self.mlp = nn.SequentialCell(nn.Dense(dim, 4 * dim), nn.GELU(), nn.Dense(4 * dim, classes))

    def construct(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        h = self.embed(tokens)
        a, indexer_loss = self.attn(h)
        return self.mlp(self.norm(h + a)), indexer_loss


class Loss(nn.Cell):
    """Cross-entropy of the answer at the last ``queries`` positions, the indexer's KL loss per
    token, and for the metrics the predictions there and the top-``k`` keys of the indexer (at the
    sparse K whatever the model's own K, so the dense warm-up shows what sparse attention would see)."""

    def __init__(self, model: Model, queries: int, k: int) -> None:
        super().__init__()
        self.model, self.queries = model, queries
        self.ce = nn.CrossEntropyLoss()
        self.topk = mgo.nn.LightningIndexer(k)

    def construct(self, tokens: Tensor, labels: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        logits, kl = self.model(tokens)
        b, s, c = logits.shape
        q = logits[:, s - self.queries:]
        task = self.ce(q.reshape(b * self.queries, c), msops.tile(labels.reshape(b, 1), (1, self.queries)).reshape(-1))
        q_idx, k_idx, weights = self.model.attn.index_inputs(self.model.embed(tokens))
        top = self.topk(q_idx, k_idx, weights)[0][:, s - self.queries:, 0]
        return task, kl.sum() / (b * s), q.argmax(-1), top


class TrainStep(nn.Cell):
    """One Adam step on ``task + kl`` (each reaches only its own parameters). Returns the losses,
    the predictions and the top-k keys *before* the update: every batch is new, so these measure
    the model on unseen data."""

    def __init__(self, loss: Loss, lr: float, data_parallel: bool = False) -> None:
        super().__init__()
        self.loss = loss
        self.optimizer = nn.Adam(loss.trainable_params(), learning_rate=lr)
        self.grad = ms.value_and_grad(self._total, None, self.optimizer.parameters, has_aux=True)
        # Data parallel: every rank applies the mean of all ranks' gradients (AllReduce).
        self.reducer = nn.DistributedGradReducer(self.optimizer.parameters, mean=True) if data_parallel else None

    def _total(self, tokens: Tensor, labels: Tensor) -> tuple[Tensor, ...]:
        task, kl, pred, top = self.loss(tokens, labels)
        return task + kl, task, kl, pred, top

    def construct(self, tokens: Tensor, labels: Tensor) -> tuple[Tensor, ...]:
        (_, task, kl, pred, top), grads = self.grad(tokens, labels)
        if self.reducer is not None:
            grads = self.reducer(grads)
        self.optimizer(grads)
        return task, kl, pred, top


def train(name: str, step: TrainStep, task: Task, steps: int, batch: int, log_every: int
          ) -> tuple[float, float]:
    """Runs ``steps`` steps, printing means over each window of ``log_every``; returns the last
    window's (accuracy, recall)."""
    start, window = time.time(), []
    for i in range(steps):
        tokens, labels, where = task.batch(batch)
        loss, kl, pred, top = step(Tensor(tokens), Tensor(labels))
        acc = float((pred.asnumpy() == labels[:, None]).mean())
        hit = (top.asnumpy()[:, :, None, :] == where[:, None, :, None]).any(-1)      # [B, Q, needles]
        present = np.broadcast_to(where[:, None, :] >= 0, hit.shape)
        window.append((float(loss.asnumpy()), float(kl.asnumpy()), float(hit[present].mean()), acc))
        if (i + 1) % log_every == 0 or i == steps - 1:
            loss_m, kl_m, recall, acc = np.mean(window, 0)
            print(f"[{name}] step {i + 1:4d}  task loss {loss_m:.4f}  indexer KL {kl_m:.4f}  "
                  f"top-{step.loss.topk.sparse_count} recall {recall:.3f}  accuracy {acc:.3f}  "
                  f"({time.time() - start:.0f} s)", flush=True)
            window = []
    return float(acc), float(recall)


def copy_parameters(src: nn.Cell, dst: nn.Cell) -> None:
    for p, q in zip(src.get_parameters(), dst.get_parameters()):
        q.set_data(p.data.copy())


def task_arguments(parser: argparse.ArgumentParser) -> None:
    """The task, model and optimiser options shared with ``dsa_data_parallel.py``."""
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--topk", type=int, default=8)
    parser.add_argument("--needles", type=int, default=2)
    parser.add_argument("--values", type=int, default=4)
    parser.add_argument("--noise", type=int, default=32)
    parser.add_argument("--queries", type=int, default=8)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-2)


def make_task(args: argparse.Namespace, seed: int = 0) -> Task:
    return Task(args.seq_len, args.needles, args.values, args.noise, args.queries, seed=seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    task_arguments(parser)
    parser.add_argument("--warmup-steps", type=int, default=80)
    parser.add_argument("--sparse-steps", type=int, default=60)
    parser.add_argument("--log-every", type=int, default=20)
    args = parser.parse_args()

    start = time.time()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    task = make_task(args)

    dense = Model(task.vocab, task.classes, args.dim, args.seq_len, topk=args.seq_len)
    dense_step = TrainStep(Loss(dense, args.queries, args.topk), args.lr)
    print(f"stage 1: dense warm-up ({args.warmup_steps} steps, attention over all keys, K = S = {args.seq_len})")
    train("dense warm-up", dense_step, task, args.warmup_steps, args.batch, args.log_every)

    sparse = Model(task.vocab, task.classes, args.dim, args.seq_len, topk=args.topk)
    copy_parameters(dense, sparse)
    sparse_step = TrainStep(Loss(sparse, args.queries, args.topk), args.lr)
    print(f"stage 2: sparse training ({args.sparse_steps} steps, top-{args.topk} of up to {args.seq_len} keys)")
    acc_sparse, recall = train("sparse", sparse_step, task, args.sparse_steps, args.batch, args.log_every)
    print(f"baseline: the same model kept dense for {args.sparse_steps} more steps")
    acc_dense, _ = train("dense", dense_step, task, args.sparse_steps, args.batch, args.log_every)
    print(f"final accuracy (last {args.log_every} steps, unseen batches): sparse top-{args.topk} {acc_sparse:.3f}, "
          f"dense {acc_dense:.3f} (chance {1 / task.classes:.3f}); top-{args.topk} recall {recall:.3f}; "
          f"{time.time() - start:.0f} s in all")


if __name__ == "__main__":
    main()
