"""``SliceExt``, ``IndexSelect`` and the embedding lookup (whose gradient is MindSpore's
``EmbeddingDenseBackward``) on CPU: composites of ``Slice``/``Gather``, whose gradients
(``SliceGrad``, ``UnsortedSegmentSum``) have CPU kernels."""
from __future__ import annotations

import mindspore as ms
from mindspore import Tensor, ops
from mindspore.ops import constexpr

from ._standin import PrimitiveStandIn, upcast


@constexpr
def _slice_plan(shape: tuple, dim: int, start: int, end: int, step: int) -> tuple:
    """(dim >= 0, first index, count) of ``SliceExt``: negative ``start``/``end`` count from the
    end, both are clamped to the dimension, ``end < start`` gives an empty slice."""
    rank = len(shape)
    if not -rank <= dim < rank:
        raise ValueError(f"SliceExt: dim {dim} is out of range for an input of shape {shape}")
    if step <= 0:
        raise ValueError(f"SliceExt: step must be positive, got {step}")
    dim %= rank
    size = shape[dim]
    start = min(max(start + size if start < 0 else start, 0), size)
    end = min(max(end + size if end < 0 else end, start), size)
    return dim, start, (end - start + step - 1) // step


@ms.jit_class
class SliceExt(PrimitiveStandIn):
    """``SliceExt()(input, dim, start, end, step)``: ``input`` sliced along ``dim`` from ``start`` to
    ``end`` (exclusive) by ``step > 0``, MindSpore's bounds rule (see ``_slice_plan``). A ``Slice``
    for ``step == 1``, a ``Gather`` of the positions otherwise (MindSpore 2.10's CPU
    ``StridedSliceGrad`` reads out of bounds for strided slices)."""

    def __init__(self) -> None:
        pass

    def __call__(self, input: Tensor, dim: int, start: int, end: int, step: int) -> Tensor:  # noqa: A002
        axis, first, count = _slice_plan(input.shape, dim, start, end, step)
        x = upcast(input)
        if step == 1 or count == 0:
            begin = tuple(first if i == axis else 0 for i in range(x.ndim))
            size = tuple(count if i == axis else x.shape[i] for i in range(x.ndim))
            return ops.slice(x, begin, size).astype(input.dtype)
        positions = ops.arange(first, first + count * step, step, dtype=ms.int64)
        return ops.gather(x, positions, axis).astype(input.dtype)


@constexpr
def _check_index_select(shape: tuple, dim: int, index_shape: tuple) -> bool:
    if not -len(shape) <= dim < len(shape):
        raise ValueError(f"IndexSelect: dim {dim} is out of range for an input of shape {shape}")
    if len(index_shape) != 1:
        raise ValueError(f"IndexSelect: 'index' must be 1-D, got shape {index_shape}")
    return True


@ms.jit_class
class IndexSelect(PrimitiveStandIn):
    """``IndexSelect()(input, dim, index)``: the slices ``index`` (1-D int32/int64) of ``input``
    along ``dim``, in ``input``'s dtype."""

    def __init__(self) -> None:
        pass

    def __call__(self, input: Tensor, dim: int, index: Tensor) -> Tensor:  # noqa: A002
        _check_index_select(input.shape, dim, index.shape)
        return ops.gather(upcast(input), index, dim % input.ndim).astype(input.dtype)


def index_select_ext(input: Tensor, dim: int, index: Tensor) -> Tensor:  # noqa: A002
    """``mindspore.mint.index_select`` on :class:`IndexSelect`."""
    return IndexSelect()(input, dim, index)


@constexpr
def _check_embedding(weight_shape: tuple, padding_idx: int | None, max_norm: float | None) -> int:
    """``padding_idx`` made non-negative (-1 for None)."""
    if len(weight_shape) != 2:
        raise ValueError(f"embedding: 'weight' must be 2-D, got shape {weight_shape}")
    if max_norm is not None:
        raise ValueError("embedding: 'max_norm' (renormalising rows of 'weight' in place) is not supported by "
                         "ms_grad_ops on CPU; pass None")
    if padding_idx is None:
        return -1
    if not -weight_shape[0] <= padding_idx < weight_shape[0]:
        raise ValueError(f"embedding: padding_idx {padding_idx} is out of range for 'weight' of shape {weight_shape}")
    return padding_idx % weight_shape[0]


@ms.jit_class
class Embedding(PrimitiveStandIn):
    """``Embedding()(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq)``: rows
    ``input`` (int32/int64, any shape) of ``weight [V, H]`` -> ``[*input.shape, H]`` in
    ``weight``'s dtype. Its gradient is ``EmbeddingDenseBackward``'s: the output gradients summed
    into their rows (in float32), nothing into row ``padding_idx``, each divided by its index's count
    in ``input`` when ``scale_grad_by_freq``. ``max_norm`` raises ``ValueError``."""

    def __init__(self) -> None:
        pass

    def __call__(self, input: Tensor, weight: Tensor, padding_idx: int | None = None,  # noqa: A002
                 max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False) -> Tensor:
        pad = _check_embedding(weight.shape, padding_idx, max_norm)
        flat = input.reshape(-1)
        rows = ops.gather(upcast(weight), flat, 0)
        fixed = ops.stop_gradient(rows)
        if scale_grad_by_freq:
            # value: rows exactly (rows - fixed is 0); gradient: 1 / count of the row's index
            counts = ops.unsorted_segment_sum(ops.ones(flat.shape, ms.float32), flat, weight.shape[0])
            rows = fixed + (rows - fixed) / ops.gather(counts, flat, 0).reshape(-1, 1)
        if pad >= 0:
            rows = ops.select(ops.broadcast_to((flat != pad).reshape(-1, 1), rows.shape), rows, fixed)
        return rows.reshape(input.shape + (weight.shape[1],)).astype(weight.dtype)


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm: float | None = None,  # noqa: A002
              norm_type: float = 2.0, scale_grad_by_freq: bool = False) -> Tensor:
    """``mindspore.mint.nn.functional.embedding`` on :class:`Embedding`."""
    return Embedding()(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq)
