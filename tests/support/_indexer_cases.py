"""Random cases for the lightning-indexer tests: quantized float64 inputs, sparse indices with -1
slots anywhere, and teacher statistics from the float64 reference of the main attention over
the same selected keys (float32, as a forward kernel would hand them over)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from _util import quantize

from ms_grad_ops import reference as ref
from ms_grad_ops.reference.lightning_indexer import _prepare, _visible


@dataclass
class Case:
    layout: str
    sparse_mode: int
    scale: float
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    lens_q: list[int] | None = None
    lens_k: list[int] | None = None
    rope: bool = True

    def ref_args(self) -> tuple:
        a = self.arrays
        return (a["query"], a["key"], a["query_index"], a["key_index"], a["weights"], a["sparse_indices"],
                a["softmax_max"], a["softmax_sum"], a.get("query_rope"), a.get("key_rope"), self.lens_q, self.lens_k)

    def ref_kwargs(self) -> dict:
        return {"scale_value": self.scale, "layout": self.layout, "sparse_mode": self.sparse_mode}


def _row_indices(rng: np.random.Generator, s2: int, k: int, drop: float) -> np.ndarray:
    row = np.full(k, -1, np.int32)
    pick = rng.permutation(s2)[:k]
    row[:pick.size] = pick
    row[rng.random(k) < drop] = -1
    return rng.permutation(row)


def make_case(rng: np.random.Generator, dtype: str, wdtype: str, layout: str = "TND", sparse_mode: int = 3, *,
              lens_q: list[int] | None = None, lens_k: list[int] | None = None, b: int = 2, s1: int = 7,
              s2: int = 9, n1: int = 4, d: int = 24, dr: int = 8, nidx: int = 4, didx: int = 16, k: int = 8,
              drop: float = 0.2) -> Case:
    """lens_* are per-sequence lengths (TND); they are passed on cumulative."""
    if layout == "TND":
        lens_q = lens_q or [5, 0, 9]
        lens_k = lens_k or [7, 3, 12]
        tok_q, tok_k = [sum(lens_q)], [sum(lens_k)]
        seq = list(zip(lens_q, lens_k))
    else:
        tok_q, tok_k = [b, s1], [b, s2]
        seq = [(s1, s2)] * b
    q = lambda *s: quantize(rng.standard_normal(s), dtype)  # noqa: E731
    case = Case(layout, sparse_mode, 1.0 / np.sqrt(d + dr), rope=dr > 0)
    a = case.arrays
    a["query"], a["key"] = q(*tok_q, n1, d), q(*tok_k, 1, d)
    if dr:
        a["query_rope"], a["key_rope"] = q(*tok_q, n1, dr), q(*tok_k, 1, dr)
    a["query_index"], a["key_index"] = 0.5 * q(*tok_q, nidx, didx), q(*tok_k, 1, didx)
    a["query_index"] = quantize(a["query_index"], dtype)
    a["weights"] = quantize(rng.standard_normal((*tok_q, nidx)) / np.sqrt(nidx), wdtype)
    rows = [_row_indices(rng, s2_b, k, drop) for s1_b, s2_b in seq for _ in range(s1_b)]
    si = np.stack(rows) if rows else np.zeros((0, k), np.int32)
    a["sparse_indices"] = si.reshape(*tok_q, 1, k)
    if layout == "TND":
        case.lens_q, case.lens_k = list(np.cumsum(lens_q)), list(np.cumsum(lens_k))
    mx, sm = ref.attention_softmax_stats(a["query"], a["key"], a["sparse_indices"], a.get("query_rope"),
                                         a.get("key_rope"), case.lens_q, case.lens_k, scale_value=case.scale,
                                         layout=layout, sparse_mode=sparse_mode)
    a["softmax_max"] = mx.astype(np.float32).astype(np.float64)
    a["softmax_sum"] = sm.astype(np.float32).astype(np.float64)
    return case


def ms_args(case: Case, dtype: str, wdtype: str, lens_as_tensor: bool = False) -> list:
    """The 12 inputs of the grad op as MindSpore tensors (None for absent optional inputs)."""
    import mindspore as ms
    from _util import to_ms
    a = case.arrays
    out = [to_ms(a[n], dtype) for n in ("query", "key", "query_index", "key_index")]
    out += [to_ms(a["weights"], wdtype), ms.Tensor(a["sparse_indices"].astype(np.int32)),
            ms.Tensor(a["softmax_max"].astype(np.float32)), ms.Tensor(a["softmax_sum"].astype(np.float32))]
    out += [to_ms(a[n], dtype) if n in a else None for n in ("query_rope", "key_rope")]
    for lens in (case.lens_q, case.lens_k):
        out.append(ms.Tensor(np.asarray(lens, np.int64)) if lens is not None and lens_as_tensor else lens)
    return out


def row_weights(p: object, args: object) -> np.ndarray:
    """Per-token balance weights of the indexer grad tilings: 16 + min(visible keys, K), for a
    problem ``p`` (layout, lens_q, lens_k, attrs["sparse_mode"]) and its harness args (batch, s1, s2, k)."""
    spans = list(zip(np.diff([0, *p.lens_q]), np.diff([0, *p.lens_k]))) if p.layout == "TND" else \
        [(args.s1, args.s2)] * args.batch
    out = []
    for s1, s2 in spans:
        for i in range(s1):
            vis = max(0, min(s2, i + s2 - s1 + 1)) if p.attrs["sparse_mode"] == 3 else s2
            out.append(16 + min(vis, args.k))
    return np.array(out, np.int64)


def unreached(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """(query rows with no visible selected key ``[T1]``, key rows no query row selects visibly ``[T2]``),
    from the case's indices, lengths and mask alone (TND order): the rows whose gradients nothing
    reaches. A row whose gradient merely cancels (one visible key: y = p = 1) is reached."""
    a = case.arrays
    t1, rows = _prepare(case.layout, a["query_index"], a["key_index"], case.lens_q, case.lens_k, case.sparse_mode)
    si = a["sparse_indices"].reshape(t1, -1)
    t2 = a["key_index"].reshape(-1, a["key_index"].shape[-1]).shape[0]
    hit = np.zeros(t2, bool)
    no_key = np.ones(t1, bool)
    for t in range(t1):
        keys = _visible(rows, si, t)
        hit[keys] = True
        no_key[t] = keys.size == 0
    return no_key, ~hit
