"""``TopkExt``, ``SortExt`` and ``CumsumExt`` on CPU: composites of ``Sort``/``CumSum`` (CPU kernels on
the last axis; MindSpore's CPU ``Sort`` is stable, so ties keep the lower index first, as MindSpore
documents for ``topk``) with transposes; autodiff gives the gradients."""
from __future__ import annotations

import mindspore as ms
from mindspore import Tensor
from mindspore.ops import constexpr
from mindspore.ops import operations as P

from ._standin import PrimitiveStandIn, upcast


@constexpr
def _last_axis_perm(op: str, rank: int, dim: int) -> tuple:
    """The permutation moving ``dim`` last (its own inverse)."""
    if not -max(rank, 1) <= dim < max(rank, 1):
        raise ValueError(f"{op}: dim {dim} is out of range for a tensor of rank {rank}")
    dim %= max(rank, 1)
    perm = list(range(rank))
    if rank:
        perm[dim], perm[-1] = perm[-1], perm[dim]
    return tuple(perm)


@constexpr
def _check_k(k: int, size: int) -> bool:
    if isinstance(k, bool) or not 0 <= k <= size:
        raise ValueError(f"TopkExt: k must be in [0, {size}] (the size of the dimension), got {k!r}")
    return True


@ms.jit_class
class TopkExt(PrimitiveStandIn):
    """``TopkExt()(input, k, dim=-1, largest=True, sorted=True) -> (values, indices)``: the ``k``
    largest (smallest) entries along ``dim`` in descending (ascending) order, equal values in
    ascending index order; int64 indices. ``sorted=False`` returns them sorted too (an order the
    built-in allows)."""

    def __init__(self) -> None:
        pass

    def __call__(self, input: Tensor, k: int, dim: int = -1, largest: bool = True,  # noqa: A002
                 sorted: bool = True) -> tuple[Tensor, Tensor]:  # noqa: A002
        perm = _last_axis_perm("TopkExt", input.ndim, dim)
        x = upcast(input).transpose(perm)
        _check_k(k, x.shape[-1])
        values, indices = P.Sort(-1, largest)(x)  # stable; CPU TopK breaks ties arbitrarily when k < n
        values, indices = values[..., :k], indices[..., :k]
        return values.transpose(perm).astype(input.dtype), indices.transpose(perm).astype(ms.int64)


def topk_ext(input: Tensor, k: int, dim: int = -1, largest: bool = True,  # noqa: A002
             sorted: bool = True) -> tuple[Tensor, Tensor]:  # noqa: A002
    """``mindspore.mint.topk`` on :class:`TopkExt`."""
    return TopkExt()(input, k, dim, largest, sorted)


@ms.jit_class
class SortExt(PrimitiveStandIn):
    """``SortExt()(input, dim=-1, descending=False, stable=False) -> (values, indices)``: sorted
    along ``dim``, equal values in ascending index order (stable, which ``stable=False`` allows
    too); int64 indices."""

    def __init__(self) -> None:
        pass

    def __call__(self, input: Tensor, dim: int = -1, descending: bool = False,  # noqa: A002
                 stable: bool = False) -> tuple[Tensor, Tensor]:
        perm = _last_axis_perm("SortExt", input.ndim, dim)
        values, indices = P.Sort(-1, descending)(upcast(input).transpose(perm))
        return values.transpose(perm).astype(input.dtype), indices.transpose(perm).astype(ms.int64)


def sort_ext(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False  # noqa: A002
             ) -> tuple[Tensor, Tensor]:
    """``mindspore.ops.auto_generate.sort_ext`` on :class:`SortExt`."""
    return SortExt()(input, dim, descending, stable)


def sort_ext_keywords(input: Tensor, *, dim: int = -1, descending: bool = False,  # noqa: A002
                      stable: bool = False) -> tuple[Tensor, Tensor]:
    """``mindspore.mint.sort`` (keyword-only arguments) on :class:`SortExt`."""
    return SortExt()(input, dim, descending, stable)


@constexpr
def _check_cumsum(in_dtype: ms.dtype, out_dtype: ms.dtype | None) -> bool:
    if out_dtype is None and in_dtype == ms.bool_:
        raise TypeError("CumsumExt: a bool input needs 'dtype' (the type of the sums)")
    return True


@ms.jit_class
class CumsumExt(PrimitiveStandIn):
    """``CumsumExt()(input, dim, dtype=None)``: inclusive cumulative sum along ``dim``; ``input`` is
    first cast to ``dtype`` when given, the result has that dtype (else ``input``'s). 16-bit floats
    are summed in float32."""

    def __init__(self) -> None:
        pass

    def __call__(self, input: Tensor, dim: int, dtype: ms.dtype | None = None) -> Tensor:  # noqa: A002
        _check_cumsum(input.dtype, dtype)
        _last_axis_perm("CumsumExt", input.ndim, dim)
        x = input if dtype is None else input.astype(dtype)
        return P.CumSum()(upcast(x), dim % max(x.ndim, 1)).astype(x.dtype)


def cumsum_ext(input: Tensor, dim: int, dtype: ms.dtype | None = None) -> Tensor:  # noqa: A002
    """``mindspore.mint.cumsum`` on :class:`CumsumExt`."""
    return CumsumExt()(input, dim, dtype)
