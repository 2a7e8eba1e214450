"""PyTorch CPU eager autograd of the attention benchmarks' math in bfloat16: the baseline a PyTorch
user would write (gather the selected keys, matmul, masked softmax, matmul; autograd backward).

Runs inside a benchmark's own worker subprocess (never with MindSpore imported: both ship a
oneDNN) on 2 threads. Rows are processed in chunks with one backward per chunk, so the gathered
``[rows, K, D]`` keys of a chunk stay near ``CHUNK_BYTES``: without chunking the gather alone
needs ``S*K*576*2`` bytes (4.8 GB at S=K=2048) plus its gradient. torch is not a dependency.
"""
from __future__ import annotations

import math
import resource
from collections.abc import Callable

import numpy as np
from common import wall_median

CHUNK_BYTES = 1 << 30
WARMUP_ROWS = 32


def _chunk(rows: int, k: int, width: int) -> int:
    return max(1, min(rows, CHUNK_BYTES // (k * width * 2)))


def _timed(step: Callable[..., None], chunk: int, reps: int) -> dict:
    """Median of ``reps`` full steps after a warm-up step over the first ``WARMUP_ROWS`` rows only
    (torch's first call pays seconds of one-off set-up; a full warm-up call would double a
    minutes-long run)."""
    import torch
    step(min(chunk, WARMUP_ROWS))
    return {"time": wall_median(step, warmup=0, repeat=reps), "chunk_rows": chunk,
            "threads": torch.get_num_threads(), "torch": torch.__version__,
            "rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def _sparse_attention(q: np.ndarray, kv: np.ndarray, q_rope: np.ndarray, k_rope: np.ndarray, idx: np.ndarray,
                      d_out: np.ndarray, scale: float) -> tuple[list, Callable[..., None], int]:
    import torch
    torch.set_num_threads(2)
    bf = torch.bfloat16
    leaves = [torch.tensor(x).to(bf).requires_grad_() for x in (q, kv, q_rope, k_rope)]
    tq, tkv, tqr, tkr = leaves
    idx_t = torch.tensor(idx, dtype=torch.long)
    valid, safe = idx_t >= 0, idx_t.clamp(min=0)
    dout = torch.tensor(d_out).to(bf)
    chunk = _chunk(q.shape[0], idx.shape[1], q.shape[-1] + q_rope.shape[-1])

    def step(rows_to: int | None = None) -> None:
        for t in leaves:
            t.grad = None
        end = rows_to or q.shape[0]
        for r in range(0, end, chunk):
            rows = slice(r, min(r + chunk, end))
            keys = torch.cat([tkv, tkr], -1)[safe[rows]]                        # [c, K, D+Dr]
            s = torch.matmul(torch.cat([tq[rows], tqr[rows]], -1), keys.transpose(1, 2)) * scale
            p = torch.softmax(s.masked_fill(~valid[rows, None, :], -math.inf), dim=-1)
            out = torch.matmul(p, tkv[safe[rows]])                              # [c, N1, D]
            out.backward(dout[rows])

    return leaves, step, chunk


def sparse_attention(q: np.ndarray, kv: np.ndarray, q_rope: np.ndarray, k_rope: np.ndarray, idx: np.ndarray,
                     d_out: np.ndarray, scale: float, reps: int) -> dict:
    """Median seconds of forward + backward (grads of q, kv, q_rope, k_rope) in bf16.

    q [T, N1, D], kv [T2, D] (key is value), q_rope [T, N1, Dr], k_rope [T2, Dr], idx [T, K] int
    (-1 = unused), d_out [T, N1, D]; float32 arrays, cast to bf16 here."""
    _, step, chunk = _sparse_attention(q, kv, q_rope, k_rope, idx, d_out, scale)
    return _timed(step, chunk, reps)


def _indexer_loss(x: dict[str, np.ndarray], scale: float) -> tuple[list, Callable[..., None], int]:
    import torch
    torch.set_num_threads(2)
    bf = torch.bfloat16
    t = lambda name: torch.tensor(x[name][0]).to(bf)  # noqa: E731
    qf = torch.cat([t("query"), t("query_rope")], -1)                          # [S1, N1, D+Dr]
    kf = torch.cat([t("key")[:, 0], t("key_rope")[:, 0]], -1)                  # [S2, D+Dr]
    leaves = [t("query_index").requires_grad_(), t("key_index")[:, 0].requires_grad_(), t("weights").requires_grad_()]
    qi, ki, w = leaves
    idx_t = torch.tensor(x["sparse_indices"][0, :, 0], dtype=torch.long)
    valid, safe = idx_t >= 0, idx_t.clamp(min=0)
    mx, sm = torch.tensor(x["softmax_max"][0, 0]), torch.tensor(x["softmax_sum"][0, 0])   # [S1, N1] float32
    chunk = _chunk(qf.shape[0], idx_t.shape[1], qf.shape[-1])
    log_floor = math.log(1e-8)

    def step(rows_to: int | None = None) -> None:
        for leaf in leaves:
            leaf.grad = None
        end = rows_to or qf.shape[0]
        for r in range(0, end, chunk):
            rows = slice(r, min(r + chunk, end))
            ok = valid[rows]
            with torch.no_grad():
                s = torch.matmul(qf[rows], kf[safe[rows]].transpose(1, 2)).float() * scale   # [c, N1, K]
                p = (torch.exp(s - mx[rows, :, None]) / sm[rows, :, None]).mean(1).masked_fill(~ok, 0.0)
            sx = torch.matmul(qi[rows], ki[safe[rows]].transpose(1, 2))                       # [c, Nidx, K]
            score = (w[rows, :, None] * torch.relu(sx)).sum(1).float().masked_fill(~ok, -math.inf)
            log_y = torch.log_softmax(score, -1).clamp(min=log_floor)
            kl = p * (torch.log(p.clamp(min=1e-8)) - log_y)
            kl.masked_fill(~ok, 0.0).sum().backward()

    return leaves, step, chunk


def indexer_loss(x: dict[str, np.ndarray], scale: float, reps: int) -> dict:
    """Median seconds of the indexer KL loss forward + backward (grads of query_index, key_index,
    weights) in bf16: teacher p from the main attention's scores and saved statistics (no grad),
    index scores, ReLU, weights, softmax, KL. ``x`` holds the BSND arrays of
    lightning_indexer.make_inputs (B = 1)."""
    _, step, chunk = _indexer_loss(x, scale)
    return _timed(step, chunk, reps)


def _indexer_values(x: dict[str, np.ndarray]) -> tuple[list, Callable[..., None], int]:
    import torch
    torch.set_num_threads(2)
    bf = torch.bfloat16
    leaves = [torch.tensor(x["query_index"][0]).to(bf).requires_grad_(),                # [S1, Nidx, Didx]
              torch.tensor(x["key_index"][0, :, 0]).to(bf).requires_grad_(),            # [S2, Didx]
              torch.tensor(x["weights"][0]).to(bf).requires_grad_()]                    # [S1, Nidx]
    qi, ki, w = leaves
    idx_t = torch.tensor(x["sparse_indices"][0, :, 0], dtype=torch.long)                # [S1, K]
    valid, safe = idx_t >= 0, idx_t.clamp(min=0)
    d_values = torch.tensor(x["d_values"][0, :, 0])                                     # [S1, K] float32
    chunk = _chunk(qi.shape[0], idx_t.shape[1], qi.shape[-1])

    def step(rows_to: int | None = None) -> None:
        for leaf in leaves:
            leaf.grad = None
        end = rows_to or qi.shape[0]
        for r in range(0, end, chunk):
            rows = slice(r, min(r + chunk, end))
            sx = torch.matmul(qi[rows], ki[safe[rows]].transpose(1, 2))                  # [c, Nidx, K]
            values = (w[rows, :, None] * torch.relu(sx)).sum(1).float()                  # [c, K]
            values.backward(d_values[rows].masked_fill(~valid[rows], 0.0))

    return leaves, step, chunk


def indexer_values(x: dict[str, np.ndarray], reps: int) -> dict:
    """Median seconds of the indexer's selected scores forward + backward (grads of query_index,
    key_index, weights for the incoming d_values) in bf16: gather the selected key_index rows,
    sum over heads of weights * ReLU(query_index . key_index). ``x`` holds the BSND arrays of
    lightning_indexer_grad.make_inputs (B = 1)."""
    _, step, chunk = _indexer_values(x)
    return _timed(step, chunk, reps)


def gradients(which: str, *args: object) -> list[np.ndarray]:
    """One step of ``which`` ("sparse_attention", "indexer_loss" or "indexer_values", arguments as
    those functions' without ``reps``): the leaves' gradients as float32 arrays, so a test can check
    the baseline computes the benchmarked math."""
    leaves, step, _ = {"sparse_attention": _sparse_attention, "indexer_loss": _indexer_loss,
                       "indexer_values": _indexer_values}[which](*args)
    step()
    return [leaf.grad.float().numpy() for leaf in leaves]
