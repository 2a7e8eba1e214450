"""One msrun worker of ``test_context_parallel.py`` (not a test module).

``msrun ... _cp_worker.py OUT_DIR -- <dsa_context_parallel.py arguments>``: first trains the demo
model with ``examples/dsa_context_parallel.py`` (GRAPH mode, its ``init()``), then, in PyNative,
runs ``ContextParallelDSAttention`` on every case of ``CASES`` twice with real collectives and
writes ``OUT_DIR/<case>_rank<r>.npz``: this rank's output rows, its indexer loss, its share of
every parameter gradient (for ``sum(out * d_out) + indexer_loss``), the initial parameters and
whether the two runs gave the same bits.
"""
from __future__ import annotations

import sys
from pathlib import Path

import mindspore as ms
import numpy as np
from _paths import EXAMPLES
from mindspore import Tensor
from mindspore.communication import get_group_size, get_rank

import ms_grad_ops as mgo
from ms_grad_ops.nn import ContextParallelPlan

sys.path.insert(0, str(EXAMPLES))
import dsa_context_parallel  # noqa: E402

CFG = {"dim": 20, "n_heads": 2, "q_lora_rank": 12, "kv_lora_rank": 10, "qk_nope_head_dim": 6,
       "qk_rope_head_dim": 4, "v_head_dim": 5, "index_n_heads": 3, "index_head_dim": 8, "index_topk": 3}
# TND: lengths 13, 3, 1, 22 - none a multiple of 2N = 4, two shorter than 4 (empty chunks, and a
# rank that holds none of the length-1 sequence). BSND: 2 x 8.
CASES = {"tnd": ("TND", [13, 16, 17, 39]), "bsnd": ("BSND", (2, 8))}


def case_data(layout: str, sizes: object) -> tuple[np.ndarray, np.ndarray]:
    """The global x and d_out of a case, float32 ``[T, dim]`` (BSND: ``[B * S, dim]``)."""
    rng = np.random.default_rng(7)
    t = sizes[-1] if layout == "TND" else sizes[0] * sizes[1]
    return (rng.standard_normal((t, CFG["dim"])).astype(np.float32),
            rng.standard_normal((t, CFG["dim"])).astype(np.float32))


def plan_of(layout: str, sizes: object, cp: int, rank: int) -> ContextParallelPlan:
    return ContextParallelPlan(sizes, cp, rank) if layout == "TND" else ContextParallelPlan.bsnd(*sizes, cp, rank)


def run_case(name: str, out_dir: Path) -> None:
    layout, sizes = CASES[name]
    rank, cp = get_rank(), get_group_size()
    ms.set_seed(1)
    attn = mgo.nn.DSAttention(**CFG, max_seq_len=32, layout=layout)
    layer = mgo.nn.ContextParallelDSAttention(attn, cp)
    params = layer.trainable_params()
    init = {p.name: p.asnumpy() for p in params}
    plan = plan_of(layout, sizes, cp, rank)
    x, d_out = case_data(layout, sizes)
    lead = (sizes[0], -1) if layout == "BSND" else (-1,)
    x_local = Tensor(plan.shard(x).reshape(lead + (CFG["dim"],)))
    d_local = Tensor(plan.shard(d_out).reshape(lead + (CFG["dim"],)))
    extra = [Tensor(a) for a in plan.inputs()]

    def objective(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        out, loss = layer(x, *extra)
        return (out * d_local).sum() + loss.sum(), out, loss

    runs = []
    for _ in range(2):
        (_, out, loss), grads = ms.value_and_grad(objective, None, params, has_aux=True)(x_local)
        runs.append([out.asnumpy(), loss.asnumpy()] + [g.asnumpy() for g in grads])
    same = all(np.array_equal(a, b) for a, b in zip(*runs))
    out, loss, *grads = runs[0]
    np.savez(out_dir / f"{name}_rank{rank}.npz", out=out, loss=loss, same_bits=np.array(same),
             **{f"grad:{p.name}": g for p, g in zip(params, grads)}, **{f"init:{k}": v for k, v in init.items()})


def main() -> None:
    out_dir = Path(sys.argv[1])
    sys.argv = ["dsa_context_parallel.py", *sys.argv[sys.argv.index("--") + 1:]]
    dsa_context_parallel.main()                   # GRAPH mode; calls init()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    for name in CASES:
        run_case(name, out_dir)
    print(f"[rank {get_rank()}] layer cases done", flush=True)


if __name__ == "__main__":
    main()
