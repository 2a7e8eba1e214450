"""GRAPH mode with dynamic shapes (Cell.set_inputs): one compiled graph, several input sizes."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _util import assert_close, to_np
from mindspore import Tensor, nn

import ms_grad_ops as mgo
from ms_grad_ops import reference as ref


class RopeGradCell(nn.Cell):
    def construct(self, g: Tensor, k: Tensor, cos: Tensor, sin: Tensor, lens: Tensor) -> tuple:
        return mgo.ops.rope_grad(g, k, cos, sin, lens, mode="vjp")


class ClaBackwardCell(nn.Cell):
    def construct(self, *args: Tensor) -> tuple:
        return mgo.ops.cla_gate_backward(*args)


@pytest.fixture
def graph_mode() -> None:
    ms.set_context(mode=ms.GRAPH_MODE)
    yield
    ms.set_context(mode=ms.PYNATIVE_MODE)


def test_rope_grad_dynamic_tokens_and_batch(graph_mode: None) -> None:
    cell = RopeGradCell()
    f32 = ms.float32
    cell.set_inputs(Tensor(shape=[None, 256], dtype=f32), Tensor(shape=[None, 256], dtype=f32),
                    Tensor(shape=[None, 128], dtype=f32), Tensor(shape=[None, 128], dtype=f32),
                    Tensor(shape=[None], dtype=ms.int32))
    rng = np.random.default_rng(31)
    for lens in ([2, 1, 4, 4], [7], [1, 9]):
        t, m = sum(lens), max(lens)
        xs = [rng.standard_normal((t, 256)), rng.standard_normal((t, 256)),
              rng.standard_normal((m, 128)), rng.standard_normal((m, 128))]
        out = cell(*(Tensor(x, f32) for x in xs), Tensor(np.array(lens, np.int32)))
        for o, w in zip(out, ref.rope_grad(*xs, lens, mode="vjp")):
            assert_close(to_np(o), w, "float32", what=f"dynamic rope_grad {lens}")


def test_cla_gate_backward_dynamic_tokens_and_heads(graph_mode: None) -> None:
    cell = ClaBackwardCell()
    f16 = ms.float16
    cell.set_inputs(*(Tensor(shape=[None, None, 128], dtype=f16) for _ in range(3)),
                    *(Tensor(shape=[None, None], dtype=f16) for _ in range(2)))
    rng = np.random.default_rng(32)
    for t, n in ((3, 2), (11, 5), (1, 1)):
        xs = [rng.standard_normal((t, n, 128)) for _ in range(3)] + [rng.standard_normal((t, n)) for _ in range(2)]
        xs = [to_np(Tensor(x, f16)) for x in xs]
        out = cell(*(Tensor(x, f16) for x in xs))
        for o, w in zip(out, ref.cla_gate_backward(*xs)):
            assert_close(to_np(o), w, "float16", what=f"dynamic cla_gate_backward {(t, n)}")
