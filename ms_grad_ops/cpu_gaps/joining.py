"""``mint.stack``, ``mint.roll`` and a ``mint.split`` whose gradient is right, on CPU.

- ``StackExt`` (``mint.stack``) and ``Roll`` (``mint.roll``/``ops.roll``) have no CPU kernel in
  either mode: ``Stack``, and ``Slice``s joined by ``Concat``; autodiff gives the gradients.
- ``mint.split`` (``split_view``, and ``ops.split_ext``) runs on CPU, but in PyNative its backward
  (``SplitWithSize``/``SplitTensor`` and their views) reads each piece's incoming gradient as if it
  were contiguous from the start of its storage: when that gradient is a strided view - what the
  backward of ``mint.cat``/``ops.cat`` and of ``permute``/``transpose`` hand back - the gradient is
  silently wrong (docs/cpu.md gives the boundary). The stand-in takes the pieces with
  ``mint.narrow`` in PyNative (views too: no copy; their backward is right) and is MindSpore's own
  function in GRAPH mode, whose gradient is right.
"""
from __future__ import annotations

from collections.abc import Sequence

from mindspore import Tensor, mint, ops
from mindspore.ops import constexpr
from mindspore.ops.function.array_func import split_ext as _split_ext
from mindspore.ops.function.array_func import split_view as _split_view

from ._standin import graph_mode, upcast


@constexpr
def _axis(op: str, rank: int, dim: int) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < rank:
        raise ValueError(f"{op}: dim {dim!r} is out of range for a tensor of rank {rank}")
    return dim % rank


def stack_ext(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """``mindspore.mint.stack``: equal-shaped tensors joined along a new axis ``dim`` (16-bit
    floats moved in float32: the CPU ``Stack`` has no bfloat16 kernel; exact)."""
    if not tensors:
        raise ValueError("stack: 'tensors' must not be empty")
    first = tensors[0]
    axis = _axis("stack", first.ndim + 1, dim)
    return ops.stack([upcast(t) for t in tensors], axis).astype(first.dtype)


@constexpr
def _roll_plan(shape: tuple, shifts: int | tuple, dims: int | tuple | None) -> tuple:
    """((axis, shift in [0, n)), ...) per rolled axis; axis -1 stands for the flattened tensor."""
    shift_list = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    if dims is None:
        if len(shift_list) != 1:
            raise ValueError(f"roll: without 'dims' 'shifts' must be one int, got {shifts!r}")
        size = 1
        for n in shape:
            size *= n
        return ((-1, shift_list[0] % size if size else 0),)
    dim_list = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(dim_list) != len(shift_list):
        raise ValueError(f"roll: 'shifts' {shifts!r} and 'dims' {dims!r} must have the same length")
    plan = []
    for shift, dim in zip(shift_list, dim_list):
        if not -len(shape) <= dim < len(shape):
            raise ValueError(f"roll: dim {dim} is out of range for a tensor of shape {shape}")
        axis = dim % len(shape)
        plan.append((axis, shift % shape[axis] if shape[axis] else 0))
    return tuple(plan)


def _roll_axis(x: Tensor, axis: int, shift: int) -> Tensor:
    """``x`` rolled by ``0 < shift < n`` along ``axis``: its last ``shift`` entries first."""
    n = x.shape[axis]
    zeros = (0,) * x.ndim
    tail = ops.slice(x, zeros[:axis] + (n - shift,) + zeros[axis + 1:], x.shape[:axis] + (shift,) + x.shape[axis + 1:])
    head = ops.slice(x, zeros, x.shape[:axis] + (n - shift,) + x.shape[axis + 1:])
    return ops.concat((tail, head), axis)


def roll(input: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None  # noqa: A002
         ) -> Tensor:
    """``mindspore.mint.roll``: entries shifted by ``shifts`` along ``dims`` (wrapping around); with
    ``dims=None`` the flattened tensor is rolled and the shape restored."""
    x = upcast(input)
    for axis, shift in _roll_plan(input.shape, shifts, dims):
        if shift:
            if axis < 0:
                x = _roll_axis(x.reshape(-1), 0, shift).reshape(input.shape)
            else:
                x = _roll_axis(x, axis, shift)
    return x.astype(input.dtype)


@constexpr
def _split_sizes(op: str, length: int, split_size_or_sections: int | Sequence[int]) -> tuple:
    """The pieces' sizes: ``split_size`` each (the last one smaller) or the given sections."""
    if isinstance(split_size_or_sections, bool):
        raise TypeError(f"{op}: 'split_size_or_sections' must be an int or a list/tuple of ints")
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        if size <= 0:
            raise ValueError(f"{op}: the split size must be positive, got {size}")
        return tuple(min(size, length - start) for start in range(0, length, size)) or (0,)
    sizes = tuple(split_size_or_sections)
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in sizes):
        raise TypeError(f"{op}: each section must be a non-negative int, got {split_size_or_sections!r}")
    if sum(sizes) != length:
        raise ValueError(f"{op}: the sections {split_size_or_sections!r} must sum to the dimension's size {length}")
    return sizes


def _narrowed(tensor: Tensor, sizes: tuple, axis: int) -> tuple:
    pieces = []
    start = 0
    for size in sizes:
        pieces.append(mint.narrow(tensor, axis, start, size))
        start += size
    return tuple(pieces)


def split_view(tensor: Tensor, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple:
    """``mindspore.mint.split``: ``tensor`` cut along ``dim`` into pieces of ``split_size`` (the
    last smaller) or of the given sizes; views in PyNative (``mint.narrow``), MindSpore's own
    ``split_view`` in GRAPH mode."""
    if graph_mode():
        return _split_view(tensor, split_size_or_sections, dim)
    axis = _axis("split", tensor.ndim, dim)
    return _narrowed(tensor, _split_sizes("split", tensor.shape[axis], split_size_or_sections), axis)


def split_ext(tensor: Tensor, split_size: int | Sequence[int], dim: int = 0) -> tuple:
    """``mindspore.ops.split_ext``: the same cut as :func:`split_view` (its backward has the
    same fault in PyNative); MindSpore's own in GRAPH mode."""
    if graph_mode():
        return _split_ext(tensor, split_size, dim)
    axis = _axis("split_ext", tensor.ndim, dim)
    return _narrowed(tensor, _split_sizes("split_ext", tensor.shape[axis], split_size), axis)
