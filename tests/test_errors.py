"""Every validation path: error type and message (op, argument, shapes), never a crash."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _util import Fn
from mindspore import Tensor

import ms_grad_ops as mgo


def t(shape: tuple[int, ...], dtype: ms.dtype = ms.float32) -> Tensor:
    return Tensor(np.ones(shape, np.float32), dtype)


def lens_t(values: list[int], dtype: type = np.int32) -> Tensor:
    return Tensor(np.array(values, dtype))


# rope_grad(q_grad, k_grad, cos, sin, q_seq_len): each case breaks one rule.
ROPE_CASES = [
    (dict(q_grad=t((11,))), ValueError, r"rope_grad: argument 'q_grad' must be 2-D, got shape \[11\]"),
    (dict(k_grad=t((11, 128))), ValueError, r"argument 'k_grad' must have the shape of 'q_grad' \[11, 256\], got \[11, 128\]"),
    (dict(q_grad=t((11, 200)), k_grad=t((11, 200))), ValueError, r"hidden size must be a multiple of 128, got shape \[11, 200\]"),
    (dict(cos=t((4, 64)), sin=t((4, 64))), ValueError, r"argument 'cos' dim 1 must be head size = 128, got shape \[4, 64\]"),
    (dict(cos=t((4, 128, 1))), ValueError, r"argument 'cos' must be 2-D"),
    (dict(sin=t((5, 128))), ValueError, r"argument 'sin' must have the shape of 'cos' \[4, 128\], got \[5, 128\]"),
    (dict(q_seq_len=Tensor(np.ones((2, 2), np.int32))), ValueError, r"argument 'q_seq_len' must be 1-D"),
    (dict(q_grad=t((0, 256)), k_grad=t((0, 256)), q_seq_len=[1]), ValueError, r"sum\(q_seq_len\) = 1 must equal n_tokens = 0"),
    (dict(q_grad=t((11, 256), ms.int32)), TypeError, r"argument 'q_grad' must be float16, bfloat16 or float32, got int32"),
    (dict(k_grad=t((11, 256), ms.float16)), TypeError, r"argument 'k_grad' must have the dtype of 'q_grad' \(float32\), got float16"),
    (dict(cos=t((4, 128), ms.int32)), TypeError, r"argument 'cos' must be float16, bfloat16 or float32, got int32"),
    (dict(sin=t((4, 128), ms.float16)), TypeError, r"argument 'sin' must have the dtype of 'cos' \(float32\), got float16"),
    (dict(q_seq_len=Tensor(np.array([2.0, 9.0], np.float32))), TypeError, r"argument 'q_seq_len' must be int32 or int64, got float32"),
    (dict(q_seq_len=[2, 1, 4, 3]), ValueError, r"rope_grad: sum\(q_seq_len\) = 10 must equal n_tokens = 11"),
    (dict(q_seq_len=[2, 0, 4, 5]), ValueError, r"rope_grad: q_seq_len\[1\] = 0 must be in \[1, max_seq_len = 4\]"),
    (dict(q_seq_len=[2, 5, 4]), ValueError, r"rope_grad: q_seq_len\[1\] = 5 must be in \[1, max_seq_len = 4\]"),
    (dict(q_seq_len=[]), ValueError, r"argument 'q_seq_len' must be a non-empty 1-D list"),
    (dict(q_seq_len=[2.0, 9.0]), TypeError, r"argument 'q_seq_len' must hold integers, got float64"),
    (dict(q_seq_len="2,9"), TypeError, r"argument 'q_seq_len' must be a sequence of ints or an int tensor, got str"),
    (dict(q_seq_len=None), TypeError, r"argument 'q_seq_len' must be a sequence of ints or an int tensor, got NoneType"),
    (dict(q_grad=np.ones((11, 256), np.float32)), TypeError, r"rope_grad: argument 'q_grad' must be a mindspore Tensor, got ndarray"),
    (dict(mode="grad"), ValueError, r"rope_grad: attribute 'mode' must be \"atb\" or \"vjp\", got \"grad\""),
]


def _rope_args(**over: object) -> dict:
    args = dict(q_grad=t((11, 256)), k_grad=t((11, 256)), cos=t((4, 128)), sin=t((4, 128)), q_seq_len=[2, 1, 4, 4])
    args.update(over)
    return args


@pytest.mark.parametrize("override,exc,match", ROPE_CASES)
def test_rope_grad_rejects(override: dict, exc: type, match: str) -> None:
    args = _rope_args(**override)
    mode = args.pop("mode", "atb")
    with pytest.raises(exc, match=match):
        mgo.ops.rope_grad(*args.values(), mode=mode)


def test_rope_forward_names_its_own_arguments() -> None:
    with pytest.raises(ValueError, match=r"rope: argument 'k' must have the shape of 'q'"):
        mgo.ops.rope(t((3, 128)), t((3, 256)), t((4, 128)), t((4, 128)), [3])


@pytest.mark.parametrize("lens,match", [
    ([2, 1, 4, 3], r"rope_grad: sum\(q_seq_len\) = 10 must equal n_tokens = 11"),
    ([2, 0, 4, 5], r"rope_grad: q_seq_len\[1\] = 0 must be in \[1, max_seq_len = 4\]"),
    ([2, 5, 4], r"rope_grad: q_seq_len\[1\] = 5 must be in \[1, max_seq_len = 4\]"),
    ([-1, 12], r"rope_grad: q_seq_len\[0\] = -1 must be in"),
])
@pytest.mark.parametrize("int_dtype", [np.int32, np.int64])
def test_malformed_length_tensor_is_a_runtime_error_not_a_crash(exec_mode: str, lens: list[int], match: str,
                                                                int_dtype: type) -> None:
    args = list(_rope_args(q_seq_len=lens_t(lens, int_dtype)).values())
    fn = Fn(mgo.ops.rope_grad) if exec_mode == "graph" else mgo.ops.rope_grad
    with pytest.raises(RuntimeError, match=match):
        out = fn(*args)
        out[0].asnumpy()


@pytest.mark.parametrize("op", ["rope", "rope_grad"])
def test_int64_lengths_beyond_int32_are_not_wrapped(exec_mode: str, op: str) -> None:
    """2**32 + 2 must not be read as 2: [2, 1, 4, 4] would be valid."""
    args = list(_rope_args(q_seq_len=lens_t([2**32 + 2, 1, 4, 4], np.int64)).values())
    fn = getattr(mgo.ops, op)
    with pytest.raises(RuntimeError, match=rf"{op}: q_seq_len\[0\] = 4294967298 must be in \[1, max_seq_len = 4\]"):
        out = (Fn(fn) if exec_mode == "graph" else fn)(*args)
        out[0].asnumpy()


def test_int64_lengths_saturate_where_the_kernel_reads_int32(monkeypatch: pytest.MonkeyPatch) -> None:
    """On Ascend (int32 lengths) a value beyond int32 becomes INT32_MAX or INT32_MIN, never a valid length."""
    from ms_grad_ops.ops import _checks
    monkeypatch.setattr(_checks, "reads_int64", lambda op, arg: False)
    got = _checks.kernel_lengths("rope", "q_seq_len", lens_t([2**32 + 2, -2**32 + 3, 4], np.int64))
    assert got.dtype == ms.int32 and got.asnumpy().tolist() == [2**31 - 1, -2**31, 4]


def _cla(**over: object) -> list:
    args = dict(g=t((5, 3, 8)), og=t((5, 3, 8)), ol=t((5, 3, 8)), zg=t((5, 3)), zl=t((5, 3)))
    args.update(over)
    return list(args.values())


CLA_CASES = [
    (dict(og=t((5, 24))), ValueError, r"cla_gate_backward: argument 'global_attn' must be 3-D, got shape \[5, 24\]"),
    (dict(ol=t((5, 3, 9))), ValueError, r"argument 'local_attn' must have the shape of 'global_attn' \[5, 3, 8\], got \[5, 3, 9\]"),
    (dict(g=t((5, 2, 8))), ValueError, r"argument 'grad_merged' must have the shape of 'global_attn'"),
    (dict(zg=t((5, 3, 1))), ValueError, r"argument 'global_gate_logits' must be 2-D"),
    (dict(zg=t((4, 3)), zl=t((4, 3))), ValueError, r"argument 'global_gate_logits' dim 0 must be T of global_attn = 5, got shape \[4, 3\]"),
    (dict(zg=t((5, 2)), zl=t((5, 2))), ValueError, r"argument 'global_gate_logits' dim 1 must be N of global_attn = 3"),
    (dict(zl=t((5, 2))), ValueError, r"argument 'local_gate_logits' must have the shape of 'global_gate_logits'"),
    (dict(og=t((0, 3, 8)), ol=t((0, 3, 8)), g=t((0, 3, 8)), zg=t((0, 3)), zl=t((0, 3))), ValueError,
     r"argument 'global_attn' must not be empty"),
    (dict(og=t((5, 3, 8), ms.int32)), TypeError, r"argument 'global_attn' must be float16, bfloat16 or float32, got int32"),
    (dict(ol=t((5, 3, 8), ms.float16)), TypeError, r"argument 'local_attn' must have the dtype of 'global_attn' \(float32\)"),
    (dict(zg=t((5, 3), ms.bfloat16)), TypeError, r"argument 'global_gate_logits' must have the dtype of 'global_attn'"),
    (dict(zl=t((5, 3), ms.float16)), TypeError, r"argument 'local_gate_logits' must have the dtype of 'global_attn'"),
    (dict(g=t((5, 3, 8), ms.float16)), TypeError, r"argument 'grad_merged' must have the dtype of 'global_attn'"),
]


@pytest.mark.parametrize("override,exc,match", CLA_CASES)
def test_cla_gate_backward_rejects(override: dict, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        mgo.ops.cla_gate_backward(*_cla(**override))


def test_cla_gate_backward_rejects_layouts_other_than_tnd() -> None:
    with pytest.raises(ValueError, match=r"cla_gate_backward: attribute 'input_attn_layout' must be \"TND\", got \"BSND\""):
        mgo.ops.cla_gate_backward(*_cla(), input_attn_layout="BSND")


def test_cla_gate_merge_names_its_own_op() -> None:
    with pytest.raises(ValueError, match=r"cla_gate_merge: argument 'local_attn' must have the shape of 'global_attn'"):
        mgo.ops.cla_gate_merge(t((5, 3, 8)), t((5, 3, 7)), t((5, 3)), t((5, 3)))


def test_graph_mode_raises_value_error_at_compile(exec_mode: str) -> None:
    fn = Fn(mgo.ops.cla_gate_merge) if exec_mode == "graph" else mgo.ops.cla_gate_merge
    with pytest.raises(ValueError, match=r"cla_gate_merge: argument 'global_gate_logits' dim 0 must be T"):
        fn(t((5, 3, 8)), t((5, 3, 8)), t((4, 3)), t((4, 3)))


def test_unknown_attribute_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"rope_grad: unknown attribute\(s\) \['scale'\]"):
        mgo._custom.primitive("rope_grad", mode="atb", scale=1.0)
