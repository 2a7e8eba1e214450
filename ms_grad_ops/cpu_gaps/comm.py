"""Communication ops at group size 1, and ``MoveTo``, on CPU.

MindSpore Transformers builds its expert-parallel exchange (``AlltoAll``/``AlltoAllV`` over the
expert group) whenever it runs under a parallel mode, even when the expert group has one member
(data parallel with ``expert_model_parallel_size=1``), and copies the split sizes to the host with
``MoveTo``. MindSpore's CPU backend has neither collective (MCCL on CPU offers AllReduce,
AllGather and Broadcast) nor a ``MoveTo`` kernel. Within one member the exchange is the identity
(every block goes to the sender itself), and on CPU the host copy is too: the stand-ins return
their input, differentiably. A group of more than one member keeps MindSpore's primitive.
"""
from __future__ import annotations

import mindspore as ms
from mindspore import Tensor
from mindspore.communication.management import GlobalComm, get_group_size
from mindspore.ops.operations.comm_ops import AlltoAll as _AlltoAll
from mindspore.ops.operations.comm_ops import AlltoAllV as _AlltoAllV

from ._standin import PrimitiveStandIn


def group_size(group: str | None) -> int:
    """Members of ``group`` (None: the world group); 1 when communication is not initialised (one
    process)."""
    if not GlobalComm.INITED:
        return 1
    return get_group_size(GlobalComm.WORLD_COMM_GROUP if group is None else group)


@ms.jit_class
class AlltoAll(PrimitiveStandIn):
    """``ops.AlltoAll(split_count, split_dim, concat_dim, group)``: with one member in ``group``
    (``split_count`` must then be 1) the input itself; otherwise MindSpore's ``AlltoAll``."""

    def __init__(self, split_count: int, split_dim: int, concat_dim: int,
                 group: str = GlobalComm.WORLD_COMM_GROUP) -> None:
        self.split_count = split_count
        self.split_dim = split_dim
        self.concat_dim = concat_dim
        self.rank_size = group_size(group)
        if self.rank_size == 1 and split_count != 1:
            raise ValueError(f"AlltoAll: split_count must equal the group's size 1, got {split_count}")
        self.prim = None if self.rank_size == 1 else _AlltoAll(split_count, split_dim, concat_dim, group)

    def __call__(self, input_x: Tensor) -> Tensor:
        if self.rank_size == 1:
            return input_x
        return self.prim(input_x)


@ms.jit_class
class AlltoAllV(PrimitiveStandIn):
    """``ops.AlltoAllV(group, block_size)(input_x, send_numel_list, recv_numel_list)``: with one
    member in ``group`` the whole flat input goes to its sender (the lists' one entry is its
    length / ``block_size``): the input itself; otherwise MindSpore's ``AlltoAllV``."""

    def __init__(self, group: str = GlobalComm.WORLD_COMM_GROUP, block_size: int = 1) -> None:
        if isinstance(block_size, bool) or not isinstance(block_size, int):
            raise TypeError(f"AlltoAllV: block_size must be an int, got {block_size!r}")
        self.block_size = block_size
        self.rank_size = group_size(group)
        self.prim = None if self.rank_size == 1 else _AlltoAllV(group, block_size)

    def __call__(self, input_x: Tensor, send_numel_list: object, recv_numel_list: object) -> Tensor:
        if self.rank_size == 1:
            return input_x
        return self.prim(input_x, send_numel_list, recv_numel_list)


@ms.jit_class
class MoveTo(PrimitiveStandIn):
    """``ops.MoveTo()(input, to="CPU", blocking=True)``: on a CPU device target every tensor is in
    host memory already; returns ``input`` (a list or tuple of ints as an int64 tensor)."""

    def __init__(self) -> None:
        pass

    def __call__(self, input: Tensor | list | tuple, to: str = "CPU", blocking: bool = True) -> Tensor:  # noqa: A002
        if isinstance(input, (list, tuple)):
            return Tensor(input, ms.int64)
        return input


def move_to(input: Tensor | list | tuple, to: str = "CPU", blocking: bool = True) -> Tensor:  # noqa: A002
    """``mindspore.ops.move_to`` on :class:`MoveTo`."""
    return MoveTo()(input, to, blocking)
