"""Main job: train a small model built on ``ms_grad_ops.nn.DSAttention`` in GRAPH mode on a
long-context task whose answer depends on a few distant tokens, following DeepSeek-V3.2's recipe.

Task (``Task``): each sequence of ``--seq-len`` tokens is noise except up to ``--needles``
marker tokens at random positions of its first half; marker i carries a value in
``[0, --values)``. Every one of the last ``--queries`` positions must name every marker's value
(or its absence), so it needs every marker present. The attention of a query row has to land on
the markers: with top-k sparse attention, the lightning indexer has to put them inside its top
``--topk`` keys, or the answer is lost.

Stages (DeepSeek-V3.2 paper, which continues training a dense checkpoint): (0) dense training of
the main model (attention over every visible key, K = S; the indexer untouched) - the stand-in for
the dense checkpoint; (1) indexer warm-up: the main model frozen, attention still dense, only the
indexer trains, on the KL divergence to the main attention summed over heads and L1-normalised,
through the dense pair (``DSAttention(dense_warmup=True)``: ``dense_lightning_indexer_softmax_lse`` and
``dense_lightning_indexer_grad_kl_loss``, no indexer top-k; stages 0 and 1 share that model);
(2) sparse training: attention over the indexer's top-k keys, the task loss trains the model and
the KL loss over the selected keys trains the indexer (its input is detached). Between stages the
model is saved to a safetensors file (the attention under DeepSeek's tensor names through
``deepseek_state_dict``) and the next stage's model is built from that file
(``load_deepseek_state_dict``). Baseline: the stage-1 model trained on with dense attention for as
many steps as stage 2. Recall = fraction of (query row, present marker) pairs whose marker is in the top-k.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import mindspore as ms
import numpy as np
import safetensors.numpy
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

    def __init__(self, vocab: int, classes: int, dim: int, seq_len: int, topk: int,
                 dense_warmup: bool | None = None) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.attn = mgo.nn.DSAttention(dim, n_heads=4, q_lora_rank=dim // 2, kv_lora_rank=dim // 2,
                                       qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, index_n_heads=4,
                                       index_head_dim=16, index_topk=topk, max_seq_len=seq_len,
                                       dense_warmup=dense_warmup)
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
    the model on unseen data. ``groups``: parameter lists with learning rates of their own
    (:meth:`set_learning_rates`; 0 freezes a group without compiling another graph)."""

    def __init__(self, loss: Loss, lr: float, data_parallel: bool = False, groups: list | None = None) -> None:
        super().__init__()
        self.loss = loss
        params = loss.trainable_params() if groups is None else [{"params": g, "lr": lr} for g in groups]
        self.optimizer = nn.Adam(params, learning_rate=lr)
        self.group_starts = np.cumsum([0] + [len(g) for g in groups or []])[:-1].tolist()
        self.grad = ms.value_and_grad(self._total, None, self.optimizer.parameters, has_aux=True)
        # Data parallel: every rank applies the mean of all ranks' gradients (AllReduce).
        self.reducer = nn.DistributedGradReducer(self.optimizer.parameters, mean=True) if data_parallel else None

    def set_learning_rates(self, *lrs: float) -> None:
        """One learning rate per group given to the constructor (the optimizer holds one learning-rate
        Parameter per group, listed once for each of the group's parameters)."""
        for start, lr in zip(self.group_starts, lrs):
            param = self.optimizer.learning_rate[start]
            param.set_data(Tensor(lr, param.dtype))

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
          ) -> dict[str, float]:
    """Runs ``steps`` steps, printing means over each window of ``log_every``; returns the last
    window's means (task loss, indexer KL, recall, accuracy)."""
    start, window, last = time.time(), [], {}
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
            last, window = {"loss": loss_m, "kl": kl_m, "recall": recall, "accuracy": acc}, []
    return last


ATTN = "layers.0.attn."     # the attention's tensors, under DeepSeek's names
REST = "model."             # the other parameters, under their MindSpore names


def _rest(model: Model) -> dict:
    """The parameters outside the attention by their names inside ``model`` (``p.name`` changes
    once a Cell wraps the model)."""
    return {name: p for name, p in model.parameters_and_names() if not name.startswith("attn.")}


def save_checkpoint(model: Model, path: str) -> None:
    """One safetensors file: the attention through ``deepseek_state_dict``, the rest as they are."""
    rest = {REST + name: p.asnumpy() for name, p in _rest(model).items()}
    safetensors.numpy.save_file({**model.attn.deepseek_state_dict(ATTN), **rest}, path)


def load_checkpoint(model: Model, path: str) -> None:
    model.attn.load_deepseek_state_dict(path, prefix=ATTN)
    saved = {k[len(REST):]: v for k, v in safetensors.numpy.load_file(path).items() if k.startswith(REST)}
    params = _rest(model)
    if sorted(saved) != sorted(params):
        raise ValueError(f"{path}: parameters {sorted(saved)} do not match the model's {sorted(params)}")
    for name, p in params.items():
        p.set_data(Tensor(saved[name]))


def same_parameters(a: nn.Cell, b: nn.Cell) -> bool:
    pa, pb = dict(a.parameters_and_names()), dict(b.parameters_and_names())
    return sorted(pa) == sorted(pb) and all(np.array_equal(pa[k].asnumpy(), pb[k].asnumpy()) for k in pa)


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
    parser.add_argument("--dense-steps", type=int, default=60, help="stage 0: dense training")
    parser.add_argument("--warmup-steps", type=int, default=40, help="stage 1: indexer warm-up, model frozen")
    parser.add_argument("--sparse-steps", type=int, default=40, help="stage 2 (and the dense baseline)")
    parser.add_argument("--log-every", type=int, default=20)
    parser.add_argument("--checkpoint", default=None, help="checkpoint file (default: a temporary one)")
    args = parser.parse_args()
    # One temporary folder for what the run writes (the default checkpoint; GRAPH-mode failure files,
    # rank_0/, go to the working directory): removed when the run succeeds, kept to look at when it fails.
    folder, cwd = tempfile.mkdtemp(prefix="dsa_demo_"), os.getcwd()
    os.chdir(folder)
    try:
        run_stages(args, args.checkpoint or os.path.join(folder, "dsa_demo.safetensors"))
    except BaseException:
        print(f"the run failed; its temporary folder {folder} is kept")
        raise
    finally:
        os.chdir(cwd)
    shutil.rmtree(folder)


def run_stages(args: argparse.Namespace, ckpt: str) -> None:
    """The three stages and the dense baseline, the checkpoint in the file ``ckpt``."""
    start = time.time()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    task = make_task(args)

    def run(name: str, step: TrainStep, steps: int) -> dict[str, float]:
        return train(name, step, task, steps, args.batch, args.log_every)

    # One dense model and one compiled step serve stages 0 and 1 and the baseline: the main model
    # and the indexer are two optimizer groups, a learning rate of 0 freezes one.
    dense = Model(task.vocab, task.classes, args.dim, args.seq_len, topk=args.seq_len, dense_warmup=True)
    idx_cells = (dense.attn.wq_idx, dense.attn.wk_idx, dense.attn.k_norm, dense.attn.weights_proj)
    indexer = {id(p) for cell in idx_cells for p in cell.trainable_params()}
    main_params = [p for p in dense.trainable_params() if id(p) not in indexer]
    dense_step = TrainStep(Loss(dense, args.queries, args.topk), args.lr,
                           groups=[main_params, [p for p in dense.trainable_params() if id(p) in indexer]])

    print(f"stage 0: dense training ({args.dense_steps} steps, attention over all keys, K = S = {args.seq_len}; "
          "indexer frozen)")
    dense_step.set_learning_rates(args.lr, 0.0)
    results = {"stage 0 dense": run("stage 0 dense", dense_step, args.dense_steps)}
    before = {k: v.copy() for k, v in dense.attn.deepseek_state_dict().items()}
    save_checkpoint(dense, ckpt)
    load_checkpoint(dense, ckpt)
    assert all(np.array_equal(before[k], v) for k, v in dense.attn.deepseek_state_dict().items())
    print(f"checkpoint {ckpt}: saved and reloaded bitwise (attention under DeepSeek's tensor names)")

    print(f"stage 1: indexer warm-up ({args.warmup_steps} steps, main model frozen, dense KL target, on the dense "
          "pair dense_lightning_indexer_softmax_lse + dense_lightning_indexer_grad_kl_loss)")
    dense_step.set_learning_rates(0.0, args.lr)
    results["stage 1 warm-up"] = run("stage 1 warm-up", dense_step, args.warmup_steps)
    save_checkpoint(dense, ckpt)

    sparse = Model(task.vocab, task.classes, args.dim, args.seq_len, topk=args.topk)
    load_checkpoint(sparse, ckpt)
    assert same_parameters(dense, sparse), "the checkpoint did not reload bitwise"
    print(f"checkpoint {ckpt}: saved and loaded bitwise into the sparse model (top-{args.topk})")
    print(f"stage 2: sparse training ({args.sparse_steps} steps, top-{args.topk} of up to {args.seq_len} keys, "
          "KL over the selected keys)")
    results["stage 2 sparse"] = run("stage 2 sparse", TrainStep(Loss(sparse, args.queries, args.topk), args.lr),
                                    args.sparse_steps)

    print(f"baseline: the stage-1 model trained on with dense attention for {args.sparse_steps} steps")
    dense_step.set_learning_rates(args.lr, args.lr)
    results["dense baseline"] = run("dense baseline", dense_step, args.sparse_steps)
    print(f"summary (means over the last {args.log_every} steps, unseen batches; chance accuracy "
          f"{1 / task.classes:.3f}; recall of the top-{args.topk}):")
    for name, r in results.items():
        print(f"  {name:16s} task loss {r['loss']:.4f}  indexer KL {r['kl']:.4f}  recall {r['recall']:.3f}  "
              f"accuracy {r['accuracy']:.3f}")
    print(f"final accuracy: sparse top-{args.topk} {results['stage 2 sparse']['accuracy']:.3f}, dense "
          f"{results['dense baseline']['accuracy']:.3f} after as many steps; top-{args.topk} recall "
          f"{results['stage 2 sparse']['recall']:.3f}; {time.time() - start:.0f} s in all")


if __name__ == "__main__":
    main()
