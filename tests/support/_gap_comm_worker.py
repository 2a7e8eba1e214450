"""The msrun worker of ``test_gap_comm.py`` (not a test module): with communication initialised
and a created group of one member, ``AlltoAll``/``AlltoAllV`` over it and ``MoveTo`` in a GRAPH-mode
function and its gradient. Prints ``RESULT <json>``."""
from __future__ import annotations

import json

import mindspore as ms
import numpy as np
from mindspore import Tensor, ops
from mindspore.communication import create_group, get_group_size, init

ms.set_device("CPU")
ms.set_context(mode=ms.GRAPH_MODE)

import ms_grad_ops  # noqa: E402

ms_grad_ops.builtins.install()
init()
create_group("one_member", [0])


@ms.jit
def exchange(x: Tensor) -> Tensor:
    y = ops.AlltoAll(1, -1, -2, "one_member")(x)
    count = ops.MoveTo()(Tensor([12], ms.int64), "CPU", True)
    return ops.AlltoAllV("one_member", 1)(y.reshape(-1), count, count).reshape(3, 4)


x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
print("RESULT " + json.dumps({"group_size": get_group_size("one_member"), "out": exchange(x).asnumpy().tolist(),
                              "grad": ms.grad(exchange)(x).asnumpy().tolist()}), flush=True)
