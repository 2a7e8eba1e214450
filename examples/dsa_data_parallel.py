"""Data-parallel training of the DSA demo model over processes, on MindSpore's own collectives.

Launched by ``msrun`` (see ``scripts/run_data_parallel.sh``), every worker builds the same model
from the same seed, takes its share of each global batch (``--batch`` rows split evenly over the
ranks) and applies the mean of all ranks' gradients (``nn.DistributedGradReducer``: AllReduce,
MCCL on CPU), so all ranks hold the same parameters after every step. Run without ``msrun`` it
is one process training on the whole global batch: the same computation, for comparison.
``--save PREFIX`` writes every trainable parameter to ``PREFIX<rank>.npz`` at the end (and the
initial ones to ``PREFIX<rank>.init.npz``).
"""
from __future__ import annotations

import argparse
import os
import time

import mindspore as ms
import numpy as np
from dsa_demo import Loss, Model, TrainStep, make_task, task_arguments
from mindspore import Tensor
from mindspore.communication import get_group_size, get_rank, init


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    task_arguments(parser)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--save", default=None, help="write the final parameters to <SAVE><rank>.npz")
    args = parser.parse_args()

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    distributed = "MS_ROLE" in os.environ          # set by msrun for every worker
    rank, ranks = 0, 1
    if distributed:
        init()
        rank, ranks = get_rank(), get_group_size()
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    if args.batch % ranks:
        raise SystemExit(f"--batch {args.batch} must be a multiple of the {ranks} ranks")
    share = args.batch // ranks
    ms.set_seed(0)                                   # same initial parameters on every rank
    model = Model(make_task(args).vocab, make_task(args).classes, args.dim, args.seq_len, topk=args.topk)
    step = TrainStep(Loss(model, args.queries, args.topk), args.lr, data_parallel=distributed)
    task = make_task(args)                           # same global batches on every rank

    if args.save:
        save(f"{args.save}{rank}.init.npz", model)
    start = time.time()
    for i in range(args.steps):
        tokens, labels, _ = task.batch(args.batch)
        mine = slice(rank * share, (rank + 1) * share)
        loss, kl, pred, _ = step(Tensor(tokens[mine]), Tensor(labels[mine]))
        if (i + 1) % args.log_every == 0 or i == args.steps - 1:
            acc = float((pred.asnumpy() == labels[mine, None]).mean())
            print(f"[rank {rank}/{ranks}] step {i + 1:4d}  task loss {float(loss.asnumpy()):.4f}  indexer KL "
                  f"{float(kl.asnumpy()):.4f}  accuracy {acc:.3f}  ({time.time() - start:.0f} s)", flush=True)
    if args.save:
        save(f"{args.save}{rank}.npz", model)


def save(path: str, model: Model) -> None:
    np.savez(path, **{p.name: p.asnumpy() for p in model.trainable_params()})


if __name__ == "__main__":
    main()
