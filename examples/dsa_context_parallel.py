"""Context-parallel training of the DSA demo model over processes, on MindSpore's own collectives.

Launched by ``msrun`` with ``--dp D --cp C`` (D x C workers; see ``scripts/run_context_parallel.sh``),
every worker builds the same model from the same seed. World rank ``w`` is data-parallel replica
``w // C`` and context-parallel rank ``w % C``: replica ``d`` takes rows ``[d * B/D, (d + 1) * B/D)``
of each global batch, and inside it every sequence is cut into ``2C`` chunks, rank ``c`` holding
chunks ``c`` and ``2C-1-c`` (``ContextParallelPlan``). ``ContextParallelDSAttention`` all-gathers
the key side over the C ranks of a replica (with D > 1 over the world, each replica keeping its
block: MCCL on CPU gathers over the world group only). The task loss (cross-entropy at the last
``--queries`` positions of every sequence) and the indexer KL loss are sums over tokens divided by
the global counts, so the sum over all ranks is the one-process loss; every rank applies the sum of
all ranks' gradients (AllReduce over the world). Each rank prints the global loss per step
(AllReduce) and with ``--save DIR`` writes its parameters to ``DIR/rank_<w>.npz`` (names as ``trainable_params()``).

``--layout TND`` packs the sequences of a batch with uneven lengths (sequence b drops
``(3 b) % 5`` noise tokens of its second half, so most lengths are no multiple of 2C). Run
without ``msrun`` it is one process on the whole batch with plain ``DSAttention``: the same
computation, for comparison.
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import mindspore as ms
import numpy as np
from dsa_demo import make_task, task_arguments
from mindspore import Tensor, nn
from mindspore import ops as msops
from mindspore.communication import get_group_size, get_rank, init

import ms_grad_ops as mgo
from ms_grad_ops.nn import ContextParallelPlan


class Model(nn.Cell):
    """Embedding -> DSAttention (residual, context parallel when ``cp > 1``) -> normed MLP -> logits
    at every token; the same parameter names either way."""

    def __init__(self, vocab: int, classes: int, dim: int, seq_len: int, topk: int, layout: str, cp: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        attn = mgo.nn.DSAttention(dim, n_heads=4, q_lora_rank=dim // 2, kv_lora_rank=dim // 2,
                                  qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, index_n_heads=4,
                                  index_head_dim=16, index_topk=topk, max_seq_len=seq_len, layout=layout)
        self.cp = cp
        self.attn = mgo.nn.ContextParallelDSAttention(attn, cp) if cp > 1 else attn
        self.norm = nn.LayerNorm((dim,))
        self.mlp = nn.SequentialCell(nn.Dense(dim, 4 * dim), nn.GELU(), nn.Dense(4 * dim, classes))

    def construct(self, tokens: Tensor, extra: tuple) -> tuple[Tensor, Tensor]:
        h = self.embed(tokens)
        a, indexer_loss = self.attn(h, *extra)
        return self.mlp(self.norm(h + a)), indexer_loss


class Loss(nn.Cell):
    """``(task, kl)``: cross-entropy summed over tokens with per-token weights (1 / (sequences x
    queries) at the answer positions, 0 elsewhere, padding included) and the indexer's KL loss
    divided by the global token count."""

    def __init__(self, model: Model, total_tokens: int) -> None:
        super().__init__()
        self.model, self.total_tokens = model, total_tokens
        self.ce = nn.CrossEntropyLoss(reduction="none")

    def construct(self, tokens: Tensor, labels: Tensor, weights: Tensor, extra: tuple) -> tuple[Tensor, Tensor]:
        logits, kl = self.model(tokens, extra)
        logits = logits.reshape(-1, logits.shape[-1])
        task = (self.ce(logits, labels.reshape(-1)) * weights.reshape(-1)).sum()
        return task, kl.sum() / self.total_tokens


class TrainStep(nn.Cell):
    """One optimizer step on ``task + kl`` with the gradients summed over all ranks (every rank's
    losses are its share of the global sums, data and context parallel alike); returns the global
    ``(task, kl)`` before the update."""

    def __init__(self, loss: Loss, lr: float, world: int, optimizer: str = "adam") -> None:
        super().__init__()
        self.loss = loss
        params = loss.trainable_params()
        self.optimizer = nn.Adam(params, learning_rate=lr) if optimizer == "adam" else \
            nn.Momentum(params, learning_rate=lr, momentum=0.9)
        self.grad = ms.value_and_grad(self._total, None, self.optimizer.parameters, has_aux=True)
        self.reducer = nn.DistributedGradReducer(self.optimizer.parameters, mean=False) if world > 1 else None
        self.all_reduce = msops.AllReduce() if world > 1 else None

    def _total(self, tokens: Tensor, labels: Tensor, weights: Tensor, extra: tuple) -> tuple[Tensor, ...]:
        task, kl = self.loss(tokens, labels, weights, extra)
        return task + kl, task, kl

    def construct(self, tokens: Tensor, labels: Tensor, weights: Tensor, extra: tuple) -> tuple[Tensor, Tensor]:
        (_, task, kl), grads = self.grad(tokens, labels, weights, extra)
        if self.reducer is not None:
            grads = self.reducer(grads)
            both = self.all_reduce(msops.stack((task, kl)))
            task, kl = both[0], both[1]
        self.optimizer(grads)
        return task, kl


def pack(tokens: np.ndarray, queries: int, layout: str, first: int = 0) -> tuple[np.ndarray, list[int]]:
    """The sequences of a batch ``[B, S]`` (rows ``first, first + 1, ...`` of the global batch) as
    packed tokens and their cumulative lengths: BSND keeps every row; TND drops ``(3 b) % 5``
    tokens of global row b just after its first half (noise: the markers sit in the first half,
    the answers at the end)."""
    b, s = tokens.shape
    if layout == "BSND":
        return tokens.reshape(-1), list(np.arange(1, b + 1) * s)
    rows = [np.delete(row, np.arange(s // 2, s // 2 + (3 * i) % 5)) for i, row in enumerate(tokens, first)]
    if s // 2 + 4 > s - queries:
        raise SystemExit(f"--layout TND needs --seq-len >= 2 * (--queries + 4), got {s} and {queries}")
    return np.concatenate(rows), list(np.cumsum([len(r) for r in rows]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    task_arguments(parser)
    parser.add_argument("--cp", type=int, default=1, help="context-parallel ranks per replica")
    parser.add_argument("--dp", type=int, default=None, help="data-parallel replicas (default: workers / cp)")
    parser.add_argument("--layout", choices=("BSND", "TND"), default="BSND")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--log-every", type=int, default=1)
    parser.add_argument("--save", default=None, help="write the final parameters to DIR/rank_<rank>.npz")
    parser.add_argument("--optimizer", choices=("adam", "momentum"), default="adam",
                        help="adam (the demo's) or SGD with momentum 0.9")
    args = parser.parse_args()

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    world, rank = 1, 0
    if "MS_ROLE" in os.environ:                          # set by msrun for every worker
        init()
        world, rank = get_group_size(), get_rank()
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=False)
    cp = args.cp if world > 1 else 1                     # without msrun: one process, whole sequences
    dp = args.dp or world // cp
    if dp * cp != world or args.batch % dp:
        raise SystemExit(f"{world} workers != --dp {dp} x --cp {cp}, or --batch {args.batch} not a multiple of dp")
    replica, cp_rank = divmod(rank, cp)
    share = args.batch // dp
    task = make_task(args)                               # same global batches on every rank
    _, cum = pack(np.zeros((share, args.seq_len), np.int32), args.queries, args.layout, replica * share)
    total = int(pack(np.zeros((args.batch, args.seq_len), np.int32), args.queries, args.layout)[1][-1])
    ms.set_seed(0)                                       # same initial parameters on every rank
    model = Model(task.vocab, task.classes, args.dim, args.seq_len, args.topk, args.layout, cp)
    step = TrainStep(Loss(model, total), args.lr, world, args.optimizer)
    # Every rank of the world sends the same token count to the gather (see GatherTokens): the
    # largest share of any replica.
    most = max(ContextParallelPlan(pack(np.zeros((share, args.seq_len), np.int32), args.queries, args.layout,
                                        d * share)[1], cp, 0).local_tokens for d in range(dp))
    plan = ContextParallelPlan(cum, cp, cp_rank, pad_to=most)
    if cp > 1:
        extra = tuple(Tensor(a) for a in plan.inputs())
    else:
        extra = (Tensor(np.array(cum, np.int32)),) if args.layout == "TND" else ()
    print(f"[rank {rank}/{world}] replica {replica}/{dp}, context-parallel rank {cp_rank}/{cp}"
          f", {plan.local_tokens} of {cum[-1]} tokens "
          f"({args.layout})", flush=True)

    start = time.time()
    for i in range(args.steps):
        tokens, labels, _ = task.batch(args.batch)
        flat, cum_i = pack(tokens[replica * share:(replica + 1) * share], args.queries, args.layout,
                           replica * share)
        assert cum_i == cum, "every batch packs to the same lengths"
        seq = np.repeat(np.arange(share), np.diff([0, *cum]))
        pos = np.arange(cum[-1]) - np.array([0, *cum])[seq]
        answer = pos >= np.array(cum)[seq] - np.array([0, *cum])[seq] - args.queries
        label = labels[replica * share:(replica + 1) * share][seq].astype(np.int32)
        weight = (answer / (args.batch * args.queries)).astype(np.float32)
        local = [plan.shard(a) for a in (flat, label, weight)] if cp > 1 else [flat, label, weight]
        if args.layout == "BSND":
            local = [a.reshape(share, -1) for a in local]
        task_loss, kl = step(*(Tensor(a) for a in local), extra)
        if (i + 1) % args.log_every == 0 or i == args.steps - 1:
            print(f"[rank {rank}/{world}] step {i + 1:4d}  global task loss {float(task_loss.asnumpy()):.9f}  "
                  f"indexer KL {float(kl.asnumpy()):.9f}  ({time.time() - start:.0f} s)", flush=True)
    if args.save:
        Path(args.save).mkdir(parents=True, exist_ok=True)
        np.savez(Path(args.save) / f"rank_{rank}.npz", **{p.name: p.asnumpy() for p in model.trainable_params()})


if __name__ == "__main__":
    main()
