"""cla_gate_merge / cla_gate_backward kernels vs the float64 reference, PyNative and GRAPH."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _util import DTYPES, Fn, assert_close, quantize, to_ms, to_np

import ms_grad_ops as mgo
from ms_grad_ops import reference as ref

# (T, N, D): Ascend's D=128/256, odd D, one head, T=1.
SHAPES = [(5, 3, 128), (1, 1, 256), (17, 4, 7), (3, 1, 1), (33, 2, 130)]


def _inputs(rng: np.random.Generator, t: int, n: int, d: int, dtype: str) -> list[np.ndarray]:
    xs = [rng.standard_normal((t, n, d)) for _ in range(3)] + [3 * rng.standard_normal((t, n)) for _ in range(2)]
    return [quantize(x, dtype) for x in xs]


def _backward(*args: ms.Tensor) -> tuple:
    return mgo.ops.cla_gate_backward(*args)


def _merge(*args: ms.Tensor) -> ms.Tensor:
    return mgo.ops.cla_gate_merge(*args)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_cla_gate_backward_matches_reference(exec_mode: str, dtype: str, shape: tuple[int, int, int]) -> None:
    xs = _inputs(np.random.default_rng(sum(shape)), *shape, dtype)
    args = [to_ms(x, dtype) for x in xs]
    out = Fn(_backward)(*args) if exec_mode == "graph" else _backward(*args)
    names = ("grad_global_attn", "grad_local_attn", "grad_global_gate_logits", "grad_local_gate_logits")
    for name, o, w in zip(names, out, ref.cla_gate_backward(*xs)):
        assert o.dtype == args[0].dtype
        assert_close(to_np(o), w, dtype, what=f"cla_gate_backward {name}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES[:3])
def test_cla_gate_merge_matches_reference(exec_mode: str, dtype: str, shape: tuple[int, int, int]) -> None:
    xs = _inputs(np.random.default_rng(sum(shape) + 1), *shape, dtype)[1:]
    args = [to_ms(x, dtype) for x in xs]
    out = Fn(_merge)(*args) if exec_mode == "graph" else _merge(*args)
    assert_close(to_np(out), ref.cla_gate_merge(*xs), dtype, what="cla_gate_merge")


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_and_inf_propagate(dtype: str) -> None:
    xs = _inputs(np.random.default_rng(2), 2, 2, 8, dtype)
    xs[0][0, 0, 3] = np.nan
    xs[3][1, 1] = np.inf
    out = [to_np(o) for o in mgo.ops.cla_gate_backward(*(to_ms(x, dtype) for x in xs))]
    assert np.isnan(out[0][0, 0, 3]) and np.isnan(out[2][0, 0])
    assert np.isfinite(out[0][1]).all()
    # sigmoid(inf) = 1, so dz_g = dot * 1 * 0 = 0 and dO_g = G exactly.
    assert out[2][1, 1] == 0.0
    np.testing.assert_array_equal(out[0][1, 1], xs[0][1, 1])
