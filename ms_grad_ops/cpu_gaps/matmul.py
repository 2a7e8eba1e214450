"""``Outer``, ``BatchMatMul`` with batch broadcasting, and ``GroupedMatmul`` on CPU: composites of
ops with CPU kernels (MindSpore's own ``BatchMatMul`` where batch dimensions already agree);
autodiff gives the gradients."""
from __future__ import annotations

import mindspore as ms
from mindspore import Tensor, ops
from mindspore.ops import constexpr
from mindspore.ops.auto_generate.gen_ops_prim import BatchMatMul as _BatchMatMul

from ._standin import PrimitiveStandIn, upcast


@constexpr
def _broadcast_batch(op: str, a_shape: tuple, b_shape: tuple) -> tuple:
    """The common batch shape of two ``[..., M, K]`` operands (NumPy broadcasting)."""
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise ValueError(f"{op}: both inputs need rank >= 2, got shapes {a_shape} and {b_shape}")
    a, b = a_shape[:-2], b_shape[:-2]
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + tuple(a), (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ValueError(f"{op}: batch dimensions of {a_shape} and {b_shape} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


@ms.jit_class
class BatchMatMul(PrimitiveStandIn):
    """``BatchMatMul(transpose_a, transpose_b)(x, y)``: ``x @ y`` over the last two dimensions, the
    batch dimensions broadcast as in NumPy (MindSpore's CPU kernel requires them equal; Ascend
    broadcasts). 16-bit floats computed in float32, the result in ``x``'s dtype."""

    def __init__(self, transpose_a: bool = False, transpose_b: bool = False) -> None:
        self.transpose_a = transpose_a
        self.transpose_b = transpose_b
        self.bmm = _BatchMatMul(transpose_a, transpose_b)

    def __call__(self, x: Tensor, y: Tensor) -> Tensor:
        batch = _broadcast_batch("BatchMatMul", x.shape, y.shape)
        a, b = upcast(x), upcast(y)
        if a.shape[:-2] != batch:
            a = ops.broadcast_to(a.reshape((1,) * (len(batch) + 2 - a.ndim) + a.shape), batch + a.shape[-2:])
        if b.shape[:-2] != batch:
            b = ops.broadcast_to(b.reshape((1,) * (len(batch) + 2 - b.ndim) + b.shape), batch + b.shape[-2:])
        return self.bmm(a, b).astype(x.dtype)


@constexpr
def _check_outer(a_shape: tuple, b_shape: tuple) -> bool:
    if len(a_shape) != 1 or len(b_shape) != 1:
        raise ValueError(f"Outer: 'input' and 'vec2' must be 1-D, got shapes {a_shape} and {b_shape}")
    return True


@ms.jit_class
class Outer(PrimitiveStandIn):
    """``Outer()(input, vec2)``: ``[n] x [m] -> [n, m]``, ``input[i] * vec2[j]`` (no broadcasting),
    in the inputs' dtype (16-bit floats multiplied in float32: exact before the one rounding)."""

    def __init__(self) -> None:
        pass

    def __call__(self, input: Tensor, vec2: Tensor) -> Tensor:  # noqa: A002 - MindSpore's name
        _check_outer(input.shape, vec2.shape)
        return (upcast(input).reshape(-1, 1) * upcast(vec2).reshape(1, -1)).astype(input.dtype)


def outer_ext(input: Tensor, vec2: Tensor) -> Tensor:  # noqa: A002
    """``mindspore.mint.outer`` on :class:`Outer`."""
    return Outer()(input, vec2)


@constexpr
def _check_grouped(split_item: int, group_type: int, transpose_a: bool, n_x: int, n_w: int, quantized: bool,
                   has_group_list: bool) -> bool:
    op = "GroupedMatmul"
    if quantized:
        raise ValueError(f"{op}: 'scale', 'offset', 'antiquant_scale' and 'antiquant_offset' (quantized matmul) are "
                         "not supported by ms_grad_ops on CPU; pass None")
    if transpose_a:
        raise ValueError(f"{op}: transpose_a=True is not supported by ms_grad_ops on CPU")
    if (split_item, group_type) == (3, 0):
        if n_x != 1 or n_w != 1:
            raise ValueError(f"{op}: split_item=3 takes one x and one weight tensor, got {n_x} and {n_w}")
        if not has_group_list:
            raise ValueError(f"{op}: split_item=3, group_type=0 needs 'group_list'")
    elif (split_item, group_type) == (0, -1):
        if n_x != n_w:
            raise ValueError(f"{op}: split_item=0 takes as many x as weight tensors, got {n_x} and {n_w}")
    else:
        raise ValueError(f"{op}: (split_item, group_type) = ({split_item}, {group_type}) is not supported; "
                         "(0, -1) and (3, 0) are")
    return True


@constexpr
def _check_grouped_shapes(x_shape: tuple, w_shape: tuple, g_shape: tuple, transpose_b: bool) -> bool:
    k = w_shape[2] if transpose_b else w_shape[1]
    if len(x_shape) != 2 or len(w_shape) != 3 or x_shape[1] != k or g_shape != (w_shape[0],):
        raise ValueError(f"GroupedMatmul: split_item=3 needs x [M, K], weight [E, K, N] ([E, N, K] with transpose_b) "
                         f"and group_list [E]; got x {x_shape}, weight {w_shape}, group_list {g_shape}")
    return True


@ms.jit_class
class GroupedMatmul(PrimitiveStandIn):
    """``GroupedMatmul(split_item, group_type, transpose_a, transpose_b)(x, weight, bias, scale,
    offset, antiquant_scale, antiquant_offset, group_list)`` -> a tuple of outputs, in x's dtype
    (16-bit floats computed in float32).

    - ``split_item=0, group_type=-1``: ``y_i = x_i @ weight_i (+ bias_i)`` for each pair.
    - ``split_item=3, group_type=0``: one ``x [M, K]``, one ``weight [E, K, N]``, ``group_list [E]``
      cumulative row ends: rows ``[group_list[e-1], group_list[e])`` are multiplied by expert ``e``'s
      matrix (``+ bias[e]``); rows past ``group_list[-1]`` give zeros.

    The grouped case computes every row against every expert and keeps its own expert's result
    (``E`` times the FLOPs of the grouped product): exact and differentiable, meant for the small
    models one debugs on CPU. Quantized forms and ``transpose_a`` raise ``ValueError``."""

    def __init__(self, split_item: int = 0, group_type: int = -1, transpose_a: bool = False,
                 transpose_b: bool = False) -> None:
        self.split_item = split_item
        self.group_type = group_type
        self.transpose_a = transpose_a
        self.transpose_b = transpose_b
        self.bmm = _BatchMatMul(False, transpose_b)

    def __call__(self, x: tuple, weight: tuple, bias: tuple | None = None, scale: tuple | None = None,
                 offset: tuple | None = None, antiquant_scale: tuple | None = None,
                 antiquant_offset: tuple | None = None, group_list: Tensor | None = None) -> tuple:
        quantized = scale is not None or offset is not None or antiquant_scale is not None or \
            antiquant_offset is not None
        _check_grouped(self.split_item, self.group_type, self.transpose_a, len(x), len(weight), quantized,
                       group_list is not None)
        if self.split_item == 0:
            outs = []
            for i in range(len(x)):
                w = upcast(weight[i])
                y = ops.matmul(upcast(x[i]), w.swapaxes(0, 1) if self.transpose_b else w)
                if bias is not None:
                    y = y + upcast(bias[i])
                outs.append(y.astype(x[i].dtype))
            return tuple(outs)
        xs, w = x[0], weight[0]
        _check_grouped_shapes(xs.shape, w.shape, group_list.shape, self.transpose_b)
        n_experts, rows = w.shape[0], xs.shape[0]
        x32 = upcast(xs)
        ys = self.bmm(ops.broadcast_to(x32.reshape(1, rows, x32.shape[1]), (n_experts, rows, x32.shape[1])),
                      upcast(w))  # [E, M, N]
        if bias is not None:
            ys = ys + upcast(bias[0]).reshape(n_experts, 1, -1)
        ends = group_list.astype(ms.int64).reshape(n_experts, 1)
        starts = ops.concat((ops.zeros((1, 1), ms.int64), ends[:-1]), 0)
        row = ops.arange(rows, dtype=ms.int64).reshape(1, rows)
        member = ops.logical_and(row >= starts, row < ends).reshape(n_experts, rows, 1)
        y = ops.select(ops.broadcast_to(member, ys.shape), ys, ops.zeros_like(ys)).sum(0)
        return (y.astype(xs.dtype),)


def grouped_matmul(x: tuple, weight: tuple, bias: tuple | None = None, scale: tuple | None = None,
                   offset: tuple | None = None, antiquant_scale: tuple | None = None,
                   antiquant_offset: tuple | None = None, group_list: Tensor | None = None, split_item: int = 0,
                   group_type: int = -1, transpose_a: bool = False, transpose_b: bool = False) -> tuple:
    """``mindspore.ops.auto_generate.grouped_matmul`` on :class:`GroupedMatmul`."""
    return GroupedMatmul(split_item, group_type, transpose_a, transpose_b)(
        x, weight, bias, scale, offset, antiquant_scale, antiquant_offset, group_list)
