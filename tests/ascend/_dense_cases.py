"""Random cases of the dense indexer pair for the twin tests, and their float64 oracle: the sparse
path at top-k = S (every visible key selected), which the dense ops must equal. The index
statistics are those of the reference lightning_indexer's scores over each full visible row."""
from __future__ import annotations

import numpy as np
from _indexer_cases import Case, make_case

from ms_grad_ops import reference as ref


def index_stats(query_index: np.ndarray, key_index: np.ndarray, weights: np.ndarray, lens_q: list[int] | None,
                lens_k: list[int] | None, *, layout: str, sparse_mode: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """float64 (max, sum of exp) of every row's index scores over its visible keys, 0 / 0 for a
    row without one: [B, 1, S1] (BSND) or [1, T1] (TND)."""
    keys = key_index.shape[0] if layout == "TND" else key_index.shape[1]
    _, val = ref.lightning_indexer(query_index, key_index, weights, lens_q, lens_k, sparse_count=max(keys, 1),
                                   layout=layout, sparse_mode=sparse_mode)
    val = val.reshape(-1, val.shape[-1])
    seen = np.isfinite(val)
    mx = np.where(seen.any(axis=1), np.where(seen, val, -np.inf).max(axis=1, initial=-np.inf), 0.0)
    sm = np.where(seen, np.exp(np.where(seen, val, 0.0) - mx[:, None]), 0.0).sum(axis=1)
    shape = (query_index.shape[0], 1, query_index.shape[1]) if layout == "BSND" else (1, query_index.shape[0])
    return mx.reshape(shape), sm.reshape(shape)


def dense_case(rng: np.random.Generator, dtype: str, wdtype: str, layout: str, **kw: object) -> Case:
    """A make_case case whose sparse_indices select every key (k = the longest key sequence), with
    softmax_max/sum of the main attention over all visible keys and the float32 index statistics
    softmax_max_index / softmax_sum_index."""
    if layout == "TND":
        k = max(kw.get("lens_k") or [7, 3, 12])
    else:
        k = int(kw.get("s2", 9))
    case = make_case(rng, dtype, wdtype, layout, k=max(k, 1), drop=0.0, **kw)
    a = case.arrays
    mx, sm = index_stats(a["query_index"], a["key_index"], a["weights"], case.lens_q, case.lens_k, layout=layout,
                         sparse_mode=case.sparse_mode)
    a["softmax_max_index"] = mx.astype(np.float32).astype(np.float64)
    a["softmax_sum_index"] = sm.astype(np.float32).astype(np.float64)
    return case
