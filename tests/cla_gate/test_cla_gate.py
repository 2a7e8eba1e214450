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


@pytest.mark.parametrize("z", [0.5, 4.0, 7.2, 10.0, 16.0])
def test_float32_gate_gradient_is_accurate_for_large_logits(z: float) -> None:
    """s * (1 - s) cancels for large |z| (3.2e-5 relative error at z = 7.2 before the fix): every
    output must stay within the float32 bound, both signs of z, T = N = 1 (the issue's case) and
    many rows. In the single row G and O are positive: a float32 D-sum that cancels has a relative
    error of its own (docs/contract.md section 2's float32 reduction), which is not what this test measures."""
    for t, n in ((1, 1), (16, 4)):
        rng = np.random.default_rng(int(z * 10) + t)
        xs = _inputs(rng, t, n, 128, "float32")
        if t == 1:
            xs[:3] = [np.abs(x) for x in xs[:3]]
        xs[3] = quantize(z * rng.choice([-1.0, 1.0], (t, n)), "float32")
        xs[4] = -xs[3]
        out = mgo.ops.cla_gate_backward(*(to_ms(x, "float32") for x in xs))
        for i, (o, w) in enumerate(zip(out, ref.cla_gate_backward(*xs))):
            assert_close(to_np(o), w, "float32", what=f"cla_gate_backward output {i}, |z| = {z}, T = {t}")


def test_reference_gate_slope_has_no_cancellation() -> None:
    """The float64 reference itself: sigmoid'(z) for z = 40 is exp(-40) to 1e-15, not 0."""
    g = np.ones((1, 1, 1))
    dz = ref.cla_gate_backward(g, g, g, np.array([[40.0]]), np.array([[-40.0]]))[2:]
    for d in dz:
        np.testing.assert_allclose(d, np.exp(-40.0) / (1 + np.exp(-40.0)) ** 2, rtol=1e-12)
