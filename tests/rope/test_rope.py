"""rope / rope_grad kernels vs the float64 reference, in PyNative and GRAPH mode."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _util import DTYPES, Fn, assert_close, assert_within, quantize, sum_error_bound, to_ms, to_np

import ms_grad_ops as mgo
from ms_grad_ops import reference as ref

# (q_seq_len, hidden): the seed's case, single-token sequences, one head, T=1, the seed's max hidden.
CASES = [([2, 1, 4, 4], 128), ([1, 1, 1], 640), ([7], 128), ([1], 256), ([3, 5, 2], 5120), ([9, 1, 6], 384)]


def _inputs(rng: np.random.Generator, lens: list[int], hidden: int, max_seq: int | None = None) -> list[np.ndarray]:
    t, m = sum(lens), max_seq or max(lens)
    return [rng.standard_normal((t, hidden)), rng.standard_normal((t, hidden)),
            rng.standard_normal((m, 128)), rng.standard_normal((m, 128))]


def _run(fn: object, args: list, exec_mode: str) -> tuple:
    return Fn(fn)(*args) if exec_mode == "graph" else fn(*args)


def _rope_grad_atb(g: ms.Tensor, k: ms.Tensor, c: ms.Tensor, s: ms.Tensor, lens: ms.Tensor) -> tuple:
    return mgo.ops.rope_grad(g, k, c, s, lens, mode="atb")


def _rope_grad_vjp(g: ms.Tensor, k: ms.Tensor, c: ms.Tensor, s: ms.Tensor, lens: ms.Tensor) -> tuple:
    return mgo.ops.rope_grad(g, k, c, s, lens, mode="vjp")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lens,hidden", CASES)
@pytest.mark.parametrize("mode", ["atb", "vjp"])
def test_rope_grad_matches_reference(exec_mode: str, dtype: str, lens: list[int], hidden: int, mode: str) -> None:
    rng = np.random.default_rng(hash((dtype, hidden, len(lens), mode)) % 2**32)
    xs = [quantize(x, dtype) for x in _inputs(rng, lens, hidden, max_seq=max(lens) + 3)]
    lens_t = ms.Tensor(np.array(lens, np.int32))
    fn = _rope_grad_atb if mode == "atb" else _rope_grad_vjp
    out = _run(fn, [to_ms(x, dtype) for x in xs] + [lens_t], exec_mode)
    want = ref.rope_grad(*xs, lens, mode=mode)
    for name, o, w in zip(("q_grad_out", "k_grad_out"), out, want):
        assert o.dtype == ms.bfloat16 if dtype == "bfloat16" else True
        assert_close(to_np(o), w, dtype, what=f"rope_grad {mode} {name}")


def _rope(q: ms.Tensor, k: ms.Tensor, c: ms.Tensor, s: ms.Tensor, lens: ms.Tensor) -> tuple:
    return mgo.ops.rope(q, k, c, s, lens)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lens,hidden", CASES[:4])
def test_rope_matches_reference(exec_mode: str, dtype: str, lens: list[int], hidden: int) -> None:
    rng = np.random.default_rng(len(lens) * 7 + hidden)
    xs = [quantize(x, dtype) for x in _inputs(rng, lens, hidden)]
    out = _run(_rope, [to_ms(x, dtype) for x in xs] + [ms.Tensor(np.array(lens, np.int64))], exec_mode)
    for o, w in zip(out, ref.rope(*xs, lens)):
        assert_close(to_np(o), w, dtype, what="rope")


@pytest.mark.parametrize("x_dtype,table_dtype", [("bfloat16", "float32"), ("float16", "bfloat16"),
                                                  ("float32", "float16")])
def test_tables_in_another_dtype(x_dtype: str, table_dtype: str) -> None:
    rng = np.random.default_rng(3)
    lens = [3, 2]
    g, k, c, s = _inputs(rng, lens, 256)
    g, k, c, s = quantize(g, x_dtype), quantize(k, x_dtype), quantize(c, table_dtype), quantize(s, table_dtype)
    out = mgo.ops.rope_grad(to_ms(g, x_dtype), to_ms(k, x_dtype), to_ms(c, table_dtype), to_ms(s, table_dtype),
                            lens, mode="vjp")
    assert out[0].dtype == to_ms(g, x_dtype).dtype
    for o, w in zip(out, ref.rope_grad(g, k, c, s, lens, mode="vjp")):
        assert_close(to_np(o), w, x_dtype, what="rope_grad mixed dtypes")


def _seed_pseudo_code(q_grad: np.ndarray, k_grad: np.ndarray, cos: np.ndarray, sin: np.ndarray,
                      q_seq_len: list[int]) -> list[np.ndarray]:
    """The ATB document's RopeGradCalc, transcribed to NumPy line by line (torch.cat -> concatenate)."""
    cos = np.concatenate([cos[:x, :] for x in q_seq_len], axis=0)
    sin = np.concatenate([sin[:x, :] for x in q_seq_len], axis=0)
    rohqgsin = np.concatenate((sin[:, 64:], -sin[:, :64]), axis=-1)
    q_out, k_out = np.zeros_like(q_grad), np.zeros_like(k_grad)
    for i in range(q_grad.shape[1] // 128):
        q_out[:, i * 128:(i + 1) * 128] = q_grad[:, i * 128:(i + 1) * 128] * (cos + rohqgsin)
        k_out[:, i * 128:(i + 1) * 128] = k_grad[:, i * 128:(i + 1) * 128] * (cos + rohqgsin)
    return [q_out, k_out]


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_atb_mode_equals_the_seed_pseudo_code(dtype: str) -> None:
    rng = np.random.default_rng(11)
    lens = [2, 1, 4, 4]
    xs = [quantize(x, dtype) for x in _inputs(rng, lens, 512)]
    out = mgo.ops.rope_grad(*(to_ms(x, dtype) for x in xs), lens)
    for o, w in zip(out, _seed_pseudo_code(*xs, lens)):
        assert_close(to_np(o), w, dtype, what="rope_grad atb vs seed")


def test_atb_equals_the_vjp_only_when_halves_are_equal() -> None:
    rng = np.random.default_rng(5)
    g, _, c, s = (to_ms(x, "float32") for x in _inputs(rng, [4], 128))
    atb, vjp = (to_np(mgo.ops.rope_grad(g, g, c, s, [4], mode=m)[0]) for m in ("atb", "vjp"))
    assert not np.allclose(atb, vjp)
    half = to_np(g)[:, :64]
    g_eq = to_ms(np.concatenate([half, half], axis=1), "float32")
    atb, vjp = (to_np(mgo.ops.rope_grad(g_eq, g_eq, c, s, [4], mode=m)[0]) for m in ("atb", "vjp"))
    # Both against the float64 VJP (not each other: the two formulas round differently, and each
    # takes this CPU's element-wise path): each element is two products summed in float32, so
    # within sum_error_bound(2, .) of |g| (|cos| + |sin|) summed over the two terms.
    g64, c64, s64 = (to_np(x) for x in (g_eq, c, s))
    want = ref.rope_grad(g64, g64, c64, s64, [4], mode="vjp")[0]
    s_abs = np.concatenate([-np.abs(s64[:, :64]), np.abs(s64[:, 64:])], axis=1)  # makes both terms positive
    mag = ref.rope_grad(np.abs(g64), np.abs(g64), np.abs(c64), s_abs, [4], mode="vjp")[0]
    bound = sum_error_bound(2, mag, "float32", want)
    assert_within(atb, want, bound, "atb with equal halves")
    assert_within(vjp, want, bound, "vjp")


def test_vjp_is_the_gradient_of_rope() -> None:
    """Finite differences of sum(rope(x) * g) in float64 equal the reference VJP."""
    rng = np.random.default_rng(9)
    x, g, c, s = _inputs(rng, [3], 128)
    lens, eps = [3], 1e-6
    vjp = ref.rope_grad(g, g, c, s, lens, mode="vjp")[0]
    for idx in [(0, 0), (1, 70), (2, 127), (2, 63)]:
        xp, xm = x.copy(), x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        fd = ((ref.rope(xp, xp, c, s, lens)[0] - ref.rope(xm, xm, c, s, lens)[0]) * g).sum() / (2 * eps)
        assert abs(fd - vjp[idx]) < 1e-6 * max(1.0, abs(vjp[idx]))
