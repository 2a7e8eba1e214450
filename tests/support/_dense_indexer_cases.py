"""Random cases for the dense warm-up pair (dense_lightning_indexer_softmax_lse / _grad_kl_loss): quantized
float64 inputs, main-attention statistics over every visible key from the float64 reference (float32, as a
forward kernel hands them over) and the indexer statistics from the reference softmax_lse."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from _util import quantize

from ms_grad_ops import reference as ref

GRAD_INPUTS = ("query", "key", "query_index", "key_index", "weights", "softmax_max", "softmax_sum",
               "softmax_max_index", "softmax_sum_index", "query_rope", "key_rope")
STATS = ("softmax_max", "softmax_sum", "softmax_max_index", "softmax_sum_index")


@dataclass
class DenseCase:
    layout: str
    sparse_mode: int
    scale: float
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    lens_q: list[int] | None = None
    lens_k: list[int] | None = None

    def lens(self) -> tuple:
        return self.lens_q, self.lens_k

    def attrs(self) -> dict:
        return {"layout": self.layout, "sparse_mode": self.sparse_mode}

    def grad_attrs(self) -> dict:
        return {"scale_value": self.scale, **self.attrs()}

    def ref_grad_args(self) -> tuple:
        return (*(self.arrays.get(n) for n in GRAD_INPUTS), *self.lens())

    def ref_lse_args(self) -> tuple:
        a = self.arrays
        return a["query_index"], a["key_index"], a["weights"], *self.lens()


def make_dense_case(rng: np.random.Generator, dtype: str, wdtype: str = "float32", layout: str = "TND",
                    sparse_mode: int = 3, *, lens_q: list[int] | None = None, lens_k: list[int] | None = None,
                    b: int = 2, s1: int = 7, s2: int = 9, n1: int = 4, n2: int = 1, d: int = 24, dr: int = 8,
                    nidx: int = 4, didx: int = 16, bsnd_lens: tuple[list[int] | None, list[int] | None] = (None, None)
                    ) -> DenseCase:
    """lens_* are per-sequence lengths (TND), passed on cumulative; BSND takes per-batch ``bsnd_lens``."""
    if layout == "TND":
        lens_q = lens_q or [5, 0, 9]
        lens_k = lens_k or [7, 3, 12]
        tok_q, tok_k = [sum(lens_q)], [sum(lens_k)]
    else:
        tok_q, tok_k = [b, s1], [b, s2]
    q = lambda *s: quantize(rng.standard_normal(s), dtype)  # noqa: E731
    case = DenseCase(layout, sparse_mode, 1.0 / np.sqrt(d + dr))
    a = case.arrays
    a["query"], a["key"] = q(*tok_q, n1, d), q(*tok_k, n2, d)
    if dr:
        a["query_rope"], a["key_rope"] = q(*tok_q, n1, dr), q(*tok_k, n2, dr)
    a["query_index"] = quantize(0.5 * rng.standard_normal((*tok_q, nidx, didx)), dtype)
    a["key_index"] = q(*tok_k, 1, didx)
    a["weights"] = quantize(rng.standard_normal((*tok_q, nidx)) / np.sqrt(nidx), wdtype)
    if layout == "TND":
        case.lens_q, case.lens_k = [int(x) for x in np.cumsum(lens_q)], [int(x) for x in np.cumsum(lens_k)]
    else:
        case.lens_q, case.lens_k = bsnd_lens
    set_stats(case)
    return case


def set_stats(case: DenseCase) -> None:
    """(Re)computes the four statistics inputs from the case's tensors, rounded to float32."""
    a = case.arrays
    mx, sm = ref.dense_attention_softmax_stats(a["query"], a["key"], a.get("query_rope"), a.get("key_rope"),
                                               *case.lens(), scale_value=case.scale, **case.attrs())
    mxi, smi = ref.dense_lightning_indexer_softmax_lse(*case.ref_lse_args(), **case.attrs())
    for name, x in zip(STATS, (mx, sm, mxi, smi)):
        a[name] = x.astype(np.float32).astype(np.float64)


def ms_lse_args(case: DenseCase, dtype: str, wdtype: str) -> list:
    from _util import to_ms
    a = case.arrays
    return [to_ms(a["query_index"], dtype), to_ms(a["key_index"], dtype), to_ms(a["weights"], wdtype), *case.lens()]


def ms_grad_args(case: DenseCase, dtype: str, wdtype: str, lens_as_tensor: bool = False) -> list:
    """The 13 inputs of the grad op as MindSpore tensors (None for absent optional inputs)."""
    import mindspore as ms
    from _util import to_ms
    a = case.arrays
    out = [to_ms(a[n], dtype) for n in ("query", "key", "query_index", "key_index")]
    out += [to_ms(a["weights"], wdtype)] + [ms.Tensor(a[n].astype(np.float32)) for n in STATS]
    out += [to_ms(a[n], dtype) if n in a else None for n in ("query_rope", "key_rope")]
    for lens in case.lens():
        out.append(ms.Tensor(np.asarray(lens, np.int64)) if lens is not None and lens_as_tensor else lens)
    return out
