"""``RmsNorm`` / ``ops.rms_norm`` on CPU (ms_grad_ops.cpu_gaps.norm) against the float64
reference: forward, rstd, and the gradients through parameters in front, PyNative and GRAPH,
float32/float16/bfloat16, gamma of rank 1 and 2."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _gaps import forward, random, upstream
from _util import DTYPES, MS_DTYPES, assert_close, to_np
from mindspore import Tensor, ops
from mindspore.ops import operations as P

from ms_grad_ops.reference import cpu_gaps as ref


def rms_norm_y(x: Tensor, gamma: Tensor) -> Tensor:
    return P.RmsNorm(1e-5)(x, gamma)[0]


def rms_norm_functional(x: Tensor, gamma: Tensor) -> tuple:
    return ops.rms_norm(x, gamma, 1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gamma_shape", [(24,), (3, 24)])
def test_rms_norm(exec_mode: str, dtype: str, gamma_shape: tuple) -> None:
    rng = np.random.default_rng(len(gamma_shape))
    x = random(rng, (2, 5, 3, 24), dtype, 3.0)
    gamma = random(rng, gamma_shape, dtype)
    y, rstd = forward(rms_norm_functional, Tensor(x.astype(np.float32), MS_DTYPES[dtype]),
                      Tensor(gamma.astype(np.float32), MS_DTYPES[dtype]))
    want_y, want_rstd = ref.rms_norm(x, gamma, 1e-5)
    assert y.dtype == MS_DTYPES[dtype] and rstd.dtype == ms.float32
    assert rstd.shape == want_rstd.shape == x.shape[:4 - len(gamma_shape)] + (1,) * len(gamma_shape)
    assert_close(to_np(y), want_y, dtype, what="y")
    assert_close(to_np(rstd), want_rstd, "float32", what="rstd")

    dy = random(rng, x.shape, dtype)
    (dx, dgamma), (dw_x, dw_gamma) = upstream(rms_norm_y, [x, gamma], [], dtype, dy)
    want_dx, want_dgamma = ref.rms_norm_vjp(x, gamma, dy, 1e-5)
    assert_close(dx, want_dx, dtype, what="dx")
    assert_close(dgamma, want_dgamma, dtype, what="dgamma")
    assert_close(dw_x, (want_dx * x).reshape(x.shape), dtype, what="upstream x")
    assert_close(dw_gamma, want_dgamma * gamma, dtype, what="upstream gamma")


def test_rms_norm_rejects_epsilon() -> None:
    with pytest.raises(ValueError, match="RmsNorm: epsilon"):
        P.RmsNorm(0.0)
