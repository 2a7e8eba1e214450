"""Random cases of the dense indexer pair for the twin tests: make_case's cases with every visible
key selected (top-k = S), so that the sparse path's float64 reference is a second oracle the dense
ops must equal, plus the index statistics from the float64 dense reference (float32-rounded, as
dense_lightning_indexer_softmax_lse would hand them over)."""
from __future__ import annotations

import numpy as np
from _indexer_cases import Case, make_case

from ms_grad_ops import reference as ref


def dense_case(rng: np.random.Generator, dtype: str, wdtype: str, layout: str, **kw: object) -> Case:
    """A make_case case whose sparse_indices select every key (k = the longest key sequence), with
    softmax_max/sum of the main attention over all visible keys and the index statistics
    softmax_max_index / softmax_sum_index."""
    k = max(kw.get("lens_k") or [7, 3, 12]) if layout == "TND" else int(kw.get("s2", 9))
    case = make_case(rng, dtype, wdtype, layout, k=max(k, 1), drop=0.0, **kw)
    a = case.arrays
    mx, sm = ref.dense_lightning_indexer_softmax_lse(a["query_index"], a["key_index"], a["weights"], case.lens_q,
                                                     case.lens_k, layout=layout, sparse_mode=case.sparse_mode)
    a["softmax_max_index"] = mx.astype(np.float32).astype(np.float64)
    a["softmax_sum_index"] = sm.astype(np.float32).astype(np.float64)
    return case


def dense_ref_args(case: Case) -> tuple:
    """The dense grad's inputs in table order (reference call), from a dense_case."""
    a = case.arrays
    return (a["query"], a["key"], a["query_index"], a["key_index"], a["weights"], a["softmax_max"], a["softmax_sum"],
            a["softmax_max_index"], a["softmax_sum_index"], a.get("query_rope"), a.get("key_rope"), case.lens_q,
            case.lens_k)
