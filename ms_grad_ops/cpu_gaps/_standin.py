"""What every CPU stand-in shares: the Primitive configuration calls it accepts, and the float32
compute rule.

A stand-in is a ``mindspore.jit_class``: GRAPH mode parses its ``__call__`` (composites of ops with
CPU kernels, differentiated by MindSpore's autodiff) wherever it is stored on a Cell, passed
around or constructed inside ``construct``, exactly where a Primitive instance would be.
"""
from __future__ import annotations

import mindspore as ms
from mindspore import Tensor
from mindspore.ops import constexpr

_HALF = (ms.float16, ms.bfloat16)


class PrimitiveStandIn:
    """Accepts, and ignores on CPU, what code does to configure a Primitive: sharding strategies,
    recomputation, placement and attributes steer Ascend's parallel compiler and memory planner;
    none changes what the op computes."""

    def add_prim_attr(self, name: str, value: object) -> PrimitiveStandIn:
        return self

    def del_prim_attr(self, name: str) -> PrimitiveStandIn:
        return self

    def recompute(self, mode: bool = True) -> PrimitiveStandIn:
        return self

    def shard(self, *args: object, **kwargs: object) -> PrimitiveStandIn:
        return self

    def set_device(self, device_target: str) -> PrimitiveStandIn:
        return self

    def place(self, role: str, rank_id: int) -> PrimitiveStandIn:
        return self

    def set_prim_instance_name(self, instance_name: str) -> PrimitiveStandIn:
        return self


def upcast(x: Tensor) -> Tensor:
    """float16/bfloat16 to float32 (exact), other dtypes unchanged. The stand-ins compute 16-bit
    floats in float32 and round the result once, as Ascend's kernels do; it also keeps them clear
    of MindSpore's CPU kernels, most of which have no bfloat16 (Reshape, Transpose, Gather,
    StridedSlice, Select, BatchMatMul, CumSum, TopK, Sort, ...)."""
    if x.dtype in _HALF:
        return x.astype(ms.float32)
    return x


@constexpr
def graph_mode() -> bool:
    """Whether the context is GRAPH mode (evaluated when a graph compiles; ``ms.jit`` inside PyNative
    says False). The stand-ins for gaps only PyNative has keep MindSpore's function in GRAPH mode."""
    return ms.get_context("mode") == ms.GRAPH_MODE
